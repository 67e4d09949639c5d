"""The handler's pure core: what the events say (VMIRecord) vs what the launcher says
(Observed) → what to do (spawn a launcher, send it a command, append an event), in the
handler's vocabulary of effects (`effects.py`).

Level-triggered: `plan` looks only at the two states, never at "the event in hand", so a
redelivered event, a handler restart or a repeated status report plans nothing new. Event
ids are derived from the VMI uid and a count taken from the record
(`virt-handler-<node>/<uid>/<what>`), so a plan repeated before its own append was folded
produces the same ids and JetStream drops the duplicate.
"""

from __future__ import annotations

import msgspec

from events.catalog import (
    DomainMigratedIn,
    DomainPaused,
    DomainResumed,
    DomainSoftRebooted,
    DomainStarted,
    DomainStopped,
    Event,
    LauncherExited,
    LauncherStarted,
    Manifest,
    StopReason,
)
from events.envelope import Decision
from events.meta import Actor, Aggregate, Kind, Meta
from services.handler.effects import Cleanup, Launch, Observed, Send
from services.handler.state import VMIRecord
from services.launcher.domain_state import ACTIVE_STATES, DomainState, StateReason
from services.launcher.protocol import (
    DomainStatus,
    Pause,
    Resume,
    Shutdown,
    SoftReboot,
    Start,
)

# What the planner asks for: appends, and launcher actions of the handler's effects
Planned = Decision | Launch | Send | Cleanup


_STOP_REASONS = {
    StateReason.SHUTDOWN: StopReason.SHUTDOWN,
    StateReason.DESTROYED: StopReason.DESTROYED,
    StateReason.CRASHED: StopReason.CRASHED,
    StateReason.PANICKED: StopReason.CRASHED,
    StateReason.FAILED: StopReason.FAILED,
    StateReason.MIGRATED: StopReason.MIGRATED,
}


def stop_reason(status: DomainStatus) -> StopReason:
    if status.state is DomainState.CRASHED:
        return StopReason.CRASHED
    return _STOP_REASONS.get(status.reason, StopReason.SHUTDOWN)


def service_name(node: str) -> str:
    return f"virt-handler-{node}"


def handler_meta(r: VMIRecord, node: str, what: str, now: float) -> Meta:
    name = service_name(node)
    return Meta(
        event_id=f"{name}/{r.id_scope or r.uid}/{what}",
        aggregate=Aggregate(kind=Kind.VMI, namespace=r.namespace, name=r.name, uid=r.uid),
        occurred_at=now,
        correlation_id=r.correlation_id or f"{name}/{r.uid}",
        causation_id=r.causation_id,
        actor=Actor(service=name, node=node),
        node=node,
    )


def launch_manifest(manifest: Manifest, key: str, uid: str) -> bytes:
    """What a launcher is spawned with: the VMI manifest, its metadata filled in."""
    ns, name = key.split("/", 1)
    meta = dict(manifest.get("metadata") or {})
    meta.setdefault("namespace", ns)
    meta.setdefault("name", name)
    meta["uid"] = uid
    return msgspec.json.encode({**manifest, "metadata": meta})


def plan(key: str, r: VMIRecord | None, o: Observed | None, node: str, now: float) -> list[Planned]:
    """What one VMI key ("ns/name") on this node calls for. Its appends carry no OCC (the
    handler sees only its node's events of an aggregate; the ids make a repeat a duplicate)."""
    if o is not None and (r is None or r.uid != o.uid or r.exited):
        # orphan: destroy it unless it is already on its way out
        if not o.spawning and not o.gone and o.final is None and o.shutdown_grace != 0:
            return [Cleanup(key=key)]
        return []
    if r is None:
        return []
    out: list[Planned] = []

    def emit(event: Event) -> None:
        out.append(Decision(event, occ=False))

    if o is None:
        if r.launcher_pid == 0 and not r.migrated_in and not r.wants_stop and not r.stopped:
            return [Launch(key, r.uid, launch_manifest(r.manifest, key, r.uid))]
        if (r.launcher_pid or r.migrated_in) and not r.exited:
            # the launcher vanished while nobody watched (e.g. killed while the handler was down)
            if not r.stopped:
                emit(
                    DomainStopped(
                        meta=handler_meta(r, node, "DomainStopped", now),
                        reason=StopReason.FAILED,
                        message="virt-launcher disappeared",
                    )
                )
            emit(
                LauncherExited(
                    meta=handler_meta(r, node, "LauncherExited", now), node=node, pod_uid=r.pod_uid
                )
            )
        return out
    if o.spawning:
        return []
    if o.spawn_error:
        if o.uid == r.uid and not r.stopped:
            emit(
                DomainStopped(
                    meta=handler_meta(r, node, "DomainStopped", now),
                    reason=StopReason.FAILED,
                    message=f"virt-launcher failed to start: {o.spawn_error}",
                )
            )
        return out

    if o.pid and r.launcher_pid != o.pid and not r.exited and not r.migrated_in:
        emit(
            LauncherStarted(
                meta=handler_meta(r, node, f"LauncherStarted/{o.pid}", now),
                node=node,
                pod_uid=r.pod_uid,
                pid=o.pid,
            )
        )
    s = o.status
    final = o.final
    if s is not None and final is None:
        active = s.state in ACTIVE_STATES
        paused = s.state is DomainState.PAUSED
        if active and not r.started:
            emit(
                DomainStarted(
                    meta=handler_meta(r, node, "DomainStarted", now),
                    node=node,
                    domain=o.domain_name,
                    paused=paused,
                    qemu_pid=s.domain_pid or o.domain_pid or 0,
                    domain_type=o.domain_type,
                )
            )
        elif active and r.migrated_in and not r.migrated_in_reported:
            # arrived by live migration: the VMI keeps its phase, only its domain moved
            emit(
                DomainMigratedIn(
                    meta=handler_meta(r, node, "DomainMigratedIn", now),
                    node=node,
                    qemu_pid=s.domain_pid or o.domain_pid or 0,
                    domain_type=o.domain_type,
                )
            )
        elif active and paused and not r.paused:
            emit(
                DomainPaused(meta=handler_meta(r, node, f"DomainPaused/{r.pause_events + 1}", now))
            )
        elif active and s.state is DomainState.RUNNING and r.paused:
            emit(
                DomainResumed(
                    meta=handler_meta(r, node, f"DomainResumed/{r.resume_events + 1}", now)
                )
            )
        if o.reboots_ok > r.soft_reboots:
            emit(
                DomainSoftRebooted(
                    meta=handler_meta(r, node, f"DomainSoftRebooted/{r.soft_reboots + 1}", now)
                )
            )
        out.extend(_commands(r, o, s))
    if final is not None and not r.stopped:
        emit(
            DomainStopped(
                meta=handler_meta(r, node, "DomainStopped", now),
                reason=stop_reason(final),
                grace_period_expired=final.grace_period_expired,
                message=final.message or "",
            )
        )
    if o.gone:
        if final is None and not r.stopped:
            emit(
                DomainStopped(
                    meta=handler_meta(r, node, "DomainStopped", now),
                    reason=StopReason.FAILED,
                    message="virt-launcher exited unexpectedly",
                )
            )
        if not r.exited:
            emit(
                LauncherExited(
                    meta=handler_meta(r, node, "LauncherExited", now), node=node, pod_uid=r.pod_uid
                )
            )
    return out


def released(r: VMIRecord | None, o: Observed) -> bool:
    """A launcher that is gone and has nothing left to report: forget it."""
    if o.spawn_error:
        return r is None or r.uid != o.uid or r.stopped
    return o.gone and (r is None or r.exited or r.uid != o.uid)


def _commands(r: VMIRecord, o: Observed, s: DomainStatus) -> list[Planned]:
    if not o.connected:
        return []
    key = r.key
    if r.wants_stop:
        grace = r.stop_grace
        if o.shutdown_grace is None or grace < o.shutdown_grace:
            return [Send(key, Shutdown(grace_period_seconds=grace))]
        return []
    if o.in_flight:
        return []  # one command at a time: the next plan sees its result
    if not r.started and s.state is DomainState.SHUTOFF and not o.start_sent:
        return [Send(key, Start(paused=r.start_paused))]
    if s.state is DomainState.RUNNING and r.want_paused is True and not r.paused:
        return [Send(key, Pause())]
    if s.state is DomainState.PAUSED and r.want_paused is False and r.paused:
        return [Send(key, Resume())]
    if r.soft_reboot_requests > max(r.soft_reboots, o.reboots_sent) and s.state in ACTIVE_STATES:
        return [Send(key, SoftReboot())]
    return []
