"""What virt-controller knows: the shared cluster projection plus its own bookkeeping.

Everything except `heartbeats` is folded from the event log, so a restarted controller
rebuilds exactly the same state. Heartbeats come from the KV bucket (eventstore/
heartbeats.py) as observations (`node_health.HeartbeatSeen`, folded by
`ControllerReactor.observe`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import assert_never

from events.catalog import (
    DomainMigratedIn,
    DomainPaused,
    DomainResumed,
    DomainSoftRebooted,
    DomainStarted,
    DomainStopped,
    GuestAgentChanged,
    GuestInterfacesChanged,
    LauncherExited,
    LauncherStarted,
    MetadataChanged,
    MigrationAbortRequested,
    NodeUncordoned,
    PodScheduled,
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
from events.meta import Kind, KindToken
from projections.cluster import Cluster, key, view_key
from projections.views import MigrationView, VMIView, VMView
from services.controller.claim_index import ClaimIndex
from services.controller.dependents import Dependents
from services.controller.ownership import Ownership
from services.controller.placement_index import PlacementIndex


@dataclass
class ControllerState:
    cluster: Cluster = field(default_factory=Cluster)
    # node → epoch seconds of its latest heartbeat seen in the KV bucket (not in the log)
    heartbeats: dict[str, float] = field(default_factory=dict)
    # heartbeats are only trusted once the watch runs: before that, nobody times out
    heartbeats_since: float = 0.0
    # vmi uid → its phase when its deletion was requested (a stop of a Running VMI is not
    # a failure even if the guest then dies while shutting down)
    phase_at_delete: dict[str, str] = field(default_factory=dict)
    # vm uid → phase its last removed VMI had when deleted; absent: the VM never had one
    # removed (RerunOnFailure restarts only after "Failed"; Once never restarts)
    last_outcome: dict[str, str] = field(default_factory=dict)
    # migration uid → the node its latest abort request was routed to (an abort of a
    # Running migration must reach the source's handler; the controller relays it if not)
    abort_routed: dict[str, str] = field(default_factory=dict)
    # (vmi uid, node): a drain of that node already reported the VMI as not movable
    eviction_blocked: set[tuple[str, str]] = field(default_factory=set)
    # what the scheduler and the migration pass would otherwise scan every VMI for
    index: PlacementIndex = field(default_factory=PlacementIndex)
    # which replica sets, pools, snapshots, restores, clones, exports an event concerns
    dependents: Dependents = field(default_factory=Dependents)
    # which live VMIs name which claims (a claim's protection, a VMI's claims)
    claims: ClaimIndex = field(default_factory=ClaimIndex)
    # what the garbage collector looks for: owners gone, deletions begun, surplus migrations
    ownership: Ownership = field(default_factory=Ownership)


def evolve(state: ControllerState, s: Stored) -> ControllerState:
    """Fold one event: bookkeeping first (it needs the VMI as it was), then the cluster."""
    ev = s.event
    agg = ev.meta.aggregate
    if agg.kind == Kind.VMI and isinstance(ev, VMIEvent):
        vmi = state.cluster.vmis.get(key(agg.namespace, agg.name))
        if vmi is not None:
            match ev:
                case VMIDeleteRequested():
                    state.phase_at_delete.setdefault(vmi.uid, vmi.phase)
                case VMIRemoved():
                    phase = state.phase_at_delete.pop(vmi.uid, vmi.phase)
                    if vmi.owner_vm_uid:
                        state.last_outcome[vmi.owner_vm_uid] = phase
                case VMIEvictionBlocked(node=node):
                    state.eviction_blocked.add((vmi.uid, node))
                case (
                    VMICreated()
                    | VMIPauseRequested()
                    | VMIUnpauseRequested()
                    | VMISoftRebootRequested()
                    | PodScheduled()
                    | Unschedulable()
                    | VMIFailed()
                    | LauncherStarted()
                    | DomainStarted()
                    | DomainMigratedIn()
                    | DomainPaused()
                    | DomainResumed()
                    | DomainSoftRebooted()
                    | DomainStopped()
                    | LauncherExited()
                    | VMIWarning()
                    | VMIVolumeAdded()
                    | VMIVolumeRemoved()
                    | VolumeAttached()
                    | VolumeDetached()
                    | GuestAgentChanged()
                    | GuestInterfacesChanged()
                    | MetadataChanged()
                ):
                    pass  # the cluster's fold has it all
                case _:
                    assert_never(ev)
    elif agg.kind == Kind.MIGRATION and isinstance(ev, MigrationAbortRequested):
        mig = state.cluster.migrations.get(key(agg.namespace, agg.name))
        if mig is not None and ev.meta.node:
            state.abort_routed[mig.uid] = ev.meta.node
    elif isinstance(ev, NodeUncordoned):  # a later drain reports blocked VMIs afresh
        state.eviction_blocked = {b for b in state.eviction_blocked if b[1] != agg.name}
    # the event's object, and a VMI's VM (its removal may let a deleted VM go)
    k = view_key(agg)
    kinds = (agg.kind, Kind.VM) if agg.kind == Kind.VMI else (agg.kind,)
    before = [(kind, state.cluster.table(kind).get(k)) for kind in kinds]
    touched = state.cluster.apply(s)
    state.index.touched(state.cluster, touched)
    state.dependents.touched(state.cluster, touched)
    state.claims.touched(state.cluster, touched)
    state.ownership.touched(state.cluster, touched)
    for kind, view in before:
        if view is not None:
            _forget_ended(state, kind, k, view)
    return state


def _forget_ended(state: ControllerState, kind: KindToken, k: str, before: object) -> None:
    """An object gone from the views takes its bookkeeping with it: the state holds what
    exists, not every object there ever was (a restart loads it whatever the log's age)."""
    uid = getattr(before, "uid", "")
    if not uid or getattr(state.cluster.table(kind).get(k), "uid", None) == uid:
        return
    match before:
        case VMView():
            state.last_outcome.pop(uid, None)
        case VMIView():
            state.phase_at_delete.pop(uid, None)
            if state.eviction_blocked:
                state.eviction_blocked = {b for b in state.eviction_blocked if b[0] != uid}
        case MigrationView():
            state.abort_routed.pop(uid, None)
        case _:
            pass  # no bookkeeping of its own
