"""Crash-loop backoff (KubeVirt's status.startFailure).

A VMI that ends without ever reaching Running counts one start failure; the VM's next VMI
waits `delay(n)` from the moment the failed VMI ended: n² * base plus a deterministic jitter
(derived from the failed VMI's uid), capped at `max_delay`. Both the moment and the jitter are
in the log, so a replay computes the same deadline whichever event it notices the failure on.
Cleared once a VMI reaches Running, or when the strategy no longer restarts by itself
(Manual, Halted)."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from events.catalog import Event, VMStartFailed, VMStartFailureCleared
from events.envelope import Context
from projections.views import VMIView, VMView
from services.controller import emit

# strategies that restart on their own, and so can crash-loop
RESTARTING = ("Always", "RerunOnFailure")


@dataclass(frozen=True)
class BackoffConfig:
    base: float = 5.0  # seconds for the first failure
    max_delay: float = 300.0
    jitter: float = 0.2  # up to this fraction of the delay is added


def jitter_fraction(uid: str) -> float:
    """A number in [0, 1) that depends only on `uid`."""
    digest = hashlib.sha256(uid.encode()).digest()
    return int.from_bytes(digest[:4], "big") / 2**32


def delay(count: int, uid: str, cfg: BackoffConfig) -> float:
    base = cfg.base * count * count
    return min(cfg.max_delay, base * (1 + cfg.jitter * jitter_fraction(uid)))


def ended_at(vmi: VMIView) -> float | None:
    """When the VMI entered its present phase (its end, for a final one)."""
    return next((at for phase, at in reversed(vmi.transitions) if phase == vmi.phase), None)


def failed_to_start(vmi: VMIView) -> bool:
    """Ended without ever running, and not because someone deleted it first."""
    if not vmi.final or vmi.ever_running:
        return False
    if vmi.deletion_requested_at is None:
        return True
    end = ended_at(vmi)
    return end is not None and end < vmi.deletion_requested_at


def blocked(vm: VMView, now: float) -> bool:
    """The VM must wait before its next VMI."""
    return vm.start_failure is not None and now < vm.start_failure.retry_after


def reconcile(vm: VMView, vmi: VMIView | None, ctx: Context, cfg: BackoffConfig) -> list[Event]:
    sf = vm.start_failure
    if vm.deleted_at is not None:
        return []
    if sf is not None and vm.run_strategy not in RESTARTING:
        return [_cleared(vm, ctx)]
    if vmi is None:
        return []
    if sf is not None and vmi.ever_running and vmi.uid != sf.last_failed_vmi_uid:
        return [_cleared(vm, ctx)]
    if (
        vm.run_strategy in RESTARTING
        and failed_to_start(vmi)
        and (sf is None or sf.last_failed_vmi_uid != vmi.uid)
    ):
        count = (sf.consecutive_fail_count if sf else 0) + 1
        end = ended_at(vmi)
        return [
            VMStartFailed(
                meta=emit.meta(ctx, emit.vm_aggregate(vm), f"start-failed/{vmi.uid}"),
                consecutive_fail_count=count,
                last_failed_vmi_uid=vmi.uid,
                retry_after=(ctx.now if end is None else end) + delay(count, vmi.uid, cfg),
            )
        ]
    return []


def _cleared(vm: VMView, ctx: Context) -> VMStartFailureCleared:
    return VMStartFailureCleared(
        meta=emit.meta(ctx, emit.vm_aggregate(vm), f"start-failure-cleared/{vm.uid}/{vm.version}")
    )
