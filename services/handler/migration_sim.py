"""Test-mode live migration, the source side: a SIMULATED memory transfer.

The `test` hypervisor has no memory to copy, so the source handler plays the transfer:
progress is computed from the guest memory (the total) and the migration's bandwidth
setting (0 = unlimited → DEFAULT_RATE), reported at most REPORTS_PER_SECOND times a second,
and the same deadlines as a real migration apply: completionTimeoutPerGiB (times guest GiB, at
least one, as the qemu launcher counts) and progressTimeout (remaining data not shrinking;
a simulated transfer always shrinks it, the check is there for parity). Pure: the caller
passes the clock."""

from __future__ import annotations

import math

import msgspec

from events.catalog import MigrationSettings
from events.quantity import parse_quantity

GiB = 1024**3
DEFAULT_RATE = GiB  # bytes/s when the bandwidth is unlimited
REPORTS_PER_SECOND = 4


class Transfer(msgspec.Struct, kw_only=True):
    migration_uid: str
    total: int
    rate: int
    started_at: float
    completion_timeout: float  # seconds, 0 = none
    progress_timeout: float = 0.0  # seconds, 0 = none
    last_report_at: float | None = None
    least_remaining: int | None = None
    last_progress_at: float = 0.0
    aborted: str = ""  # why, once aborted


class Progress(msgspec.Struct, frozen=True):
    processed: int
    remaining: int
    total: int


class Done(msgspec.Struct, frozen=True):
    pass


class TimedOut(msgspec.Struct, frozen=True):
    reason: str


Step = Progress | Done | TimedOut | None


def guest_memory(manifest: dict[str, object]) -> int:
    spec = manifest.get("spec") or {}
    assert isinstance(spec, dict)
    domain = spec.get("domain") or {}
    res = domain.get("resources") or {}
    mem = (
        (domain.get("memory") or {}).get("guest")
        or (res.get("requests") or {}).get("memory")
        or (res.get("limits") or {}).get("memory")
    )
    return parse_quantity(mem) if mem is not None else 0


def begin(uid: str, manifest: dict[str, object], s: MigrationSettings, now: float) -> Transfer:
    total = max(1, guest_memory(manifest))
    per_gib = s.completion_timeout_per_gib
    # KubeVirt: completionTimeoutPerGiB times the guest memory in GiB (at least one)
    timeout = per_gib * max(1.0, total / GiB) if per_gib > 0 else 0.0
    return Transfer(
        migration_uid=uid,
        total=total,
        rate=s.bandwidth_bytes_per_second or DEFAULT_RATE,
        started_at=now,
        completion_timeout=timeout,
        progress_timeout=float(max(0, s.progress_timeout)),
        last_progress_at=now,
    )


def progress(t: Transfer, now: float) -> Progress:
    processed = min(t.total, int(max(0.0, now - t.started_at) * t.rate))
    return Progress(processed, t.total - processed, t.total)


def finishes_at(t: Transfer) -> float:
    return t.started_at + t.total / t.rate


def step(t: Transfer, now: float) -> Step:
    """What the simulation has to say at `now`: the end, a timeout, a (throttled) progress
    report, or nothing. Mutates the report/progress bookkeeping of `t`."""
    if t.aborted:
        return None
    if now >= finishes_at(t):
        if t.completion_timeout and finishes_at(t) - t.started_at > t.completion_timeout:
            return _timed_out(t, _not_completed(t))
        return Done()
    if t.completion_timeout and now - t.started_at > t.completion_timeout:
        return _timed_out(t, _not_completed(t))
    p = progress(t, now)
    if t.least_remaining is None or p.remaining < t.least_remaining:
        t.least_remaining, t.last_progress_at = p.remaining, now
    elif t.progress_timeout and now - t.last_progress_at > t.progress_timeout:
        n = math.ceil(t.progress_timeout)
        return _timed_out(t, f"Live migration stuck for {n} sec and has been aborted")
    if t.last_report_at is not None and now - t.last_report_at < 1 / REPORTS_PER_SECOND:
        return None
    t.last_report_at = now
    return p


def _not_completed(t: Transfer) -> str:
    n = math.ceil(t.completion_timeout)
    return f"Live migration is not completed after {n} sec and has been aborted"


def _timed_out(t: Transfer, reason: str) -> TimedOut:
    t.aborted = reason
    return TimedOut(reason)


def next_wakeup(t: Transfer, now: float) -> float:
    """Seconds until step() may say something new."""
    candidates = [finishes_at(t) - now]
    if t.completion_timeout:
        candidates.append(t.started_at + t.completion_timeout - now)
    if t.last_report_at is not None:
        candidates.append(t.last_report_at + 1 / REPORTS_PER_SECOND - now)
    return max(0.0, min(candidates))


def due(t: Transfer) -> float:
    """When step() may say something new (the clock's time; next_wakeup's absolute twin)."""
    candidates = [finishes_at(t)]
    if t.completion_timeout:
        candidates.append(t.started_at + t.completion_timeout)
    if t.last_report_at is not None:
        candidates.append(t.last_report_at + 1 / REPORTS_PER_SECOND)
    return min(candidates)
