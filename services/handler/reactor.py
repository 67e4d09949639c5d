"""virt-handler's decider, pure: the node's state and what each input calls for.

The state: the node's VMIs as its events say (`state.py`), its launchers as the fleet
reports them (`Observed`), its migration jobs (`migration.py`). The inputs: the node's
events (durable consumer `virt-handler-<node>`, filters `virt.vmi.*.*.*.<node>`, the
migration events routed to the node and every migration's end), the executors'
observations, and ticks (every second, and when a migration step is due). Each input
decides for the VMI keys and migration jobs it touched, a tick for all of them; a VMI key
is decided by the migration job that owns it, else by `planner.plan`.

Appends carry no OCC: the handler sees only its node's events of an aggregate, so its
version would be wrong; the ids are deterministic and the deciding level-triggered, so a
repeat is a duplicate. The one exception is MigrationStarted: OCC on the version the source
job read from the whole aggregate."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import assert_never, get_args

import msgspec

from events import subjects
from events.catalog import MigrationEvent, NodeSystemInfo, Resources, VMIRemoved
from events.envelope import Context, Decision, Stored
from events.meta import Kind, ResourceKind
from services.handler import imports, migration, reclaim, volumes
from services.handler.effects import (
    Action,
    LauncherSeen,
    MigrationCalled,
    MigrationRead,
    MigrationReported,
    Observation,
    Observed,
    Release,
)
from services.handler.imports import (
    ImportDone,
    ImportProgress,
    Imports,
    ImportStarted,
    RunImport,
)
from services.handler.migration import (
    MigrationNote,
    MigrationState,
    ProgressSent,
    SourceStep,
    Stage,
    TargetJob,
    TargetNoted,
    TargetOver,
    plan_target,
    target_of,
    target_wakeup,
)
from services.handler.migration_source import owns, plan_source, source_wakeup
from services.handler.node_info import NodeConfig, joined_event
from services.handler.planner import plan, released, service_name
from services.handler.reclaim import DiskDeleted
from services.handler.state import NodeState, fold_event, vmi_key
from services.handler.volumes import CopyStarted, Jobs, VolumesCopyDone
from services.runtime.reactor import Note

_COPY_KINDS = (ResourceKind.SNAPSHOT_CONTENT, ResourceKind.RESTORE)
_IMPORT_KINDS = (ResourceKind.DATA_VOLUME, ResourceKind.PVC)  # a bare claim's upload too
_MIGRATION_TYPES = frozenset(t.__name__ for t in get_args(MigrationEvent))


class Joined(msgspec.Struct, frozen=True):
    """NodeJoined went out (once per incarnation)."""


HandlerNote = Joined | MigrationNote | CopyStarted | ImportStarted | reclaim.DiskAsked
Input = Observation | HandlerNote
Output = Decision | Action | Note[Input]


class HandlerState(msgspec.Struct, kw_only=True):
    records: NodeState = msgspec.field(default_factory=dict)
    observed: dict[str, Observed] = msgspec.field(default_factory=dict)  # by VMI key
    migrations: MigrationState = msgspec.field(default_factory=MigrationState)
    copies: Jobs = msgspec.field(default_factory=dict)  # volume copies, by job key
    imports: Imports = msgspec.field(default_factory=dict)  # DataVolume imports, by job key
    reclaims: set[str] = msgspec.field(default_factory=set)  # volume deletions in flight
    joined: bool = False


class HandlerReactor:
    """The handler of one node as a Reactor (bus events) and an Observer (the rest)."""

    def __init__(
        self,
        node: NodeConfig,
        *,
        capacity: Resources,
        labels: dict[str, str],
        info: NodeSystemInfo | None = None,
        qemu: bool = False,
        hypervisor_uri: str = "",
    ) -> None:
        self.node_config = node
        self.node = node.name
        self.name = service_name(node.name)
        self.capacity = capacity
        self.labels = labels
        self.info = info or NodeSystemInfo()
        self.qemu = qemu
        self.hypervisor_uri = hypervisor_uri  # qemu: where a target listens, by default

    def filters(self) -> Sequence[str]:
        # the node's migration events, and every migration's end wherever it is routed
        # (`migration.ENDS`: it ends a source job here); one filter per event type, so
        # that no subject matches two of them
        ends = {t.__name__ for t in migration.ENDS}
        routed = sorted(_MIGRATION_TYPES - ends)
        return [
            subjects.node_filter(Kind.VMI, self.node),
            *(subjects.type_filter(Kind.MIGRATION, t, self.node) for t in routed),
            *(subjects.type_filter(Kind.MIGRATION, t) for t in sorted(ends)),
            subjects.node_filter(ResourceKind.SNAPSHOT_CONTENT, self.node),
            subjects.node_filter(ResourceKind.RESTORE, self.node),
            subjects.node_filter(ResourceKind.DATA_VOLUME, self.node),
            subjects.node_filter(ResourceKind.PVC, self.node),  # uploads into bare claims
            subjects.node_filter(ResourceKind.PV, self.node),  # disks to delete
        ]

    def initial_state(self) -> HandlerState:
        return HandlerState()

    # ------------------------------------------------------------------ folding
    def holds(self, state: HandlerState, key: str) -> bool:
        kind, ns, name = subjects.parse_key(key)
        k = f"{ns}/{name}"
        if kind == Kind.VMI:
            ms = state.migrations
            return (
                k in state.records
                or k in state.observed
                or k in ms.targets
                or any(j.vmi_key == k for j in ms.sources.values())
            )
        if kind == Kind.MIGRATION:
            return k in state.migrations.sources
        if kind in _COPY_KINDS:
            return any(j.startswith(f"{kind}/{ns}/{name}/") for j in state.copies)
        if kind in _IMPORT_KINDS:
            return any(j.startswith(f"{kind}/{ns}/{name}/") for j in state.imports)
        return True  # its node, and anything else it folds: few, kept

    def evolve(self, state: HandlerState, stored: Stored) -> HandlerState:
        if stored.event.meta.aggregate.kind in _COPY_KINDS:
            volumes.fold(state.copies, stored)
            return state
        if stored.event.meta.aggregate.kind in _IMPORT_KINDS:
            imports.fold(state.imports, stored)
            return state
        fold_event(state.records, stored)
        migration.note_newer(state.migrations, stored)
        migration.fold(state.migrations, state.records, stored, self.node)
        migration.note_seen(state.migrations, stored)
        if stored.event.meta.aggregate.kind == Kind.VMI:
            key = vmi_key(stored.event)
            target = state.migrations.targets.get(key)
            if (
                isinstance(stored.event, VMIRemoved)
                and target is not None
                and target.outcome == "succeeded"
                and target.vmi_uid == stored.event.meta.aggregate.uid
            ):
                # the VMI that migrated in is gone (its record with it): so is its arrival
                del state.migrations.targets[key]
            # a handed-off source job holds its VMI until its LauncherExited is back
            sources = state.migrations.sources
            for mkey in [m for m, j in sources.items() if j.vmi_key == key]:
                if sources[mkey].stage is Stage.DONE and not owns(sources[mkey], state.records):
                    del sources[mkey]
        return state

    def observe(self, state: HandlerState, obs: Input) -> HandlerState:
        match obs:
            case LauncherSeen(key=key, observed=o):
                if o is None:
                    state.observed.pop(key, None)
                else:
                    state.observed[key] = o
            case MigrationRead() | MigrationCalled() | MigrationReported():
                migration.observe(state.migrations, obs)
            case Joined():
                state.joined = True
            case CopyStarted() | VolumesCopyDone():
                volumes.observe(state.copies, obs)
            case ImportStarted() | ImportProgress() | ImportDone():
                imports.observe(state.imports, obs)
            case reclaim.DiskAsked() | DiskDeleted():
                reclaim.observe(state.reclaims, obs)
            case TargetNoted() | TargetOver() | SourceStep() | ProgressSent():
                migration.note(state.migrations, obs)
            case _:
                assert_never(obs)
        return state

    # ------------------------------------------------------------------ deciding
    def react(self, state: HandlerState, stored: Stored, ctx: Context) -> list[Output]:
        event = stored.event
        agg = event.meta.aggregate
        vkeys: list[str] = []
        mkeys: list[str] = []
        if agg.kind in _COPY_KINDS:
            return self._copy(state, volumes.job_key(agg))
        if agg.kind in _IMPORT_KINDS:
            return self._import(state, imports.job_key(agg), ctx.now)
        if agg.kind == ResourceKind.PV:
            return [*reclaim.plan(state.reclaims, stored)]
        if agg.kind == Kind.VMI:
            vkeys.append(vmi_key(event))
        elif agg.kind == Kind.MIGRATION and event.meta.node == self.node:
            target = target_of(state.migrations, agg)
            if target is not None:
                vkeys.append(target.vmi_key)
            mkey = f"{agg.namespace}/{agg.name}"
            if mkey in state.migrations.sources:
                mkeys.append(mkey)
        return self._decide(state, vkeys, mkeys, ctx.now)

    def respond(self, state: HandlerState, obs: Input, ctx: Context) -> list[Output]:
        match obs:
            case LauncherSeen(key=key):
                return self._decide(state, [key], [], ctx.now)
            case MigrationRead() | MigrationCalled() | MigrationReported():
                return self._decide(state, [], [obs.key], ctx.now)
            case VolumesCopyDone():
                event = volumes.answer(state.copies, obs, self.node, self.name, ctx.now)
                return [] if event is None else [Decision(event, occ=False)]
            case ImportProgress() | ImportDone():
                made = imports.answer(state.imports, obs, self.node, self.name, ctx.now)
                return [] if made is None else [Decision(made, occ=False)]
            case DiskDeleted():
                return [Decision(reclaim.answer(obs, self.node, self.name, ctx.now), occ=False)]
            case (
                Joined()
                | TargetNoted()
                | TargetOver()
                | SourceStep()
                | ProgressSent()
                | CopyStarted()
                | ImportStarted()
                | reclaim.DiskAsked()
            ):
                return []  # its own note: decided where it was made
            case _:
                assert_never(obs)

    def tick(self, state: HandlerState, ctx: Context) -> list[Output]:
        out: list[Output] = []
        if not state.joined:
            joined = joined_event(self.node_config, self.capacity, self.labels, ctx.now, self.info)
            out += [Decision(joined, occ=False), Note(Joined())]
        ms = state.migrations
        vkeys = [*state.records, *(k for k in state.observed if k not in state.records)]
        vkeys += [k for k in ms.targets if k not in state.records and k not in state.observed]
        mkeys = [k for k, job in ms.sources.items() if job.stage is not Stage.DONE]
        for key, job in state.copies.items():
            if not job.done:
                out += self._copy(state, key)
        for key, ijob in state.imports.items():
            if not ijob.done:
                out += self._import(state, key, ctx.now)
        return out + self._decide(state, vkeys, mkeys, ctx.now)

    def wakeup(self, state: HandlerState) -> float | None:
        ms = state.migrations
        times = [source_wakeup(job) for job in ms.sources.values()]
        for key, target in ms.targets.items():
            times.append(target_wakeup(target, state.observed.get(key), self.qemu))
        return min((t for t in times if t is not None), default=None)

    def _decide(
        self, state: HandlerState, vkeys: Iterable[str], mkeys: Iterable[str], now: float
    ) -> list[Output]:
        out: list[Output] = []
        sources = state.migrations.sources
        decided: set[str] = set()
        keys = list(vkeys)
        for mkey in mkeys:
            job = sources.get(mkey)
            if job is not None:
                out += self._source(state, mkey, now)
                decided.add(mkey)
                if job.vmi_key and job.vmi_key not in keys:
                    keys.append(job.vmi_key)  # the planner's again once the job lets go
        for key in keys:
            for mkey, job in sources.items():
                if job.vmi_key == key and job.stage is not Stage.DONE and mkey not in decided:
                    out += self._source(state, mkey, now)
                    decided.add(mkey)
            out += self._decide_key(state, key, now)
        return out

    def _copy(self, state: HandlerState, key: str) -> list[Output]:
        job = state.copies.get(key)
        o = state.observed.get(job.request.vmi) if job is not None and job.request.vmi else None
        running = o is not None and o.connected and not o.gone and o.final is None
        domain = o.domain_name if o is not None and running else ""
        out: list[Output] = []
        for step in volumes.plan(state.copies, key, domain):
            out.append(Note(step) if isinstance(step, CopyStarted) else step)
        return out

    def _import(self, state: HandlerState, key: str, now: float) -> list[Output]:
        out: list[Output] = []
        for step in imports.plan(state.imports, key, self.node, self.name, now):
            if isinstance(step, ImportStarted):
                out.append(Note(step))
            elif isinstance(step, RunImport):
                out.append(step)
            else:
                out.append(Decision(step, occ=False))
        return out

    def _source(self, state: HandlerState, mkey: str, now: float) -> list[Output]:
        job = state.migrations.sources[mkey]
        return [*plan_source(job, mkey, state.records, state.observed, self.node, self.qemu, now)]

    def _decide_key(self, state: HandlerState, key: str, now: float) -> list[Output]:
        ms = state.migrations
        if any(j.vmi_key == key and owns(j, state.records) for j in ms.sources.values()):
            return []  # the source job decides
        o = state.observed.get(key)
        target = ms.targets.get(key)
        if target is not None:
            return self._target(target, o, now)
        r = state.records.get(key)
        planned = plan(key, r, o, self.node, now)
        if not planned:
            return [Release(key)] if o is not None and released(r, o) else []
        return [*planned]

    def _target(self, job: TargetJob, o: Observed | None, now: float) -> list[Output]:
        return [*plan_target(job, o, self.node, self.qemu, self._address(o), now)]

    def _address(self, o: Observed | None) -> str:
        """Where the source migrates to: the node's address (test mode, simulated), the
        target launcher's libvirt URI (qemu mode)."""
        if not self.qemu:
            return self.node_config.address
        if o is not None and o.hypervisor_uri:
            return o.hypervisor_uri
        return self.hypervisor_uri
