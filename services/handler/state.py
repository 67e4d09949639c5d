"""What a handler knows from its own node's events: the VMIs assigned to it.

Pure: `fold_event(state, stored)` folds one event routed to this node into the state (its
stored envelope: a record keeps its cause's sequence, which the handler's appends carry as
their `causation_seq`). The state is a plain
dict keyed "ns/name" (a VMI aggregate); a PodScheduled with a new uid replaces the record
of an earlier VMI of the same name (a VM restart creates a new VMI uid).
"""

from __future__ import annotations

from typing import Any, assert_never

import msgspec

from events.catalog import (
    Attachment,
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
    MetadataChanged,
    PodScheduled,
    StopReason,
    Unschedulable,
    VMICreated,
    VMIDeleteRequested,
    VMIEvent,
    VMIEvictionBlocked,
    VMIFailed,
    VMIPauseRequested,
    VMIRemoved,
    VMISoftRebootRequested,
    VMIUnpauseRequested,
    VMIVolumeAdded,
    VMIVolumeRemoved,
    VMIWarning,
    VolumeAttached,
    VolumeDetached,
)
from events.envelope import Stored
from events.meta import Kind

DEFAULT_GRACE_SECONDS = 30
_manifest_decoder = msgspec.json.Decoder(dict[str, Any])


class VMIRecord(msgspec.Struct, frozen=True, kw_only=True):
    """One VMI on this node, as the events say (not as the launcher says)."""

    namespace: str
    name: str
    uid: str
    pod_uid: str
    # the VMI manifest as compact JSON (what the launcher is spawned with): a decoded dict
    # would cost ~5x, held for every VMI on the node
    manifest_json: bytes
    pod_address: str = ""  # PodScheduled's: the guest's address on the pod network
    attachments: tuple[Attachment, ...] = ()  # PodScheduled's: on secondary networks
    # the intent behind the handler's next events (correlation/causation of its appends)
    correlation_id: str = ""
    causation_id: str = ""
    causation_seq: int = 0
    launcher_pid: int = 0  # LauncherStarted
    started: bool = False  # DomainStarted
    paused: bool = False  # the domain's pause state per DomainStarted/Paused/Resumed
    pause_events: int = 0
    resume_events: int = 0
    want_paused: bool | None = None  # last of VMIPauseRequested / VMIUnpauseRequested
    soft_reboot_requests: int = 0
    soft_reboots: int = 0
    stopped: bool = False  # DomainStopped
    # DomainStopped(Migrated): the VMI lives on another node now, whose handler gets its
    # later events (its removal too): its LauncherExited here is the record's end
    migrated_out: bool = False
    exited: bool = False  # LauncherExited
    delete_requested: bool = False
    delete_grace: int | None = None
    failed: bool = False  # VMIFailed (e.g. NodeUnresponsive): destroy the launcher
    # arrived by live migration (MigrationSucceeded on the target): its launcher was started
    # as a migration target, so no LauncherStarted/DomainStarted is reported (they would
    # move the Running VMI back to Scheduled); event ids are scoped by the target pod uid
    # (`id_scope`), so a VMI that returns to a node does not repeat that node's old ids
    migrated_in: bool = False
    id_scope: str = ""
    # DomainMigratedIn folded: the target's QEMU pid/domain type went out (once per arrival)
    migrated_in_reported: bool = False
    last_warning: str = ""  # the event id of the latest VMIWarning (each is reported once)
    # hotplugged volumes the VMI's spec holds (VMIVolumeAdded/Removed): (name, volume and
    # disk as compact JSON), and those attached to the domain (VolumeAttached/Detached)
    hotplug: tuple[tuple[str, bytes, bytes], ...] = ()
    attached: tuple[tuple[str, str], ...] = ()
    volume_events: int = 0  # VolumeAttached/Detached folded: their event ids count them
    agent_connected: bool = False  # GuestAgentChanged
    agent_events: int = 0
    interfaces: tuple[InterfaceStatus, ...] = ()  # GuestInterfacesChanged
    interface_events: int = 0

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def manifest(self) -> Manifest:
        """Decoded per use (a fresh dict)."""
        return _manifest_decoder.decode(self.manifest_json)

    @property
    def spec(self) -> dict[str, Any]:
        return self.manifest.get("spec") or {}

    @property
    def start_paused(self) -> bool:
        return self.spec.get("startStrategy") == "Paused"

    @property
    def termination_grace(self) -> int:
        grace = self.spec.get("terminationGracePeriodSeconds")
        return DEFAULT_GRACE_SECONDS if grace is None else int(grace)

    @property
    def stop_grace(self) -> int:
        """The grace period a stop gets: 0 for a failed VMI (destroy), else the delete's,
        else spec.terminationGracePeriodSeconds."""
        if self.failed:
            return 0
        return self.termination_grace if self.delete_grace is None else self.delete_grace

    @property
    def wants_stop(self) -> bool:
        return self.delete_requested or self.failed

    @property
    def done(self) -> bool:
        """Nothing left to do on this node for it."""
        return self.exited or (self.launcher_pid == 0 and self.wants_stop)


NodeState = dict[str, VMIRecord]


def vmi_key(event: Event) -> str:
    agg = event.meta.aggregate
    return f"{agg.namespace}/{agg.name}"


def manifest_uid(manifest: Manifest) -> str:
    return str((manifest.get("metadata") or {}).get("uid") or "")


def fold_event(state: NodeState, stored: Stored) -> NodeState:
    """Fold one event of this node's stream into the state (mutates and returns `state`:
    the handler owns it alone, and copying per event would be waste)."""
    event = stored.event
    agg = event.meta.aggregate
    if agg.kind != Kind.VMI or not isinstance(event, VMIEvent):
        return state  # a migration's events are `migration.fold`'s, copies `volumes.fold`'s
    key = vmi_key(event)
    if isinstance(event, PodScheduled):
        uid = agg.uid or manifest_uid(event.manifest)
        old = state.get(key)
        if old is not None and old.uid == uid:
            return state  # redelivered
        state[key] = VMIRecord(
            namespace=agg.namespace,
            name=agg.name,
            uid=uid,
            pod_uid=event.pod_uid,
            manifest_json=msgspec.json.encode(event.manifest),
            pod_address=event.pod_address,
            attachments=event.attachments,
            correlation_id=event.meta.correlation_id,
            causation_id=event.meta.event_id,
            causation_seq=stored.seq,
        )
        return state
    r = state.get(key)
    if r is None or (agg.uid and agg.uid != r.uid):
        return state  # an earlier VMI of the same name, or one never scheduled here
    cause = {
        "correlation_id": event.meta.correlation_id,
        "causation_id": event.meta.event_id,
        "causation_seq": stored.seq,
    }
    match event:
        case LauncherStarted(pid=pid):
            r = msgspec.structs.replace(r, launcher_pid=pid)
        case DomainStarted(paused=paused):
            r = msgspec.structs.replace(r, started=True, paused=paused)
        case DomainMigratedIn():
            r = msgspec.structs.replace(r, migrated_in_reported=True)
        case DomainPaused():
            r = msgspec.structs.replace(r, paused=True, pause_events=r.pause_events + 1)
        case DomainResumed():
            r = msgspec.structs.replace(r, paused=False, resume_events=r.resume_events + 1)
        case DomainSoftRebooted():
            r = msgspec.structs.replace(r, soft_reboots=r.soft_reboots + 1)
        case DomainStopped(reason=reason):
            away = reason is StopReason.MIGRATED
            r = msgspec.structs.replace(r, stopped=True, paused=False, migrated_out=away)
        case VMIWarning():
            r = msgspec.structs.replace(r, last_warning=event.meta.event_id)
        case VMIVolumeAdded(volume=volume, disk=disk):
            name = str(volume.get("name"))
            kept = tuple(h for h in r.hotplug if h[0] != name)
            entry = (name, msgspec.json.encode(volume), msgspec.json.encode(disk))
            r = msgspec.structs.replace(r, hotplug=(*kept, entry), **cause)
        case VMIVolumeRemoved(name=name):
            kept = tuple(h for h in r.hotplug if h[0] != name)
            r = msgspec.structs.replace(r, hotplug=kept, **cause)
        case VolumeAttached(name=name, target=target):
            kept_targets = tuple(a for a in r.attached if a[0] != name)
            r = msgspec.structs.replace(
                r, attached=(*kept_targets, (name, target)), volume_events=r.volume_events + 1
            )
        case GuestAgentChanged(connected=connected):
            r = msgspec.structs.replace(
                r, agent_connected=connected, agent_events=r.agent_events + 1
            )
        case GuestInterfacesChanged(interfaces=interfaces):
            r = msgspec.structs.replace(
                r, interfaces=interfaces, interface_events=r.interface_events + 1
            )
        case VolumeDetached(name=name):
            r = msgspec.structs.replace(
                r,
                attached=tuple(a for a in r.attached if a[0] != name),
                volume_events=r.volume_events + 1,
            )
        case LauncherExited():
            if r.migrated_out:
                del state[key]  # nothing of it is left here, nor will be told
                return state
            r = msgspec.structs.replace(r, exited=True)
        case VMIDeleteRequested(grace_period_seconds=grace):
            # a later delete may shorten the grace period, never extend it
            if r.delete_requested and grace is not None and r.delete_grace is not None:
                grace = min(grace, r.delete_grace)
            elif r.delete_requested and grace is None:
                grace = r.delete_grace
            r = msgspec.structs.replace(r, delete_requested=True, delete_grace=grace, **cause)
        case VMIPauseRequested():
            r = msgspec.structs.replace(r, want_paused=True, **cause)
        case VMIUnpauseRequested():
            r = msgspec.structs.replace(r, want_paused=False, **cause)
        case VMISoftRebootRequested():
            r = msgspec.structs.replace(r, soft_reboot_requests=r.soft_reboot_requests + 1, **cause)
        case VMIFailed():
            r = msgspec.structs.replace(r, failed=True, **cause)
        case VMIRemoved():
            del state[key]
            return state
        case VMICreated() | Unschedulable() | VMIEvictionBlocked() | MetadataChanged():
            return state  # before this node, or the controller's
        case _:
            assert_never(event)
    state[key] = r
    return state
