"""The source side of a live migration, pure: what a `SourceJob` calls for at its stage.

TargetPrepared routed here starts a job. It reads the migration aggregate (`ReadMigration`:
the phase, the version, the MigrationScheduled settings and manifest) and appends
MigrationStarted with OCC on the migration's version (the controller's abort/fail is OCC
too: exactly one of them wins; a conflict folds the aggregate's news, which makes the read
stale, and the job reads again). Then the transfer — test mode: `migration_sim`
(SIMULATED: progress from guest memory and bandwidth, ≤ 4 reports a second), qemu mode:
MigrateTo to the launcher, its MigrationProgress relayed — then the handoff: the source
pauses (test), MigrationSucceeded routed to the target, DomainStopped(Migrated) +
LauncherExited(source pod) on the VMI once the launcher is gone (at most 15 s later). An
abort (MigrationAbortRequested routed here), a MigrationFailed routed here or a timeout
stop it: MigrationAborted routed to the target, the VM keeps running on the source (a
domain the handoff paused is resumed).

The outputs of one stage are carried out in order; the note that moves the job on comes
after the appends it depends on, so an append that failed leaves the job where it was.
"""

from __future__ import annotations

import msgspec

from events.catalog import (
    DomainStopped,
    LauncherExited,
    MigrationAborted,
    MigrationProgressed,
    MigrationStarted,
    MigrationSucceeded,
    StopReason,
)
from events.envelope import Decision
from events.meta import Aggregate, Kind, Meta
from services.handler import migration_sim as sim
from services.handler.effects import Migrate, Observed, ReadMigration, Relay, Send
from services.handler.migration import (
    ABORTED_BY_USER,
    SOURCE_GONE,
    SOURCE_OWNS,
    MigrationNote,
    ProgressSent,
    SourceJob,
    SourceStep,
    Stage,
    migration_meta,
)
from services.handler.state import NodeState, VMIRecord
from services.launcher.domain_state import DomainState
from services.launcher.protocol import AbortMigration, MigrateTo, Pause, Resume, Shutdown
from services.runtime.reactor import Note

HANDOFF_WAIT = 15.0  # at most this long for the source launcher's final status, and exit

SourceOutput = Decision | ReadMigration | Migrate | Relay | Send | Note[MigrationNote]


def plan_source(
    job: SourceJob,
    mkey: str,
    records: NodeState,
    observed: dict[str, Observed],
    node: str,
    qemu: bool,
    now: float,
) -> list[SourceOutput]:
    """What the job calls for now (level-triggered: the same state asks for the same)."""
    p = _Plan(job, mkey, records, observed, node, now)
    match job.stage:
        case Stage.READ:
            if now < job.read_again_at:
                return []  # the last read failed
            return [ReadMigration(mkey, job.migration), p.step(Stage.READING)]
        case Stage.READING:
            return []
        case Stage.JUDGE:
            return p.judge(qemu)
        case Stage.TRANSFER:
            return p.transfer()
        case Stage.MIGRATE:
            return p.migrate()
        case Stage.RELAY:
            return p.relay()
        case Stage.SUCCEEDED:
            return p.succeeded()
        case Stage.HANDED_OFF:
            return p.handed_off()
        case Stage.DONE:
            return []


def source_wakeup(job: SourceJob) -> float | None:
    """When the job has something to say without being told anything."""
    match job.stage:
        case Stage.READ if job.read_again_at:
            return job.read_again_at
        case Stage.TRANSFER if job.transfer is not None:
            return sim.due(job.transfer)
        case Stage.RELAY if job.progress is not None and job.last_report_at is not None:
            return job.last_report_at + 1 / sim.REPORTS_PER_SECOND
        case Stage.SUCCEEDED | Stage.HANDED_OFF:
            return job.since + HANDOFF_WAIT
    return None


def owns(job: SourceJob, records: NodeState) -> bool:
    """The job decides for its VMI: while it runs, and after the handoff until the VMI's
    LauncherExited from here is folded (the planner would report it again, other ids)."""
    if job.stage in SOURCE_OWNS:
        return True
    if job.stage is Stage.DONE and job.handed_off:
        r = records.get(job.vmi_key)
        return r is not None and r.uid == job.vmi_uid and not r.exited
    return False


def stop_reason(job: SourceJob) -> str | None:
    if job.failure:
        return job.failure
    if job.abort_requested:
        return ABORTED_BY_USER
    return None


def kubevirt_wording(error: str) -> str:
    """The launcher's abort reasons in KubeVirt's words."""
    if "progressTimeout" in error:
        n = error.split("for ", 1)[-1].split("s", 1)[0]
        return f"Live migration stuck for {n} sec and has been aborted"
    if "completionTimeoutPerGiB" in error:
        return f"Live migration is not completed in time and has been aborted ({error})"
    return f"Live migration failed: {error}" if error else "Live migration failed"


class _Plan:
    """One decision for one job: the stages below share its inputs."""

    def __init__(
        self,
        job: SourceJob,
        mkey: str,
        records: NodeState,
        observed: dict[str, Observed],
        node: str,
        now: float,
    ) -> None:
        self.job, self.mkey, self.node, self.now = job, mkey, node, now
        self.r = records.get(job.vmi_key)
        self.o = observed.get(job.vmi_key)

    def meta(self, what: str, route: str, aggregate: Aggregate | None = None) -> Meta:
        j = self.job
        return migration_meta(
            j.migration,
            self.node,
            what,
            route,
            self.now,
            j.correlation_id,
            j.causation_id,
            aggregate=aggregate,
            causation_seq=j.causation_seq,
        )

    def step(self, stage: Stage, transfer: sim.Transfer | None = None) -> Note[MigrationNote]:
        return Note(SourceStep(self.mkey, stage, self.now, transfer))

    # ------------------------------------------------------------ stages
    def judge(self, qemu: bool) -> list[SourceOutput]:
        view, scheduled = self.job.view, self.job.scheduled
        if view is None or scheduled is None or view.final or view.source_node != self.node:
            resume = self.resume_if_paused() if view is not None and view.final else []
            return [*resume, self.step(Stage.DONE)]
        r, o = self.r, self.o
        if r is None or r.uid != view.vmi_uid or r.stopped or o is None or o.gone:
            # no running VMI here (anymore): the planner reports what became of it
            if view.phase == "Running":
                return self.aborted(SOURCE_GONE)
            return [self.step(Stage.DONE)]
        if view.phase == "TargetReady":
            if view.abort_requested:
                return [self.step(Stage.DONE)]  # the controller fails it (routed to the target)
            started = MigrationStarted(meta=self.meta("MigrationStarted", self.node))
            # read again after it: the phase it moved to (a conflict reads again anyway)
            return [Decision(started, expected=view.version), self.step(Stage.READ)]
        if view.phase != "Running":
            return [self.step(Stage.DONE)]
        if qemu:
            return [self.step(Stage.MIGRATE)]
        start = view.start_timestamp or self.now  # a restart goes on from the start
        transfer = sim.begin(view.uid, scheduled.manifest, scheduled.settings, start)
        return [self.step(Stage.TRANSFER, transfer)]

    def transfer(self) -> list[SourceOutput]:
        """Test mode: a SIMULATED transfer (no memory moves; the numbers are synthetic)."""
        reason = stop_reason(self.job)
        o = self.o
        if reason is None and (o is None or o.gone or o.final is not None):
            reason = SOURCE_GONE
        if reason is not None:
            return self.aborted(reason)
        assert self.job.transfer is not None
        t = msgspec.structs.replace(self.job.transfer)  # step() keeps its bookkeeping in it
        step = sim.step(t, self.now)
        match step:
            case sim.Done():
                return [*self.progressed(t.total, 0, t.total, t), *self.handoff()]
            case sim.TimedOut(reason=why):
                return self.aborted(why)
            case sim.Progress():
                return self.progressed(step.processed, step.remaining, step.total, t)
            case None:
                return []

    def handoff(self) -> list[SourceOutput]:
        """Test mode: pause here, the target takes over, destroy here."""
        vkey = self.job.vmi_key
        out: list[SourceOutput] = [
            Send(vkey, Pause()),
            Decision(self.succeeded_event(), occ=False),
        ]
        if self.r is not None:
            out.append(Decision(self.source_stopped(self.r), occ=False))
        return [*out, self.step(Stage.HANDED_OFF), Send(vkey, Shutdown(grace_period_seconds=0))]

    def migrate(self) -> list[SourceOutput]:
        """qemu mode: the launcher migrates; its reports are relayed."""
        job, o = self.job, self.o
        called = job.called
        if called is None:
            if o is None or not o.connected or job.view is None or job.scheduled is None:
                return self.aborted(SOURCE_GONE)
            s = job.scheduled.settings
            command = MigrateTo(
                migration_uid=job.view.uid,
                target_uri=job.target_address or job.view.target_address,
                bandwidth_bytes_per_second=s.bandwidth_bytes_per_second,
                allow_auto_converge=s.allow_auto_converge,
                allow_post_copy=s.allow_post_copy,
                completion_timeout_per_gib=s.completion_timeout_per_gib,
                progress_timeout_seconds=s.progress_timeout,
            )
            return [Migrate(job.vmi_key, self.mkey, command)]
        if not called.ok and called.error != "a migration is already running":
            return self.aborted(f"Live migration failed: {called.error}")
        return [Relay(job.vmi_key, self.mkey), self.step(Stage.RELAY)]

    def relay(self) -> list[SourceOutput]:
        job = self.job
        reason = stop_reason(job)
        if job.result is not None:
            if job.result.ok:
                return [Decision(self.succeeded_event(), occ=False), self.step(Stage.SUCCEEDED)]
            return self.aborted(reason or kubevirt_wording(job.result.error or ""))
        out: list[SourceOutput] = []
        if reason is not None and not job.abort_sent:
            out.append(Migrate(job.vmi_key, self.mkey, AbortMigration()))
        if job.reports_ended:
            return [*out, *self.aborted(reason or SOURCE_GONE)]
        p = job.progress
        last = job.last_report_at
        if p is not None and (last is None or self.now - last >= 1 / sim.REPORTS_PER_SECOND):
            out += self.progressed(p.processed, p.remaining, p.total, None)
        return out

    def succeeded(self) -> list[SourceOutput]:
        """qemu mode: the launcher's final Shutoff/Migrated follows the result."""
        o = self.o
        if o is None or o.final is not None or o.gone or self.now >= self.job.since + HANDOFF_WAIT:
            out: list[SourceOutput] = []
            if self.r is not None:
                out.append(Decision(self.source_stopped(self.r), occ=False))
            return [*out, self.step(Stage.HANDED_OFF)]
        return []

    def handed_off(self) -> list[SourceOutput]:
        """Once the source launcher is gone: LauncherExited(source pod)."""
        o, r = self.o, self.r
        if r is None or r.uid != self.job.vmi_uid:
            return [self.step(Stage.DONE)]
        if o is None or o.gone or self.now >= self.job.since + HANDOFF_WAIT:
            vmi = Aggregate(Kind.VMI, r.namespace, r.name, r.uid)
            exited = LauncherExited(
                meta=self.meta("LauncherExited", self.node, vmi), node=self.node, pod_uid=r.pod_uid
            )
            return [Decision(exited, occ=False), self.step(Stage.DONE)]
        return []

    # ------------------------------------------------------------ outputs
    def progressed(
        self, processed: int, remaining: int, total: int, t: sim.Transfer | None
    ) -> list[SourceOutput]:
        n = max(self.job.progress_events, self.job.progress_sent) + 1
        ev = MigrationProgressed(
            meta=self.meta(f"MigrationProgressed/{n}", self.node),
            data_processed_bytes=processed,
            data_remaining_bytes=remaining,
            data_total_bytes=total,
        )
        return [Decision(ev, occ=False), Note(ProgressSent(self.mkey, n, self.now, t))]

    def aborted(self, reason: str) -> list[SourceOutput]:
        """The VM stays here: tell the target to clean up, resume if the handoff paused."""
        meta = self.meta("MigrationAborted", self.job.target_node)
        ev = MigrationAborted(meta=meta, reason=reason)
        return [Decision(ev, occ=False), *self.resume_if_paused(), self.step(Stage.DONE)]

    def resume_if_paused(self) -> list[SourceOutput]:
        r, o = self.r, self.o
        if r is None or o is None or not o.connected or r.stopped or o.status is None:
            return []
        if o.status.state is DomainState.PAUSED and not r.paused and r.want_paused is not True:
            return [Send(self.job.vmi_key, Resume())]
        return []

    def succeeded_event(self) -> MigrationSucceeded:
        j = self.job
        return MigrationSucceeded(
            meta=self.meta("MigrationSucceeded", j.target_node),
            target_node=j.target_node,
            target_pod_uid=j.target_pod_uid,
        )

    def source_stopped(self, r: VMIRecord) -> DomainStopped:
        vmi = Aggregate(Kind.VMI, r.namespace, r.name, r.uid)
        return DomainStopped(
            meta=self.meta("DomainStopped", self.node, vmi),
            reason=StopReason.MIGRATED,
            message="migrated away",
        )
