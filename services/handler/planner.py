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

from typing import Any

import msgspec

from events.catalog import (
    GUEST_PANICKED,
    SYNC_FAILED,
    DomainMigratedIn,
    DomainPaused,
    DomainResumed,
    DomainSoftRebooted,
    DomainStarted,
    DomainStopped,
    Event,
    GuestAgentChanged,
    GuestInterfacesChanged,
    InterfaceStatus,
    LauncherExited,
    LauncherStarted,
    Manifest,
    StopReason,
    VMIWarning,
    VolumeAttached,
    VolumeDetached,
)
from events.envelope import Cause, Decision, output_meta
from events.meta import Aggregate, Kind, Meta
from services.handler.effects import Cleanup, Launch, Observed, Rejection, Send
from services.handler.state import VMIRecord
from services.launcher.domain_state import ACTIVE_STATES, DomainState, StateReason
from services.launcher.protocol import (
    AttachVolume,
    Command,
    DetachVolume,
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


#: KubeVirt's Paused condition reasons by the domain's state reason; another reason
#: (Unknown: libvirt could not name it) is reported as it is, and gets no condition
_PAUSE_REASONS = {StateReason.USER: "PausedByUser", StateReason.IO_ERROR: "PausedIOError"}


def pause_reason(status: DomainStatus) -> str:
    return _PAUSE_REASONS.get(status.reason, str(status.reason))


def crash_warning(final: DomainStatus) -> tuple[str, str] | None:
    """The Warning KubeVirt records for a domain that crashed: GuestPanicked (a panic
    reported by the guest's panic device), SyncFailed (a domain that could not run again,
    destroyed as irrecoverable), Stopped (any other crash)."""
    if final.state is DomainState.CRASHED or final.reason is StateReason.PANICKED:
        return GUEST_PANICKED, final.message or "GuestPanicked (details unavailable)"
    if final.reason is not StateReason.CRASHED:
        return None
    if final.message:
        return SYNC_FAILED, f"VMI is irrecoverable due to {final.message}"
    return "Stopped", "The VirtualMachineInstance crashed."


#: Seconds before the next attempt after the n-th refusal of a command; after the last the
#: handler gives up on that request (VMIWarning SyncFailed) instead of retrying forever.
RETRY_BACKOFF_SECONDS = (1.0, 2.0, 4.0, 8.0)
MAX_ATTEMPTS = len(RETRY_BACKOFF_SECONDS) + 1


def _refused(o: Observed, command: Command, cause: str) -> Rejection | None:
    """The refusals of this command for this request so far (None: none)."""
    rj = o.rejected
    if rj is None or rj.command != type(command).__name__ or rj.cause != cause:
        return None
    return rj


def rejected(prev: Rejection | None, command: str, cause: str, error: str, at: float) -> Rejection:
    """`prev` with one more refusal of `command` for `cause` (a streak of the same command
    and request), or a new streak."""
    if prev is not None and prev.command == command and prev.cause == cause:
        return msgspec.structs.replace(prev, error=error, count=prev.count + 1, at=at)
    return Rejection(command=command, cause=cause, error=error, count=1, since=at, at=at)


def given_up(rj: Rejection | None) -> bool:
    return rj is not None and rj.count >= MAX_ATTEMPTS


def retry_at(rj: Rejection | None) -> float:
    """When the command may be sent again (0: now)."""
    if rj is None:
        return 0.0
    return rj.at + RETRY_BACKOFF_SECONDS[min(rj.count, len(RETRY_BACKOFF_SECONDS)) - 1]


def service_name(node: str) -> str:
    return f"virt-handler-{node}"


def handler_meta(r: VMIRecord, node: str, what: str, now: float) -> Meta:
    name = service_name(node)
    agg = Aggregate(kind=Kind.VMI, namespace=r.namespace, name=r.name, uid=r.uid)
    cause = Cause(r.correlation_id or f"{name}/{r.uid}", r.causation_id, r.causation_seq)
    return output_meta(name, node, agg, f"{r.id_scope or r.uid}/{what}", now, cause, node)


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
            manifest = launch_manifest(r.manifest, key, r.uid)
            return [
                Launch(key, r.uid, manifest, pod_address=r.pod_address, attachments=r.attachments)
            ]
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
                DomainPaused(
                    meta=handler_meta(r, node, f"DomainPaused/{r.pause_events + 1}", now),
                    reason=pause_reason(s),
                )
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
        out.extend(_commands(r, o, s, now))
        for gave_up_warning in gave_up(r, o, s, node, now):
            emit(gave_up_warning)
        if active:
            for volume_event in volume_events(r, s, node, now):
                emit(volume_event)
        seen_interfaces = interface_statuses(s)
        if active and s.interfaces and seen_interfaces != r.interfaces:
            n = r.interface_events + 1
            emit(
                GuestInterfacesChanged(
                    meta=handler_meta(r, node, f"GuestInterfacesChanged/{n}", now),
                    interfaces=seen_interfaces,
                )
            )
        if active and s.agent_connected != r.agent_connected:
            emit(
                GuestAgentChanged(
                    meta=handler_meta(r, node, f"GuestAgentChanged/{r.agent_events + 1}", now),
                    connected=s.agent_connected,
                )
            )
    if final is not None and not r.stopped:
        warning = crash_warning(final)
        if warning is not None:
            emit(
                VMIWarning(
                    meta=handler_meta(r, node, f"VMIWarning/{warning[0]}", now),
                    reason=warning[0],
                    message=warning[1],
                )
            )
        emit(
            DomainStopped(
                meta=handler_meta(r, node, "DomainStopped", now),
                reason=stop_reason(final),
                grace_period_expired=final.grace_period_expired,
                message=final.message or (warning[1] if warning else ""),
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


def interface_statuses(s: DomainStatus) -> tuple[InterfaceStatus, ...]:
    """The launcher's report of the guest's NICs as the event carries them."""
    return tuple(
        InterfaceStatus(name=i.name, mac=i.mac, interface_name=i.interface_name,
                        ip_addresses=i.ip_addresses)
        for i in s.interfaces
    )  # fmt: skip


def released(r: VMIRecord | None, o: Observed) -> bool:
    """A launcher that is gone and has nothing left to report: forget it."""
    if o.spawn_error:
        return r is None or r.uid != o.uid or r.stopped
    return o.gone and (r is None or r.exited or r.uid != o.uid)


def _commands(r: VMIRecord, o: Observed, s: DomainStatus, now: float) -> list[Planned]:
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
    command = wanted(r, o, s)
    if command is None:
        rebooting = r.soft_reboot_requests > max(r.soft_reboots, o.reboots_sent)
        return [Send(key, SoftReboot())] if rebooting and s.state in ACTIVE_STATES else []
    rj = _refused(o, command, r.causation_id)
    if given_up(rj) or now < retry_at(rj):
        return []  # backing off, or given up on this request (plan reports it once)
    return [Send(key, command, cause=r.causation_id)]


def wanted(r: VMIRecord, o: Observed, s: DomainStatus) -> Command | None:
    """The command the VMI's record calls for while the domain is as `s` says."""
    if not r.started and s.state is DomainState.SHUTOFF:
        rj = o.rejected
        if not o.start_sent or (rj is not None and rj.command == "Start"):
            return Start(paused=r.start_paused)
        return None
    if s.state is DomainState.RUNNING and r.want_paused is True and not r.paused:
        return Pause()
    if s.state is DomainState.PAUSED and r.want_paused is False and r.paused:
        return Resume()
    if s.state in (DomainState.RUNNING, DomainState.PAUSED):
        wanted_names = {name for name, _, _ in r.hotplug}
        for name, volume, disk in r.hotplug:
            if name not in s.volumes:
                return AttachVolume(name=name, volume=_as_json(volume), disk=_as_json(disk))
        for name in s.volumes:
            if name not in wanted_names:
                return DetachVolume(name=name)
    return None


_json_dict = msgspec.json.Decoder(dict[str, Any])


def _as_json(raw: bytes) -> dict[str, Any]:
    return _json_dict.decode(raw)


def volume_events(r: VMIRecord, s: DomainStatus, node: str, now: float) -> list[Event]:
    """VolumeAttached for a hotplugged volume the launcher reports attached (or at another
    target), VolumeDetached for one it no longer has that the spec no longer holds."""
    out: list[Event] = []
    n = r.volume_events + 1
    attached = dict(r.attached)
    for name, target in s.volumes.items():
        if attached.get(name) != target:
            meta = handler_meta(r, node, f"VolumeAttached/{name}/{n}", now)
            out.append(VolumeAttached(meta=meta, name=name, target=target))
    wanted_names = {name for name, _, _ in r.hotplug}
    for name in attached:
        if name not in s.volumes and name not in wanted_names:
            meta = handler_meta(r, node, f"VolumeDetached/{name}/{n}", now)
            out.append(VolumeDetached(meta=meta, name=name))
    return out


def gave_up(r: VMIRecord, o: Observed, s: DomainStatus, node: str, now: float) -> list[Event]:
    """KubeVirt's SyncFailed Warning, once, when the handler gave up on a request whose
    command the domain kept refusing (the record still calls for it)."""
    command = wanted(r, o, s)
    rj = _refused(o, command, r.causation_id) if command is not None else None
    if rj is None or not given_up(rj):
        return []
    meta = handler_meta(r, node, f"VMIWarning/{SYNC_FAILED}/{rj.command}/{rj.since:.3f}", now)
    if meta.event_id == r.last_warning:
        return []
    message = f"{rj.command} refused {rj.count} times, given up: {rj.error}"
    return [VMIWarning(meta=meta, reason=SYNC_FAILED, message=message)]
