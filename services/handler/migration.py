"""virt-handler's part of live migration, pure: the jobs folded from the migration events
routed to this node, the notes that keep what a job did, and the target side's planning
(the source side's is `migration_source.py`).

State (`MigrationState`) is folded from the migration events ROUTED to this node (meta.node),
so a restarted handler rebuilds exactly what it had; events it appended for another node
(TargetPrepared → source, MigrationSucceeded/Aborted → target) are never delivered here:
what a job sent of those is kept by notes, in memory. The one exception: a migration's
end (`ENDS`: MigrationSucceeded, MigrationFailed, MigrationAborted) is delivered to every
handler, wherever it is routed, and ends a source job here that is not running anything
(`source_ended`): the log alone says a source job is over, so a restarted handler never
reads an ended migration again, and its fold (and checkpoint) holds the live ones only.

Target (MigrationScheduled routed here): TargetPreparing, spawn the target launcher (test
mode: a normal launcher, Start(paused=True); qemu mode: `migration_target=True`, it waits
for the incoming domain) → TargetPrepared(address) routed to the SOURCE. The target never
reports LauncherStarted/DomainStarted on the VMI (the VMI is Running on the source; those
would move it back to Scheduled). MigrationSucceeded (routed here) turns the job into an
ordinary VMIRecord (`migrated_in`): test mode resumes the domain; from then on the planner
reports the VMI's domain events from this node, first DomainMigratedIn (the target QEMU's
pid and domain type, no phase change). MigrationFailed/Aborted → destroy the
target launcher. The target launcher dying first → MigrationFailed("Target pod is down")
routed to the source.

While a job is active the VMI key is OWNED by it: `planner.plan` is not consulted for it
(the source's handoff pause/stop and the target's paused, not-yet-ours domain are not VMI
events). Event ids are `virt-handler-<node>/<migration uid>/<what>[/<n>]`.
"""

from __future__ import annotations

import enum
from typing import assert_never

import msgspec

from events.catalog import (
    Manifest,
    MetadataChanged,
    MigrationAborted,
    MigrationAbortRequested,
    MigrationEvent,
    MigrationFailed,
    MigrationPending,
    MigrationProgressed,
    MigrationRequested,
    MigrationScheduled,
    MigrationScheduling,
    MigrationSettings,
    MigrationStarted,
    MigrationSucceeded,
    TargetPrepared,
    TargetPreparing,
)
from events.envelope import Cause, Decision, Stored, output_meta
from events.meta import Aggregate, Kind, Meta
from projections.views import MigrationView
from services.handler import migration_sim as sim
from services.handler.effects import (
    Launch,
    MigrationCalled,
    MigrationRead,
    MigrationReported,
    Observed,
    Send,
)
from services.handler.planner import launch_manifest, service_name
from services.handler.state import NodeState, VMIRecord
from services.launcher.domain_state import DomainState
from services.launcher.protocol import MigrationProgress, MigrationResult, Resume, Shutdown, Start
from services.runtime.reactor import Note

TARGET_POD_DOWN = "Target pod is down"
ABORTED_BY_USER = "Migration aborted by user"
SOURCE_GONE = "Source virt-launcher exited during the migration"
# qemu mode: a target launcher that exits because the source aborted is not "down"; wait
# this long for the source's MigrationAborted before calling it so
TARGET_GONE_GRACE = 2.0
READ_RETRY = 1.0  # after a failed read of a migration aggregate


# ---------------------------------------------------------------- folded state
class TargetJob(msgspec.Struct, kw_only=True):
    """This node is the migration's target (MigrationScheduled routed here)."""

    migration: Aggregate
    vmi_key: str
    vmi_uid: str
    source_node: str
    target_pod_uid: str
    manifest: Manifest
    settings: MigrationSettings
    correlation_id: str = ""
    causation_id: str = ""
    causation_seq: int = 0
    preparing: bool = False  # TargetPreparing
    outcome: str = ""  # "" | "succeeded" | "failed" (routed here by the source/controller)
    # in memory only (their events are routed away; re-appending them is a duplicate)
    prepared_sent: bool = False
    failure_sent: bool = False


class Stage(enum.Enum):
    """Where a source job stands (in memory: a restarted handler reads the aggregate again
    and goes on from what it says)."""

    READ = "read"  # read the migration aggregate (again)
    READING = "reading"  # a read is under way
    JUDGE = "judge"  # decide from what was read: start it, run it, or nothing to do
    TRANSFER = "transfer"  # test mode: the simulated transfer, then the handoff
    MIGRATE = "migrate"  # qemu mode: MigrateTo to the launcher
    RELAY = "relay"  # qemu mode: relay the launcher's progress until its result
    SUCCEEDED = "succeeded"  # qemu mode: MigrationSucceeded out, await the final status
    HANDED_OFF = "handed_off"  # DomainStopped(Migrated) out, await the launcher's exit
    DONE = "done"


# the VMI is the job's while it stands here
SOURCE_OWNS = frozenset(
    {Stage.TRANSFER, Stage.MIGRATE, Stage.RELAY, Stage.SUCCEEDED, Stage.HANDED_OFF}
)


class SourceJob(msgspec.Struct, kw_only=True):
    """This node is the migration's source (TargetPrepared routed here)."""

    migration: Aggregate
    target_node: str
    target_address: str
    target_pod_uid: str
    correlation_id: str = ""
    causation_id: str = ""
    causation_seq: int = 0
    started: bool = False  # MigrationStarted
    progress_events: int = 0
    abort_requested: bool = False
    failure: str = ""  # a MigrationFailed routed here while Running: its reason
    # the last sequence of its migration's events folded here (its TargetPrepared at
    # least): a read of the aggregate that ends before it is no answer (`observe`)
    seen: int = 0
    # in memory
    stage: Stage = Stage.READ
    since: float = 0.0  # when the stage began (the waits of the handoff)
    read_again_at: float = 0.0  # after a failed read
    view: MigrationView | None = None  # the aggregate as read
    scheduled: MigrationScheduled | None = None  # its settings and manifest
    vmi_key: str = ""
    vmi_uid: str = ""
    transfer: sim.Transfer | None = None  # test mode
    progress_sent: int = 0  # MigrationProgressed appended by this incarnation
    last_report_at: float | None = None
    progress: MigrationProgress | None = None  # qemu: the latest report not relayed yet
    called: MigrationCalled | None = None  # qemu: the launcher's answer to MigrateTo
    abort_sent: bool = False  # qemu: AbortMigration sent
    result: MigrationResult | None = None  # qemu: the launcher's result
    reports_ended: bool = False  # qemu: the connection ended before a result
    handed_off: bool = False  # the VMI's DomainStopped(Migrated) went out from here


class MigrationState(msgspec.Struct, kw_only=True):
    targets: dict[str, TargetJob] = msgspec.field(default_factory=dict)  # by VMI key
    sources: dict[str, SourceJob] = msgspec.field(default_factory=dict)  # by migration key

    def owns(self, key: str) -> bool:
        """A job decides for this VMI key now (the planner does not)."""
        return key in self.targets or any(
            j.vmi_key == key and j.stage in SOURCE_OWNS for j in self.sources.values()
        )


# ---------------------------------------------------------------- notes
class TargetNoted(msgspec.Struct, frozen=True):
    """A target's TargetPrepared / TargetPodDown went out (routed to the source)."""

    key: str  # the VMI's
    prepared: bool = False
    failed: bool = False


class TargetOver(msgspec.Struct, frozen=True):
    """The target job is over here: the planner decides for the VMI from now on."""

    key: str


class SourceStep(msgspec.Struct, frozen=True):
    """A source job moves on (`transfer`: the simulation it starts)."""

    key: str  # the migration's
    stage: Stage
    at: float = 0.0
    transfer: sim.Transfer | None = None


class ProgressSent(msgspec.Struct, frozen=True):
    """MigrationProgressed/<n> went out (`transfer`: the simulation's bookkeeping after)."""

    key: str
    n: int
    at: float
    transfer: sim.Transfer | None = None


MigrationNote = TargetNoted | TargetOver | SourceStep | ProgressSent


def _key(agg: Aggregate) -> str:
    return f"{agg.namespace}/{agg.name}"


# a migration's final events: delivered to every handler (`ENDS`), routed anywhere
ENDS = (MigrationSucceeded, MigrationFailed, MigrationAborted)
# a source job at these stages is running nothing: its migration's end is its end
_IDLE = frozenset({Stage.READ, Stage.READING, Stage.JUDGE})


def source_ended(ms: MigrationState, agg: Aggregate) -> None:
    """The migration ended (one of `ENDS`, routed anywhere): its source job here, unless
    it is carrying out its part (a transfer, a handoff: it ends itself then), is over.
    That is what reading the aggregate again would have found (`view.final`)."""
    mkey = _key(agg)
    job = ms.sources.get(mkey)
    if job is None or (agg.uid and job.migration.uid not in ("", agg.uid)):
        return
    if job.stage in _IDLE:
        del ms.sources[mkey]


def fold(ms: MigrationState, records: NodeState, stored: Stored, node: str) -> str | None:
    """Fold one migration event into the state (mutates). Only events routed to `node`
    count, and the migration's end wherever it is routed. Returns the VMI key of a target
    job it touched, else None."""
    event = stored.event
    agg = event.meta.aggregate
    if agg.kind != Kind.MIGRATION or not isinstance(event, MigrationEvent):
        return None
    if event.meta.node != node:
        if isinstance(event, ENDS):
            source_ended(ms, agg)
        return None
    corr, caus, caus_seq = event.meta.correlation_id, event.meta.event_id, stored.seq
    mkey = _key(agg)
    match event:
        case MigrationScheduled():
            vkey = f"{agg.namespace}/{event.vmi_name}"
            old = ms.targets.get(vkey)
            if old is not None and old.migration.uid == agg.uid and agg.uid:
                return vkey  # redelivered
            ms.targets[vkey] = TargetJob(
                migration=agg,
                vmi_key=vkey,
                vmi_uid=event.vmi_uid,
                source_node=event.source_node,
                target_pod_uid=event.target_pod_uid,
                manifest=event.manifest,
                settings=event.settings,
                correlation_id=corr,
                causation_id=caus,
                causation_seq=caus_seq,
            )
            return vkey
        case TargetPrepared():
            src = ms.sources.get(mkey)
            if src is None or src.migration.uid != agg.uid:
                ms.sources[mkey] = SourceJob(
                    migration=agg,
                    target_node=event.target_node,
                    target_address=event.target_address,
                    target_pod_uid=event.target_pod_uid,
                    correlation_id=corr,
                    causation_id=caus,
                    causation_seq=caus_seq,
                )
            return None
    target = target_of(ms, agg)
    if target is not None:
        match event:
            case TargetPreparing():
                target.preparing = True
            case MigrationSucceeded():
                if target.outcome != "succeeded":
                    target.outcome = "succeeded"
                    ns, name = target.vmi_key.split("/", 1)
                    records[target.vmi_key] = VMIRecord(
                        namespace=ns,
                        name=name,
                        uid=target.vmi_uid,
                        pod_uid=target.target_pod_uid,
                        manifest_json=msgspec.json.encode(target.manifest),
                        started=True,
                        migrated_in=True,
                        id_scope=target.target_pod_uid,
                        correlation_id=corr,
                        causation_id=caus,
                        causation_seq=caus_seq,
                    )
            case MigrationFailed() | MigrationAborted():
                if target.outcome == "":
                    target.outcome = "failed"
            case (
                MigrationRequested()
                | MigrationAbortRequested()
                | MigrationPending()
                | MigrationScheduling()
                | MigrationStarted()
                | MigrationProgressed()
                | MetadataChanged()
            ):
                pass  # the source's and the controller's
            case _:
                assert_never(event)
        return target.vmi_key
    src = ms.sources.get(mkey)
    if src is not None and (not agg.uid or src.migration.uid in ("", agg.uid)):
        match event:
            case MigrationStarted():
                src.started = True
            case MigrationProgressed():
                src.progress_events += 1
            case MigrationAbortRequested():
                src.abort_requested = True
            case MigrationFailed(reason=reason, message=message):
                src.failure = message or reason
            case (
                MigrationRequested()
                | MigrationPending()
                | MigrationScheduling()
                | TargetPreparing()
                | MigrationSucceeded()
                | MigrationAborted()
                | MetadataChanged()
            ):
                pass  # the target's and the controller's, or what this job appended
            case _:
                assert_never(event)
        if isinstance(event, ENDS):
            source_ended(ms, agg)
    return None


def target_of(ms: MigrationState, agg: Aggregate) -> TargetJob | None:
    for job in ms.targets.values():
        m = job.migration
        if (
            m.namespace == agg.namespace
            and m.name == agg.name
            and (not agg.uid or not m.uid or m.uid == agg.uid)
        ):
            return job
    return None


def note_newer(ms: MigrationState, stored: Stored) -> None:
    """An event of a migration a source job has read and not yet decided from: the read
    is stale (the controller failed or aborted it first; our MigrationStarted conflicted),
    read it again."""
    agg = stored.event.meta.aggregate
    if agg.kind != Kind.MIGRATION:
        return
    job = ms.sources.get(_key(agg))
    if job is None or job.stage is not Stage.JUDGE or job.view is None:
        return
    if stored.seq > job.view.version and (not agg.uid or agg.uid == job.migration.uid):
        job.stage, job.view = Stage.READ, None


def note_seen(ms: MigrationState, stored: Stored) -> None:
    """An event of a source job's migration was folded: a read must reach it."""
    agg = stored.event.meta.aggregate
    if agg.kind != Kind.MIGRATION:
        return
    job = ms.sources.get(_key(agg))
    if job is not None and (not agg.uid or job.migration.uid in ("", agg.uid)):
        job.seen = max(job.seen, stored.seq)


def observe(ms: MigrationState, obs: MigrationRead | MigrationCalled | MigrationReported) -> None:
    """Fold what the executors report of a source job's migration (mutates)."""
    job = ms.sources.get(obs.key)
    if job is None:
        return
    match obs:
        case MigrationRead(view=view, scheduled=scheduled):
            if job.stage not in (Stage.READ, Stage.READING):
                return
            # failed, or older than an event folded here (the very one that started the
            # job, from a store that answered from behind): judged, it would end the job
            if obs.error or (view is not None and view.version < job.seen):
                job.stage, job.read_again_at = Stage.READ, obs.at + READ_RETRY
                return
            job.stage, job.view, job.scheduled = Stage.JUDGE, view, scheduled
            if view is not None:
                job.vmi_key, job.vmi_uid = f"{view.namespace}/{view.vmi_name}", view.vmi_uid
        case MigrationCalled(command="AbortMigration"):
            job.abort_sent = True
        case MigrationCalled():
            job.called = obs
        case MigrationReported(report=report):
            if job.stage is not Stage.RELAY:
                return
            match report:
                case None:
                    job.reports_ended = True
                case MigrationResult():
                    job.result = report
                case MigrationProgress() if job.view and report.migration_uid in ("", job.view.uid):
                    job.progress = report


def note(ms: MigrationState, n: MigrationNote) -> None:
    """Fold what a job noted it did (mutates)."""
    match n:
        case TargetNoted(key=key):
            target = ms.targets.get(key)
            if target is not None:
                target.prepared_sent = target.prepared_sent or n.prepared
                target.failure_sent = target.failure_sent or n.failed
        case TargetOver(key=key):
            ms.targets.pop(key, None)
        case SourceStep(key=key, stage=stage):
            job = ms.sources.get(key)
            if job is None:
                return
            if stage is Stage.DONE and not job.handed_off:
                del ms.sources[key]  # nothing left to do or to hold (a redelivery reads again)
                return
            job.stage, job.since = stage, n.at
            if n.transfer is not None:
                job.transfer = n.transfer
            if stage is Stage.READ:
                job.view = None
            elif stage is Stage.HANDED_OFF:
                job.handed_off = True
        case ProgressSent(key=key):
            job = ms.sources.get(key)
            if job is None:
                return
            job.progress_sent = max(job.progress_sent, n.n)
            job.last_report_at, job.progress = n.at, None
            if n.transfer is not None:
                job.transfer = n.transfer


def migration_meta(
    migration: Aggregate,
    node: str,
    what: str,
    route: str,
    now: float,
    correlation_id: str = "",
    causation_id: str = "",
    aggregate: Aggregate | None = None,
    causation_seq: int = 0,
) -> Meta:
    """`virt-handler-<node>/<migration uid>/<what>`, routed to `route`."""
    name = service_name(node)
    key = f"{migration.uid or _key(migration)}/{what}"
    cause = Cause(correlation_id or f"{name}/{migration.uid}", causation_id, causation_seq)
    return output_meta(name, node, aggregate or migration, key, now, cause, route)


# ---------------------------------------------------------------- target planning (pure)
# Appends (TargetPrepared and TargetPodDown are routed to the source, never delivered here:
# a note keeps that they went out), launcher actions, and the note that ends the job (the
# planner decides for the VMI from then on)
TargetOutput = Decision | Send | Launch | Note[TargetNoted | TargetOver]


def plan_target(
    job: TargetJob,
    o: Observed | None,
    node: str,
    qemu: bool,
    address: str,
    now: float,
) -> list[TargetOutput]:
    """The target side of one migration, level-triggered from the job and the launcher."""
    m = job.migration
    key = job.vmi_key

    def meta(what: str, route: str) -> Meta:
        return migration_meta(
            m,
            node,
            what,
            route,
            now,
            job.correlation_id,
            job.causation_id,
            causation_seq=job.causation_seq,
        )

    if o is not None and o.uid != job.vmi_uid:
        return []  # an older VMI's launcher of the same name: the planner's orphan, not ours
    forget = Note(TargetOver(key))
    if job.outcome == "failed":
        if o is None or o.gone:
            return [forget]
        if o.connected and o.shutdown_grace != 0 and o.final is None:
            return [Send(key, Shutdown(grace_period_seconds=0))]
        return []
    if job.outcome == "succeeded":
        if o is None or o.gone:
            return [forget]  # the planner reports the launcher gone
        s = o.status
        if s is not None and s.state is DomainState.PAUSED and o.connected and not o.in_flight:
            return [Send(key, Resume())] if not qemu else []
        if s is not None and s.state is DomainState.RUNNING:
            return [forget]  # ours now: the planner takes over
        return []
    out: list[TargetOutput] = []
    if not job.preparing:
        preparing = TargetPreparing(meta=meta("TargetPreparing", node), target_node=node)
        out.append(Decision(preparing, occ=False))
    if o is None:
        if job.preparing and not job.failure_sent:
            # spawned before (TargetPreparing is appended first) and gone while unobserved
            out += _target_down(job, node, now)
        elif not job.preparing:
            manifest = launch_manifest(job.manifest, key, job.vmi_uid)
            out.append(Launch(key, job.vmi_uid, manifest, migration_target=qemu))
        return out
    if o.spawning:
        return out
    if o.gone or o.final is not None:
        if not job.failure_sent and (not qemu or _grace_over(o, now)):
            out += _target_down(job, node, now)
        return out
    s = o.status
    ready = False
    if qemu:
        ready = o.connected
    elif s is not None:
        if s.state is DomainState.SHUTOFF and not o.start_sent and o.connected:
            out.append(Send(key, Start(paused=True)))
        ready = s.state is DomainState.PAUSED
    if ready and not job.prepared_sent:
        prepared = TargetPrepared(
            meta=meta("TargetPrepared", job.source_node),
            target_node=node,
            target_address=address,
            target_pod_uid=job.target_pod_uid,
        )
        out += [Decision(prepared, occ=False), Note(TargetNoted(key, prepared=True))]
    return out


def _grace_over(o: Observed, now: float) -> bool:
    return o.ended_at is None or now - o.ended_at >= TARGET_GONE_GRACE


def target_wakeup(job: TargetJob, o: Observed | None, qemu: bool) -> float | None:
    """When the grace for a qemu target launcher that ended is over."""
    if not qemu or job.outcome or job.failure_sent or o is None or o.ended_at is None:
        return None
    return o.ended_at + TARGET_GONE_GRACE


def _target_down(job: TargetJob, node: str, now: float) -> list[TargetOutput]:
    """MigrationFailed(TargetPodDown), routed to the source, and the note that it went out."""
    meta = migration_meta(
        job.migration, node, "TargetPodDown", job.source_node, now, job.correlation_id
    )
    down = MigrationFailed(meta=meta, reason="TargetPodDown", message=TARGET_POD_DOWN)
    return [Decision(down, occ=False), Note(TargetNoted(job.vmi_key, failed=True))]
