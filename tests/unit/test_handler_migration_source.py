"""The source side of a live migration through the handler's decider (pure): read, start
with OCC, transfer (simulated) or relay (qemu), hand off, abort."""

from __future__ import annotations

from collections.abc import Sequence

from msgspec.structs import replace

from events import subjects
from events.catalog import (
    DomainStarted,
    DomainStopped,
    Event,
    LauncherExited,
    LauncherStarted,
    MigrationAborted,
    MigrationAbortRequested,
    MigrationFailed,
    MigrationProgressed,
    MigrationStarted,
    MigrationSucceeded,
    StopReason,
)
from events.envelope import Decision
from services.handler.effects import (
    LauncherSeen,
    Migrate,
    MigrationCalled,
    MigrationRead,
    MigrationReported,
    ReadMigration,
    Relay,
    Release,
    Send,
)
from services.handler.migration import ABORTED_BY_USER, READ_RETRY, SOURCE_GONE, Stage
from services.handler.migration_source import HANDOFF_WAIT, kubevirt_wording
from services.handler.reactor import HandlerReactor, HandlerState, Output
from services.launcher.domain_state import DomainState, StateReason
from services.launcher.protocol import (
    AbortMigration,
    DomainStatus,
    MigrateTo,
    MigrationProgress,
    MigrationResult,
    Pause,
    Shutdown,
)
from tests.unit.handler_support import (
    MIG,
    NODE,
    TARGET,
    VMI,
    ctx,
    decider,
    deliver,
    launcher,
    meta,
    pod_scheduled,
    prepared,
    scheduled,
    settle,
    stored,
    view,
)

KEY, MKEY = "default/vm1", "default/m1"


def running_vmi(qemu: bool = False) -> tuple[HandlerReactor, HandlerState]:
    d, state = decider(qemu=qemu), HandlerState(joined=True)
    deliver(d, state, pod_scheduled(), 1, 1.0)
    deliver(
        d,
        state,
        LauncherStarted(meta=meta(VMI, NODE, 2), node=NODE, pod_uid="pod-1", pid=42),
        2,
        1.0,
    )
    started = DomainStarted(meta=meta(VMI, NODE, 3), node=NODE, domain="default_vm1")
    deliver(d, state, started, 3, 1.0)
    d.observe(state, LauncherSeen(KEY, launcher(DomainState.RUNNING, start_sent=True)))
    return d, state


def read(
    d: HandlerReactor, state: HandlerState, phase: str, version: int, now: float, **kw: object
) -> list[Output]:
    obs = MigrationRead(MKEY, view(phase, version, **kw), scheduled(), now)
    d.observe(state, obs)
    return settle(d, state, d.respond(state, obs, ctx(now, d)))


def events(outputs: Sequence[object]) -> list[Event]:
    return [o.event for o in outputs if isinstance(o, Decision)]


def transferring(now: float = 100.0) -> tuple[HandlerReactor, HandlerState]:
    d, state = running_vmi()
    assert deliver(d, state, prepared(), 12, now) == [ReadMigration(MKEY, MIG)]
    read(d, state, "Running", 14, now, start_timestamp=now)
    assert state.migrations.sources[MKEY].stage is Stage.TRANSFER
    return d, state


def test_target_ready_starts_it_with_occ_on_the_version_read() -> None:
    d, state = running_vmi()
    assert deliver(d, state, prepared(), 12, 5.0) == [ReadMigration(MKEY, MIG)]
    (start,) = read(d, state, "TargetReady", 13, 5.0)
    assert isinstance(start, Decision) and isinstance(start.event, MigrationStarted)
    assert start.expected == 13  # the aggregate's version, beyond the node's filters
    assert start.event.meta.event_id == f"virt-handler-{NODE}/mig-uid/MigrationStarted"
    assert start.event.meta.node == NODE
    # then read again for the phase it moved to
    assert settle(d, state, d.tick(state, ctx(5.1, d))) == [ReadMigration(MKEY, MIG)]
    assert state.migrations.sources[MKEY].stage is Stage.READING
    assert d.tick(state, ctx(5.2, d)) == []  # one read at a time


def test_newer_events_of_the_aggregate_make_a_read_stale() -> None:
    """A conflict folds the aggregate's news (the shell's catch-up): the job reads again."""
    d, state = running_vmi()
    deliver(d, state, prepared(), 12, 5.0)
    obs = MigrationRead(MKEY, view("TargetReady", 13), scheduled(), 5.0)
    d.observe(state, obs)  # read, not yet decided on
    abort = MigrationAbortRequested(meta=meta(MIG, TARGET, 15))  # not routed here
    d.evolve(state, stored(abort, 15))
    assert state.migrations.sources[MKEY].stage is Stage.READ
    assert settle(d, state, d.tick(state, ctx(5.2, d))) == [ReadMigration(MKEY, MIG)]
    # the controller failed it first: nothing more to do
    assert read(d, state, "Failed", 16, 5.3) == []
    assert MKEY not in state.migrations.sources  # over: forgotten
    assert not state.migrations.owns(KEY)


def test_abort_requested_before_the_start_leaves_it_to_the_controller() -> None:
    d, state = running_vmi()
    deliver(d, state, prepared(), 12, 5.0)
    assert read(d, state, "TargetReady", 13, 5.0, abort_requested=True) == []
    assert MKEY not in state.migrations.sources  # over: forgotten


def test_simulated_transfer_reports_progress_then_hands_off() -> None:
    d, state = transferring(100.0)
    assert state.migrations.owns(KEY)
    job = state.migrations.sources[MKEY]
    (first,) = events(settle(d, state, d.tick(state, ctx(100.0, d))))
    assert isinstance(first, MigrationProgressed)
    assert first.meta.event_id == f"virt-handler-{NODE}/mig-uid/MigrationProgressed/1"
    assert d.wakeup(state) == 100.0 + 1 / 16  # the end of the transfer comes before 0.25 s
    # 64 MiB at the default 1 GiB/s: done after 62.5 ms
    out = settle(d, state, d.tick(state, ctx(100.1, d)))
    last, succeeded, stopped = events(out)
    assert isinstance(last, MigrationProgressed) and last.data_remaining_bytes == 0
    assert last.meta.event_id.endswith("/MigrationProgressed/2")
    assert isinstance(succeeded, MigrationSucceeded) and succeeded.meta.node == TARGET
    assert isinstance(stopped, DomainStopped) and stopped.reason is StopReason.MIGRATED
    assert stopped.meta.aggregate == VMI and stopped.meta.node == NODE
    sends = [o.command for o in out if isinstance(o, Send)]
    assert sends == [Pause(), Shutdown(grace_period_seconds=0)]
    assert job.stage is Stage.HANDED_OFF and d.wakeup(state) == 100.1 + HANDOFF_WAIT
    # the launcher exits: LauncherExited(source pod), once
    gone = launcher(DomainState.SHUTOFF, connected=False, gone=True)
    d.observe(state, LauncherSeen(KEY, gone))
    (exited,) = events(settle(d, state, d.respond(state, LauncherSeen(KEY, gone), ctx(101, d))))
    assert isinstance(exited, LauncherExited) and exited.pod_uid == "pod-1"
    assert exited.meta.event_id == f"virt-handler-{NODE}/mig-uid/LauncherExited"
    # until its own VMI events are back, the planner would report them again: still owned
    assert d.respond(state, LauncherSeen(KEY, gone), ctx(102, d)) == []
    deliver(d, state, stopped, 20, 102)
    assert deliver(d, state, exited, 21, 102) == [Release(KEY)]
    assert MKEY not in state.migrations.sources  # let go: forgotten
    # the VMI lives on the target now, whose handler gets its removal: nothing of it stays
    # here (a year of migrations away would pile up in the fold and its checkpoint)
    assert KEY not in state.records


def test_an_abort_request_stops_the_transfer_and_the_vm_stays() -> None:
    d, state = transferring(100.0)
    abort = MigrationAbortRequested(meta=meta(MIG, NODE, 15))
    out = deliver(d, state, abort, 15, 100.01)
    (aborted,) = events(out)
    assert isinstance(aborted, MigrationAborted) and aborted.reason == ABORTED_BY_USER
    assert aborted.meta.node == TARGET
    assert MKEY not in state.migrations.sources  # over: forgotten
    assert not state.migrations.owns(KEY)


def test_the_source_launcher_gone_mid_transfer_aborts_and_the_planner_reports_it() -> None:
    d, state = transferring(100.0)
    gone = launcher(DomainState.RUNNING, connected=False, gone=True)
    d.observe(state, LauncherSeen(KEY, gone))
    out = settle(d, state, d.respond(state, LauncherSeen(KEY, gone), ctx(100.01, d)))
    (aborted,) = events(out)
    assert isinstance(aborted, MigrationAborted) and aborted.reason == SOURCE_GONE
    # decided again: the VMI is the planner's, which reports the launcher gone
    names = [type(e).__name__ for e in events(d.respond(state, LauncherSeen(KEY, gone), ctx(1, d)))]
    assert names == ["DomainStopped", "LauncherExited"]


def test_a_restarted_source_goes_on_from_the_start_and_the_folded_count() -> None:
    d, state = running_vmi()
    d.evolve(state, stored(prepared(), 12))  # the catch-up: folded, not decided on
    for seq in (13, 14, 15):
        p = MigrationProgressed(
            meta=meta(MIG, NODE, seq),
            data_processed_bytes=1,
            data_remaining_bytes=1,
            data_total_bytes=2,
        )
        d.evolve(state, stored(p, seq))
    assert settle(d, state, d.tick(state, ctx(100.03, d))) == [ReadMigration(MKEY, MIG)]
    read(d, state, "Running", 16, 100.03, start_timestamp=100.0)
    (p4,) = events(settle(d, state, d.tick(state, ctx(100.03, d))))
    assert isinstance(p4, MigrationProgressed) and p4.meta.event_id.endswith("/4")
    assert p4.data_processed_bytes == int(0.03 * 1024**3)  # from the migration's start


def test_qemu_source_migrates_relays_and_hands_off() -> None:
    d, state = running_vmi(qemu=True)
    deliver(d, state, prepared(), 12, 5.0)
    assert read(d, state, "Running", 14, 5.0) == []
    (migrate,) = d.tick(state, ctx(5.0, d))
    assert isinstance(migrate, Migrate) and isinstance(migrate.command, MigrateTo)
    assert migrate.command.target_uri == "10.0.0.2" and migrate.command.migration_uid == "mig-uid"
    called = MigrationCalled(MKEY, "MigrateTo", ok=True)
    d.observe(state, called)
    assert settle(d, state, d.respond(state, called, ctx(5.1, d))) == [Relay(KEY, MKEY)]

    def report(r: MigrationProgress | MigrationResult | None, now: float) -> list[Output]:
        obs = MigrationReported(MKEY, r)
        d.observe(state, obs)
        return settle(d, state, d.respond(state, obs, ctx(now, d)))

    progress = MigrationProgress(migration_uid="mig-uid", processed=5, remaining=5, total=10)
    (p1,) = events(report(progress, 5.2))
    assert isinstance(p1, MigrationProgressed) and p1.data_processed_bytes == 5
    assert report(progress, 5.3) == []  # at most 4 a second
    assert d.wakeup(state) == 5.2 + 0.25
    assert len(events(settle(d, state, d.tick(state, ctx(5.46, d))))) == 1
    (ok,) = events(report(MigrationResult(migration_uid="mig-uid", ok=True), 6.0))
    assert isinstance(ok, MigrationSucceeded) and ok.meta.node == TARGET
    assert d.wakeup(state) == 6.0 + HANDOFF_WAIT
    final = launcher(DomainState.SHUTOFF, start_sent=True).updated(
        DomainStatus(state=DomainState.SHUTOFF, reason=StateReason.MIGRATED, seq=2, final=True),
        6.1,
    )
    d.observe(state, LauncherSeen(KEY, final))
    (stopped,) = events(settle(d, state, d.respond(state, LauncherSeen(KEY, final), ctx(6.1, d))))
    assert isinstance(stopped, DomainStopped) and stopped.reason is StopReason.MIGRATED
    assert state.migrations.sources[MKEY].stage is Stage.HANDED_OFF


def test_qemu_abort_goes_to_the_launcher_and_its_result_ends_it() -> None:
    d, state = running_vmi(qemu=True)
    deliver(d, state, prepared(), 12, 5.0)
    read(d, state, "Running", 14, 5.0)
    d.tick(state, ctx(5.0, d))
    called = MigrationCalled(MKEY, "MigrateTo", ok=True)
    d.observe(state, called)
    settle(d, state, d.respond(state, called, ctx(5.1, d)))
    out = deliver(d, state, MigrationAbortRequested(meta=meta(MIG, NODE, 15)), 15, 5.2)
    assert out == [Migrate(KEY, MKEY, AbortMigration())]
    d.observe(state, MigrationCalled(MKEY, "AbortMigration", ok=True))
    assert d.tick(state, ctx(5.3, d)) == []  # sent once
    result = MigrationReported(MKEY, MigrationResult(ok=False, aborted=True, error="cancelled"))
    d.observe(state, result)
    (aborted,) = events(settle(d, state, d.respond(state, result, ctx(5.4, d))))
    assert isinstance(aborted, MigrationAborted) and aborted.reason == ABORTED_BY_USER


def test_launcher_errors_in_kubevirt_words() -> None:
    assert (
        kubevirt_wording("progressTimeout: no progress for 5s")
        == "Live migration stuck for 5 sec and has been aborted"
    )
    assert kubevirt_wording("") == "Live migration failed"


def test_a_failed_read_is_tried_again_a_second_later() -> None:
    d, state = running_vmi()
    assert deliver(d, state, prepared(), 12, 5.0) == [ReadMigration(MKEY, MIG)]
    failed = MigrationRead(MKEY, None, None, 5.1, error="TimeoutError()")
    d.observe(state, failed)
    assert d.respond(state, failed, ctx(5.1, d)) == []
    assert d.wakeup(state) == 5.1 + READ_RETRY
    assert settle(d, state, d.tick(state, ctx(6.1, d))) == [ReadMigration(MKEY, MIG)]


def test_a_read_without_the_event_that_started_the_job_is_read_again() -> None:
    """The job reads the migration because its TargetPrepared arrived: a read that ends
    before it (a store answering from behind) says PreparingTarget, which judged would
    end the job without a word and leave the migration in TargetReady for good."""
    d, state = running_vmi()
    assert deliver(d, state, prepared(), 12, 5.0) == [ReadMigration(MKEY, MIG)]
    assert read(d, state, "PreparingTarget", 11, 5.1) == []
    job = state.migrations.sources[MKEY]
    assert job.stage is Stage.READ  # still there, to read again
    assert d.wakeup(state) == 5.1 + READ_RETRY
    assert settle(d, state, d.tick(state, ctx(6.1, d))) == [ReadMigration(MKEY, MIG)]
    (start,) = read(d, state, "TargetReady", 12, 6.2)
    assert isinstance(start, Decision) and isinstance(start.event, MigrationStarted)
    assert start.expected == 12
    # its MigrationStarted is back: a read without it is no answer either
    deliver(d, state, MigrationStarted(meta=meta(MIG, NODE, 13)), 13, 6.3)
    settle(d, state, d.tick(state, ctx(6.3, d)))
    assert read(d, state, "TargetReady", 12, 6.4) == []  # not started a second time
    assert state.migrations.sources[MKEY].stage is Stage.READ


def succeeded_event(seq: int) -> MigrationSucceeded:
    """The source's own MigrationSucceeded, routed to the target, as the log holds it."""
    return MigrationSucceeded(meta=meta(MIG, TARGET, seq), target_node=TARGET, target_pod_uid="t")


def test_a_restarted_handler_folds_an_ended_migration_away_without_reading_it() -> None:
    # the log of a source whose migration succeeded: the end is routed to the target, and
    # the source's fold sees it all the same (its filters take every migration's end)
    d, state = running_vmi()
    assert any(subjects.matches(f, stored(succeeded_event(30), 30).subject) for f in d.filters())
    d.evolve(state, stored(prepared(), 12))
    assert MKEY in state.migrations.sources
    d.evolve(state, stored(succeeded_event(30), 30))
    assert MKEY not in state.migrations.sources  # over: nothing to read again
    assert settle(d, state, d.tick(state, ctx(200.0, d))) == []  # no ReadMigration
    # so too a failure routed to the target, and an abort
    for end in (
        MigrationFailed(meta=meta(MIG, TARGET, 31), reason="TargetPodDown"),
        MigrationAborted(meta=meta(MIG, TARGET, 31), reason=ABORTED_BY_USER),
    ):
        d, state = running_vmi()
        d.evolve(state, stored(prepared(), 12))
        d.evolve(state, stored(end, 31))
        assert not state.migrations.sources, end
    # a migration still under way is read once, as before
    d, state = running_vmi()
    d.evolve(state, stored(prepared(), 12))
    assert settle(d, state, d.tick(state, ctx(200.0, d))) == [ReadMigration(MKEY, MIG)]


def test_an_ended_migration_of_another_uid_or_node_leaves_the_source_job_alone() -> None:
    d, state = running_vmi()
    d.evolve(state, stored(prepared(), 12))
    other = replace(MIG, uid="another-uid")
    d.evolve(state, stored(MigrationAborted(meta=meta(other, TARGET, 13), reason="x"), 13))
    assert MKEY in state.migrations.sources


def test_a_source_job_carrying_out_its_part_ends_itself_not_at_the_end_event() -> None:
    # the handoff appends MigrationSucceeded and still owes LauncherExited: the end, back
    # from the log, must not drop the job before that
    d, state = transferring(100.0)
    settle(d, state, d.tick(state, ctx(100.0, d)))
    out = settle(d, state, d.tick(state, ctx(100.1, d)))
    (succeeded,) = [e for e in events(out) if isinstance(e, MigrationSucceeded)]
    assert state.migrations.sources[MKEY].stage is Stage.HANDED_OFF
    d.evolve(state, stored(succeeded, 25))
    assert state.migrations.sources[MKEY].stage is Stage.HANDED_OFF
    assert state.migrations.owns(KEY)
