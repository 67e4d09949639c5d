"""virt-controller as a Reactor: folds the whole cluster, reconciles what an event touched,
and on every tick reconciles everything (timers: backoff expiry, heartbeat timeouts).

Each concern is a module of pure functions (run_strategy, backoff, removal, scheduler,
node_health); this module only decides which objects to look at and in what order.
Migrations (migration.py) and drains (evacuation.py) are decided over the whole cluster on
every pass: the parallel limits and FIFO queueing are global, and the non-final migrations
and draining nodes are few. Migration targets are placed before pending VMIs, sharing the
pass's reservations."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from events import subjects
from events.catalog import Event, ResourceDeleted, VolumeReclaimed
from events.envelope import Context, Decision, Stored
from events.meta import Aggregate, Kind, ResourceKind
from projections.cluster import Cluster, key, view_key
from projections.storage import claims_of
from projections.views import ResourceView
from services.controller import (
    backoff,
    clone,
    dataimportcron,
    datavolume,
    evacuation,
    export,
    gc,
    migration,
    node_health,
    removal,
    replicas,
    run_strategy,
    scheduler,
    snapshot,
    storage,
    taint_eviction,
)
from services.controller.backoff import BackoffConfig
from services.controller.policy import MigrationConfig
from services.controller.state import ControllerState
from services.controller.state import evolve as evolve_state

NAME = "virt-controller"


@dataclass(slots=True)
class _Scope:
    vms: set[str] = field(default_factory=set)  # "ns/name"
    vmis: set[str] = field(default_factory=set)
    nodes: set[str] = field(default_factory=set)
    # replica sets, pools, snapshots, restores, clones, exports: (kind, "ns/name");
    # None: all of them (a tick)
    owned: set[tuple[str, str]] | None = None
    claims: set[str] = field(default_factory=set)  # PVCs and DataVolumes, "ns/name"
    released: set[str] = field(default_factory=set)  # uids of deleted claims
    sources: set[str] = field(default_factory=set)  # DataSources
    crons: set[str] = field(default_factory=set)  # DataImportCrons


class ControllerReactor:
    name = NAME

    def __init__(
        self,
        *,
        node_timeout: float = node_health.DEFAULT_NODE_TIMEOUT,
        backoff_config: BackoffConfig | None = None,
        migration_config: MigrationConfig | None = None,
        cluster_nodes: frozenset[str] | None = None,
        export_key: bytes | None = None,
        export_url: str = "",
        indexed: bool = True,
        scheduler_policy: str = scheduler.SPREAD,
        scheduler_weights: scheduler.Weights = (),
    ) -> None:
        if scheduler_policy not in scheduler.POLICIES:
            raise ValueError(f"unknown scheduler policy {scheduler_policy!r}")
        self.node_timeout = node_timeout
        #: the nodes the cluster runs, when known (`virtstream up`); None: any may return
        self.cluster_nodes = cluster_nodes
        self.backoff = backoff_config or BackoffConfig()
        self.migrations = migration_config or MigrationConfig()
        #: what export tokens are derived from, and the api's URL its links name
        self.export_key = export_key
        self.export_url = export_url
        #: an event reconciles only the sets, snapshots, restores, clones and exports it
        #: concerns (services/controller/dependents.py); False: all of them, the full pass
        #: the index must agree with (its property test)
        self.indexed = indexed
        #: how pending VMIs' nodes are scored (scheduler.SPREAD, today's; or PACK)
        self.scheduler_policy = scheduler_policy
        #: scored by these resources' weighted shares instead of allocated memory (whatif)
        self.scheduler_weights = scheduler_weights

    def filters(self) -> Sequence[str]:
        # every kind, as the one filter that says so: JetStream walks every subject of
        # the stream to count what a consumer with several filters has pending (measured
        # 0.3-1.1 s per consumer at 200,000 events, growing with the log), and not for one
        return [subjects.ALL]

    def initial_state(self) -> ControllerState:
        return ControllerState()

    def evolve(self, state: ControllerState, stored: Stored) -> ControllerState:
        return evolve_state(state, stored)

    def holds(self, state: ControllerState, key: str) -> bool:
        kind, ns, name = subjects.parse_key(key)
        return view_key(Aggregate(kind=kind, namespace=ns, name=name)) in state.cluster.table(kind)

    # ------------------------------------------------ observations (heartbeats)
    def observe(self, state: ControllerState, obs: node_health.Observation) -> ControllerState:
        return node_health.observe(state, obs)

    def respond(
        self, state: ControllerState, obs: node_health.Observation, ctx: Context
    ) -> Sequence[Decision]:
        return []  # a heartbeat decides nothing at once: the tick checks every node

    def wakeup(self, state: ControllerState) -> float | None:
        return None

    # ---------------------------------------------------------------- deciding
    def react(self, state: ControllerState, stored: Stored, ctx: Context) -> Sequence[Decision]:
        agg = stored.event.meta.aggregate
        scope = _Scope()
        match agg.kind:
            case Kind.VM | Kind.VMI:
                k = key(agg.namespace, agg.name)
                scope.vms.add(k)
                scope.vmis.add(k)
                scope.claims.update(_claims_of(state, k))
            case ResourceKind.DATA_SOURCE:
                scope.sources.add(key(agg.namespace, agg.name))
            case dataimportcron.KIND_TOKEN:
                scope.crons.add(key(agg.namespace, agg.name))
            case ResourceKind.PVC | ResourceKind.DATA_VOLUME:
                k = key(agg.namespace, agg.name)
                scope.claims.add(k)
                dv = state.cluster.resources[ResourceKind.DATA_VOLUME].get(k)
                if dv is not None and (cron := dataimportcron.cron_of(dv)):
                    scope.crons.add(key(agg.namespace, cron))  # its import's progress
                if agg.kind == ResourceKind.PVC and isinstance(stored.event, ResourceDeleted):
                    scope.released.add(agg.uid)
            case ResourceKind.PV if isinstance(stored.event, VolumeReclaimed):
                return [*storage.reclaimed(state.cluster, agg.name, stored.event.error, ctx)]
            case Kind.NODE:
                scope.nodes.add(agg.name)
                for vmi in state.cluster.vmis_on(agg.name):
                    k = key(vmi.namespace, vmi.name)
                    scope.vmis.add(k)
                    scope.vms.add(k)
            case _:
                pass  # migrations and policies: decided cluster-wide in _decide
        if self.indexed:
            scope.owned = state.dependents.concerned(state.cluster, agg)
        collect = isinstance(stored.event, gc.TRIGGERS)
        return self._decide(state, scope, ctx, check_nodes=False, collect=collect)

    def tick(self, state: ControllerState, ctx: Context) -> Sequence[Decision]:
        c = state.cluster
        # the nodes VMIs are on too: one deleted leaves them to fail
        scope = _Scope(vms=set(c.vms), vmis=set(c.vmis), nodes={*c.nodes, *c.vmis_by_node})
        scope.claims.update(c.resources[ResourceKind.PVC])
        scope.claims.update(c.resources[ResourceKind.DATA_VOLUME])
        scope.sources.update(c.resources[ResourceKind.DATA_SOURCE])
        scope.crons.update(c.resources[dataimportcron.KIND_TOKEN])
        return self._decide(state, scope, ctx, check_nodes=True, collect=True)

    def _decide(
        self,
        state: ControllerState,
        scope: _Scope,
        ctx: Context,
        *,
        check_nodes: bool,
        collect: bool,
    ) -> list[Decision]:
        """`collect`: run the garbage collector (on a tick, and after an event that may
        have left dependents without their owner)."""
        c = state.cluster
        out: list[Event] = []
        sets: list[Decision] = []
        for name in sorted(scope.nodes):
            node = c.nodes.get(name)
            if node is None:
                out += node_health.fail_vmis_of_deleted(c, name, ctx)
                continue
            if check_nodes:
                out += node_health.check(state, node, ctx, self.node_timeout, self.cluster_nodes)
            out += node_health.fail_stranded_vmis(c, node, ctx)
        for k in sorted(scope.vmis):
            vmi = c.vmis.get(k)
            if vmi is not None:
                out += removal.reconcile(vmi, c, ctx)
        for k in sorted(scope.vms):
            vm = c.vms.get(k)
            if vm is None:
                continue
            # backoff first: a failed start must be on record before the VMI is replaced
            out += backoff.reconcile(vm, c.vmi_of_vm(vm), ctx, self.backoff)
            out += run_strategy.reconcile(state, vm, ctx)
            sets += datavolume.reconcile_templates(c, vm, ctx)
        sets += _storage(state, scope, ctx)
        if scope.owned is None or scope.owned:  # (most events concern none of these)
            sets += self._owned_sets(c, scope, ctx)
        if collect:
            out += gc.collect(c, state.ownership, ctx)
        # the migrations and the pending VMIs are the index's: none, nothing to look at
        reserved = scheduler.Reserved() if state.index.active_migrations else None
        if reserved is not None:
            out += migration.reconcile(state, ctx, self.migrations, reserved)
        out += evacuation.reconcile(state, ctx, self.migrations)
        out += taint_eviction.reconcile(state, ctx, self.migrations)
        if state.index.unplaced:
            out += scheduler.schedule_pending(
                c, ctx, reserved, state.index, self.scheduler_policy, self.scheduler_weights
            )
        return [Decision(ev) for ev in _unique(out)] + sets

    def _owned_sets(self, c: Cluster, scope: _Scope, ctx: Context) -> list[Decision]:
        """Replica sets, pools, snapshots, restores, clones, exports: those the event
        concerns (a content whose snapshot is gone is the garbage collector's)."""
        sets: list[Decision] = []
        for rs in _owned(c, scope, ResourceKind.VMIRS):
            sets += replicas.reconcile_replicaset(c, rs, ctx)
        for pool in _owned(c, scope, ResourceKind.VMPOOL):
            sets += replicas.reconcile_pool(c, pool, ctx)
        for snap in _owned(c, scope, ResourceKind.SNAPSHOT):
            sets += snapshot.reconcile_snapshot(c, snap, ctx)
        for restore in _owned(c, scope, ResourceKind.RESTORE):
            sets += snapshot.reconcile_restore(c, restore, ctx)
        for vm_clone in _owned(c, scope, ResourceKind.CLONE):
            sets += clone.reconcile_clone(c, vm_clone, ctx)
        for vm_export in _owned(c, scope, ResourceKind.EXPORT):
            sets += export.reconcile_export(
                c, vm_export, ctx, key_=self.export_key, base_url=self.export_url
            )
        return sets


def _owned(c: Cluster, scope: _Scope, kind: str) -> list[ResourceView]:
    """The objects of `kind` the pass reconciles: all on a tick, else those the event
    concerns (sorted: a pass is deterministic)."""
    if scope.owned is None:
        return list(c.resources[kind].values())
    table = c.resources[kind]
    keys = sorted(k for kd, k in scope.owned if kd == kind)
    return [table[k] for k in keys if k in table]


def _claims_of(state: ControllerState, vmi_key: str) -> set[str]:
    """The claims a VMI names: from the index while it lives, from its manifest once it
    ended (its end may let a claim's deletion finish)."""
    found = set(state.claims.claims(vmi_key))
    vmi = state.cluster.vmis.get(vmi_key)
    if not found and vmi is not None and vmi.final:
        found = {key(vmi.namespace, c) for c in claims_of(vmi.manifest)}
    return found


def _storage(state: ControllerState, scope: _Scope, ctx: Context) -> list[Decision]:
    """The claims and DataVolumes the event touched (a claim and its DataVolume share a
    name), and the volumes of deleted claims."""
    c = state.cluster
    out: list[Decision] = []
    for k in sorted(scope.claims):
        dv = c.resources[ResourceKind.DATA_VOLUME].get(k)
        if dv is not None:
            out += datavolume.reconcile_dv(c, dv, ctx)
        claim = c.resources[ResourceKind.PVC].get(k)
        if claim is not None:
            out += storage.reconcile_claim(c, claim, state.claims.users(k), ctx)
            out += datavolume.reconcile_claim_upload(c, claim, ctx)
    for uid in sorted(scope.released):
        out += storage.released(c, uid, ctx)
    for k in sorted(scope.sources):
        ds = c.resources[ResourceKind.DATA_SOURCE].get(k)
        if ds is not None:
            out += datavolume.reconcile_source(c, ds, ctx)
    for k in sorted(scope.crons):
        cron = c.resources[dataimportcron.KIND_TOKEN].get(k)
        if cron is not None:
            out += dataimportcron.reconcile(c, cron, ctx)
    return out


def _unique(events: Iterable[Event]) -> list[Event]:
    """The same decision reached twice in one pass (by two routes) is appended once."""
    seen: set[str] = set()
    out = []
    for ev in events:
        if ev.meta.event_id not in seen:
            seen.add(ev.meta.event_id)
            out.append(ev)
    return out
