"""The launcher's domain lifecycle (services/launcher/lifecycle.py), given/when/then on
plain data: which report follows which libvirt event, how commands are answered, the
graceful shutdown's ACPI re-sends and destroy, the exit rules, and the migration source
and target paths."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import TypeVar

import msgspec
import pytest

from services.launcher import lifecycle as lc
from services.launcher.domain_state import DomainEvent, DomainState, StateReason
from services.launcher.protocol import (
    AbortMigration,
    Command,
    CommandResult,
    Crash,
    DomainStatus,
    Hello,
    MigrateTo,
    MigrationProgress,
    MigrationResult,
    Pause,
    Shutdown,
    Start,
    Status,
)

T = TypeVar("T")
GiB = 2**30
HELLO = Hello(vmi_uid="u1", domain_name="ns_vm", pid=4242, hypervisor_uri="test:///default")

RUNNING = lc.Seen(state=DomainState.RUNNING, reason=StateReason.BOOTED, pid=77, wall=1000.0)
PAUSED = lc.Seen(state=DomainState.PAUSED, reason=StateReason.USER, pid=77, wall=1000.0)
SHUTOFF = lc.Seen(state=DomainState.SHUTOFF, reason=StateReason.UNKNOWN, wall=1000.0)
DESTROYED = lc.Seen(state=DomainState.SHUTOFF, reason=StateReason.DESTROYED, wall=1000.0)
NOTHING = lc.Seen(state=DomainState.NO_STATE, wall=1000.0)


def settings(**overrides: object) -> lc.Settings:
    fields: dict[str, object] = {
        "domain_name": "ns_vm",
        "hello": HELLO,
        "termination_grace_seconds": 30,
        "guest_memory_bytes": 64 * 2**20,
    }
    return lc.Settings(**(fields | overrides))  # type: ignore[arg-type]


class Launcher:
    """The machine plus the inputs the shell would feed it."""

    def __init__(self, **overrides: object) -> None:
        self.state = lc.initial(settings(**overrides))
        self.now = 100.0

    def feed(self, inp: lc.Input) -> list[lc.Action]:
        self.state, actions = lc.step(self.state, inp)
        return actions

    # inputs, as the shell builds them
    def boot(self, seen: lc.Seen = SHUTOFF, **done: object) -> list[lc.Action]:
        self.feed(lc.Boot())
        return self.feed(lc.SetupDone(now=self.now, seen=seen, **done))  # type: ignore[arg-type]

    def event(self, event: DomainEvent, reason: StateReason, seen: lc.Seen) -> list[lc.Action]:
        return self.feed(lc.DomainEventSeen(event=event, reason=reason, seen=seen))

    def connect(self, client: int, seen: lc.Seen) -> list[lc.Action]:
        return self.feed(lc.Connected(client=client, seen=seen))

    def command(self, command: Command, seen: lc.Seen, client: int = 1) -> list[lc.Action]:
        return self.feed(
            lc.CommandReceived(now=self.now, client=client, command=command, seen=seen)
        )

    def returned(
        self, call: lc.HypervisorCall, seen: lc.Seen, error: str | None = None
    ) -> list[lc.Action]:
        failure = None if error is None else lc.CallError("HypervisorError", error)
        return self.feed(lc.CallReturned(call=call, error=failure, seen=seen))

    def fire(self, timer: lc.Timer, at: float, seen: lc.Seen) -> list[lc.Action]:
        self.now = at
        return self.feed(lc.TimerFired(now=at, timer=timer, seen=seen))

    def running(self) -> Launcher:
        self.boot()
        self.event(DomainEvent.DEFINED, StateReason.UNKNOWN, SHUTOFF)
        self.connect(1, SHUTOFF)
        self.event(DomainEvent.STARTED, StateReason.BOOTED, RUNNING)
        return self


def only(actions: list[lc.Action], kind: type[T]) -> list[T]:
    return [a for a in actions if isinstance(a, kind)]


def reply(actions: list[lc.Action]) -> CommandResult:
    (send,) = [a for a in actions if isinstance(a, lc.ReportTo)]
    assert isinstance(send.report, CommandResult)
    return send.report


def broadcast_status(actions: list[lc.Action]) -> DomainStatus:
    (sent,) = only(actions, lc.Broadcast)
    assert isinstance(sent.report, DomainStatus)
    return sent.report


def final_of(actions: list[lc.Action]) -> DomainStatus:
    (deliver,) = only(actions, lc.DeliverFinal)
    assert deliver.client is None and deliver.status.final
    return deliver.status


def hypervisor_calls(actions: list[lc.Action]) -> list[lc.Action]:
    kinds = (
        lc.StartDomain,
        lc.SuspendDomain,
        lc.ResumeDomain,
        lc.RebootDomain,
        lc.ShutdownDomain,
        lc.DestroyDomain,
        lc.AbortJob,
        lc.SwitchToPostCopy,
    )
    return [a for a in actions if isinstance(a, kinds)]


# -- setup -------------------------------------------------------------------------------


def test_boot_defines_the_domain_or_attaches_as_a_migration_target() -> None:
    assert Launcher().feed(lc.Boot()) == [lc.DefineDomain()]
    assert Launcher(migration_target=True).feed(lc.Boot()) == [lc.AttachIncoming()]


def test_a_define_failure_is_the_final_status_and_the_exit_code_is_1() -> None:
    launcher = Launcher()
    launcher.feed(lc.Boot())
    error = lc.CallError("ValueError", "no memory requested")
    actions = launcher.feed(lc.SetupDone(now=100.0, seen=NOTHING, error=error))
    assert lc.Log("error", "cannot define ns_vm: no memory requested") in actions
    final = final_of(actions)
    assert (final.state, final.reason, final.message) == (
        DomainState.SHUTOFF,
        StateReason.FAILED,
        "ValueError: no memory requested",
    )
    # nobody listening yet: linger for a handler, then exit with 1
    linger = launcher.feed(lc.FinalDelivered(now=100.5, delivered=False))
    assert linger == [lc.ArmTimer(timer=lc.Timer.LINGER, at=130.5)]
    assert launcher.fire(lc.Timer.LINGER, 130.5, NOTHING) == [lc.Exit(1)]


def test_prepared_disks_are_owned_by_the_launcher() -> None:
    launcher = Launcher(test_driver=False)
    launcher.boot(disks_prepared=True)
    assert launcher.state.owns_disks


def test_a_migration_target_gives_up_when_no_domain_arrives() -> None:
    launcher = Launcher(migration_target=True, migration_target_timeout_seconds=600.0)
    actions = launcher.boot(seen=NOTHING, arrived=False)
    assert actions == [lc.ArmTimer(timer=lc.Timer.TARGET_TIMEOUT, at=700.0)]
    final = final_of(launcher.fire(lc.Timer.TARGET_TIMEOUT, 700.0, NOTHING))
    assert (final.state, final.reason, final.message) == (
        DomainState.NO_STATE,
        StateReason.FAILED,
        "no domain arrived by migration within 600.0s",
    )


def test_a_migration_target_whose_domain_arrived_keeps_waiting_past_the_timeout() -> None:
    launcher = Launcher(migration_target=True)
    launcher.boot(seen=NOTHING, arrived=False)
    incoming = lc.Seen(state=DomainState.PAUSED, reason=StateReason.MIGRATION)
    assert launcher.fire(lc.Timer.TARGET_TIMEOUT, 700.0, incoming) == []
    assert launcher.state.final is None


@pytest.mark.parametrize(
    ("seen", "owns"),
    [
        (lc.Seen(state=DomainState.PAUSED, reason=StateReason.MIGRATION), False),
        (lc.Seen(state=DomainState.RUNNING, reason=StateReason.MIGRATED), True),
    ],
)
def test_a_target_attaching_to_a_completed_migration_owns_the_disks(
    seen: lc.Seen, owns: bool
) -> None:
    launcher = Launcher(migration_target=True)
    assert launcher.boot(seen=seen, arrived=True) == []
    assert launcher.state.owns_disks is owns


# -- libvirt events → reports ------------------------------------------------------------


def test_each_lifecycle_event_is_broadcast_with_the_state_it_implies() -> None:
    launcher = Launcher()
    launcher.boot()
    defined = broadcast_status(launcher.event(DomainEvent.DEFINED, StateReason.UNKNOWN, SHUTOFF))
    assert (defined.state, defined.event, defined.seq) == (
        DomainState.SHUTOFF,
        DomainEvent.DEFINED,
        1,
    )
    # the report follows the event, not the queried state (which may be later already)
    started = broadcast_status(launcher.event(DomainEvent.STARTED, StateReason.BOOTED, PAUSED))
    assert (started.state, started.reason, started.seq) == (
        DomainState.RUNNING,
        StateReason.BOOTED,
        2,
    )
    assert (started.domain_pid, started.observed_at) == (77, 1000.0)
    paused = broadcast_status(launcher.event(DomainEvent.SUSPENDED, StateReason.USER, PAUSED))
    assert (paused.state, paused.reason, paused.seq) == (DomainState.PAUSED, StateReason.USER, 3)
    assert not paused.final


def test_a_running_domains_definition_being_saved_is_not_reported() -> None:
    launcher = Launcher()
    launcher.boot()
    assert launcher.event(DomainEvent.DEFINED, StateReason.UNKNOWN, RUNNING) == []


def test_an_incoming_migrations_start_is_reported_paused_until_it_resumes() -> None:
    launcher = Launcher(migration_target=True)
    launcher.boot(seen=NOTHING, arrived=False)
    incoming = lc.Seen(state=DomainState.PAUSED, reason=StateReason.MIGRATION, pid=88)
    started = broadcast_status(launcher.event(DomainEvent.STARTED, StateReason.MIGRATED, incoming))
    assert (started.state, started.reason) == (DomainState.PAUSED, StateReason.MIGRATION)
    assert not launcher.state.owns_disks
    arrived = lc.Seen(state=DomainState.RUNNING, reason=StateReason.MIGRATED, pid=88)
    resumed = broadcast_status(launcher.event(DomainEvent.RESUMED, StateReason.MIGRATED, arrived))
    assert (resumed.state, resumed.reason, resumed.domain_pid) == (
        DomainState.RUNNING,
        StateReason.MIGRATED,
        88,
    )
    assert launcher.state.owns_disks  # the guest lives here now


@pytest.mark.parametrize(
    ("event", "reason", "state"),
    [
        (DomainEvent.STOPPED, StateReason.SHUTDOWN, DomainState.SHUTOFF),
        (DomainEvent.UNDEFINED, StateReason.UNKNOWN, DomainState.NO_STATE),
        (DomainEvent.CRASHED, StateReason.PANICKED, DomainState.CRASHED),
    ],
)
def test_the_domains_end_is_the_final_status_and_later_events_are_ignored(
    event: DomainEvent, reason: StateReason, state: DomainState
) -> None:
    launcher = Launcher().running()
    actions = launcher.event(event, reason, SHUTOFF)
    assert lc.Log("info", f"domain ns_vm gone: {state}/{reason}") in actions
    final = final_of(actions)
    assert (final.state, final.reason, final.event, final.domain_pid) == (
        state,
        reason,
        event,
        None,
    )
    assert not final.grace_period_expired
    assert launcher.event(DomainEvent.UNDEFINED, StateReason.UNKNOWN, NOTHING) == []


def test_a_pause_libvirt_cannot_name_is_reported_as_unknown_not_as_a_users() -> None:
    launcher = Launcher().running()
    unnamed = lc.Seen(state=DomainState.PAUSED, reason=StateReason.UNKNOWN, pid=77)
    # libvirt's event detail says "paused" for both; the state reason tells them apart
    paused = broadcast_status(launcher.event(DomainEvent.SUSPENDED, StateReason.USER, unnamed))
    assert (paused.state, paused.reason) == (DomainState.PAUSED, StateReason.UNKNOWN)


def test_a_guest_qemu_cannot_run_again_is_destroyed_and_reported_crashed() -> None:
    launcher = Launcher().running()
    why = "KVM internal error. Suberror: 1 (emulation failure)"
    stuck = lc.Seen(state=DomainState.PAUSED, reason=StateReason.UNKNOWN, pid=77)
    actions = launcher.feed(
        lc.DomainEventSeen(event=DomainEvent.SUSPENDED, reason=StateReason.USER, seen=stuck,
                           stuck=why)
    )  # fmt: skip
    assert hypervisor_calls(actions) == [lc.DestroyDomain()]
    assert not only(actions, lc.Broadcast)  # never reported as a pause
    # the same pause seen again while the destroy is under way asks nothing more
    again = lc.DomainEventSeen(
        event=DomainEvent.SUSPENDED, reason=StateReason.USER, seen=stuck, stuck=why
    )
    assert launcher.feed(again) == []
    final = final_of(launcher.event(DomainEvent.STOPPED, StateReason.DESTROYED, DESTROYED))
    assert (final.state, final.reason, final.message) == (
        DomainState.SHUTOFF,
        StateReason.CRASHED,
        why,
    )


# -- handlers and the exit ---------------------------------------------------------------


def test_a_connecting_handler_gets_hello_and_the_current_status_then_broadcasts() -> None:
    launcher = Launcher()
    launcher.boot()
    launcher.event(DomainEvent.STARTED, StateReason.BOOTED, RUNNING)
    hello, status, subscribe = launcher.connect(7, RUNNING)
    assert hello == lc.ReportTo(7, msgspec.structs.replace(HELLO, domain_pid=77))
    assert isinstance(status, lc.ReportTo) and isinstance(status.report, DomainStatus)
    assert (status.client, status.report.state, status.report.event) == (
        7,
        DomainState.RUNNING,
        None,
    )
    assert status.report.seq == 2  # a snapshot takes the next seq too
    assert subscribe == lc.Subscribe(7)


def test_the_launcher_exits_once_a_handler_flushed_the_final_status() -> None:
    launcher = Launcher().running()
    launcher.event(DomainEvent.STOPPED, StateReason.SHUTDOWN, SHUTOFF)
    assert launcher.feed(lc.FinalDelivered(now=101.0, delivered=True)) == [lc.Exit(0)]
    assert launcher.state.exited
    assert launcher.connect(2, SHUTOFF) == []  # nothing after the exit


def test_with_no_handler_the_final_status_lingers_for_one_to_come_back() -> None:
    launcher = Launcher(final_status_linger_seconds=30.0).running()
    final = final_of(launcher.event(DomainEvent.STOPPED, StateReason.SHUTDOWN, SHUTOFF))
    linger = launcher.feed(lc.FinalDelivered(now=101.0, delivered=False))
    assert linger == [lc.ArmTimer(timer=lc.Timer.LINGER, at=131.0)]
    # a handler comes back: Hello, then the final status, which hangs it up
    hello, deliver = launcher.connect(9, SHUTOFF)
    assert isinstance(hello, lc.ReportTo) and isinstance(hello.report, Hello)
    assert deliver == lc.DeliverFinal(status=final, client=9)
    # it broke off before it got it: keep lingering
    assert launcher.feed(lc.FinalDelivered(now=102.0, delivered=False, client=9)) == []
    assert launcher.feed(lc.FinalDelivered(now=103.0, delivered=True, client=10)) == [lc.Exit(0)]


def test_without_any_handler_the_launcher_exits_after_the_linger() -> None:
    launcher = Launcher().running()
    launcher.event(DomainEvent.STOPPED, StateReason.SHUTDOWN, SHUTOFF)
    launcher.feed(lc.FinalDelivered(now=101.0, delivered=False))
    assert launcher.fire(lc.Timer.LINGER, 131.0, SHUTOFF) == [lc.Exit(0)]


# -- commands ----------------------------------------------------------------------------


def test_start_calls_the_hypervisor_and_replies_with_the_state_after_the_call() -> None:
    launcher = Launcher()
    launcher.boot()
    launcher.connect(1, SHUTOFF)
    actions = launcher.command(Start(id=5, paused=True), SHUTOFF)
    call = lc.StartDomain(paused=True, reply_to=lc.ReplyTo(1, 5))
    assert actions == [call]
    result = reply(launcher.returned(call, PAUSED))
    assert (result.id, result.ok, result.error) == (5, True, None)
    assert result.status is not None and result.status.state is DomainState.PAUSED


def test_start_of_a_running_domain_is_a_no_op() -> None:
    launcher = Launcher().running()
    result = reply(launcher.command(Start(id=2), RUNNING))
    assert result.ok and result.status is not None
    assert result.status.state is DomainState.RUNNING


def test_a_refused_call_is_replied_with_libvirts_error() -> None:
    launcher = Launcher().running()
    (call,) = launcher.command(Pause(id=3), PAUSED)
    assert call == lc.SuspendDomain(reply_to=lc.ReplyTo(1, 3))
    assert isinstance(call, lc.SuspendDomain)
    result = reply(launcher.returned(call, PAUSED, error="domain is already suspended"))
    assert (result.id, result.ok, result.error) == (3, False, "domain is already suspended")
    assert result.status is not None and result.status.state is DomainState.PAUSED


def test_status_replies_with_a_snapshot() -> None:
    launcher = Launcher().running()
    result = reply(launcher.command(Status(id=4), RUNNING, client=3))
    assert result.ok and result.status is not None
    assert (result.status.state, result.status.event) == (DomainState.RUNNING, None)


def test_crash_destroys_and_the_stop_is_reported_as_crashed() -> None:
    launcher = Launcher().running()
    (destroy,) = launcher.command(Crash(id=6), RUNNING)
    assert destroy == lc.DestroyDomain(reply_to=lc.ReplyTo(1, 6))
    assert isinstance(destroy, lc.DestroyDomain)
    result = reply(launcher.returned(destroy, DESTROYED))
    assert result.ok and result.status is not None
    assert result.status.reason is StateReason.CRASHED  # the snapshot says crashed too
    final = final_of(launcher.event(DomainEvent.STOPPED, StateReason.DESTROYED, DESTROYED))
    assert (final.state, final.reason) == (DomainState.SHUTOFF, StateReason.CRASHED)


def test_crash_of_a_domain_that_is_not_running_is_refused() -> None:
    launcher = Launcher()
    launcher.boot()
    result = reply(launcher.command(Crash(id=1), SHUTOFF))
    assert (result.ok, result.error) == (False, "the domain is not running")


# -- graceful shutdown -------------------------------------------------------------------


def test_acpi_is_resent_every_5s_until_the_grace_period_ends_then_destroy() -> None:
    launcher = Launcher().running()
    actions = launcher.command(Shutdown(id=8, grace_period_seconds=12), RUNNING)
    assert actions[0] == lc.ArmTimer(timer=lc.Timer.SHUTDOWN, at=100.0)  # at once
    assert reply(actions).ok  # answered before the first ACPI is sent
    sent_at = []
    at = 100.0
    while True:
        actions = launcher.fire(lc.Timer.SHUTDOWN, at, RUNNING)
        if actions == [lc.DestroyDomain()]:
            break
        assert actions[0] == lc.ShutdownDomain()
        sent_at.append(at)
        assert launcher.returned(lc.ShutdownDomain(), RUNNING) == []
        (arm,) = only(actions, lc.ArmTimer)
        at = arm.at
    assert sent_at == [100.0, 105.0, 110.0]  # the last wait is cut to the deadline
    assert at == 112.0
    assert launcher.returned(lc.DestroyDomain(), DESTROYED) == []
    final = final_of(launcher.event(DomainEvent.STOPPED, StateReason.DESTROYED, DESTROYED))
    assert (final.reason, final.grace_period_expired) == (StateReason.DESTROYED, True)


def test_a_guest_complying_with_acpi_ends_with_shutdown_not_expired() -> None:
    launcher = Launcher().running()
    launcher.command(Shutdown(grace_period_seconds=30), RUNNING)
    launcher.fire(lc.Timer.SHUTDOWN, 100.0, RUNNING)
    launcher.returned(lc.ShutdownDomain(), RUNNING)
    final = final_of(launcher.event(DomainEvent.STOPPED, StateReason.SHUTDOWN, SHUTOFF))
    assert (final.reason, final.grace_period_expired) == (StateReason.SHUTDOWN, False)
    assert launcher.fire(lc.Timer.SHUTDOWN, 105.0, SHUTOFF) == []  # a stale re-send


def test_zero_grace_destroys_at_once_without_acpi_and_is_not_expired() -> None:
    launcher = Launcher().running()
    launcher.command(Shutdown(grace_period_seconds=0), RUNNING)
    assert launcher.fire(lc.Timer.SHUTDOWN, 100.0, RUNNING) == [lc.DestroyDomain()]
    final = final_of(launcher.event(DomainEvent.STOPPED, StateReason.DESTROYED, DESTROYED))
    assert (final.reason, final.grace_period_expired) == (StateReason.DESTROYED, False)


def test_a_shorter_grace_period_overrides_a_longer_one_never_the_reverse() -> None:
    launcher = Launcher().running()
    launcher.command(Shutdown(grace_period_seconds=60), RUNNING)
    launcher.fire(lc.Timer.SHUTDOWN, 100.0, RUNNING)
    launcher.returned(lc.ShutdownDomain(), RUNNING)
    launcher.now = 101.0
    longer = launcher.command(Shutdown(grace_period_seconds=120), RUNNING)
    assert only(longer, lc.ArmTimer) == []
    shorter = launcher.command(Shutdown(grace_period_seconds=0), RUNNING)
    assert only(shorter, lc.ArmTimer) == [lc.ArmTimer(timer=lc.Timer.SHUTDOWN, at=101.0)]
    assert launcher.fire(lc.Timer.SHUTDOWN, 101.0, RUNNING) == [lc.DestroyDomain()]
    final = final_of(launcher.event(DomainEvent.STOPPED, StateReason.DESTROYED, DESTROYED))
    assert final.grace_period_expired  # ACPI was sent and the guest did not comply


def test_a_failed_acpi_request_is_logged_and_does_not_count_as_asked() -> None:
    launcher = Launcher().running()
    launcher.command(Shutdown(grace_period_seconds=1), RUNNING)
    launcher.fire(lc.Timer.SHUTDOWN, 100.0, RUNNING)
    logged = launcher.returned(lc.ShutdownDomain(), RUNNING, error="no agent")
    assert logged == [lc.Log("warning", "ACPI shutdown of ns_vm failed: no agent")]
    assert launcher.fire(lc.Timer.SHUTDOWN, 101.0, RUNNING) == [lc.DestroyDomain()]
    final = final_of(launcher.event(DomainEvent.STOPPED, StateReason.DESTROYED, DESTROYED))
    assert not final.grace_period_expired


def test_shutdown_of_a_domain_that_never_started_ends_the_launcher() -> None:
    launcher = Launcher()
    launcher.boot()
    launcher.command(Shutdown(grace_period_seconds=30), SHUTOFF)
    final = final_of(launcher.fire(lc.Timer.SHUTDOWN, 100.0, SHUTOFF))
    assert (final.state, final.event) == (DomainState.SHUTOFF, None)


def test_start_is_refused_once_a_shutdown_was_requested() -> None:
    launcher = Launcher()
    launcher.boot()
    launcher.command(Shutdown(grace_period_seconds=30), SHUTOFF)
    result = reply(launcher.command(Start(id=2), SHUTOFF))
    assert (result.ok, result.error) == (False, "the domain is shutting down")


def test_sigterm_shuts_down_with_the_vmis_grace_period() -> None:
    launcher = Launcher(termination_grace_seconds=3).running()
    actions = launcher.feed(lc.Signalled(now=100.0, signal="SIGTERM"))
    assert actions == [
        lc.Log("info", "signal SIGTERM: graceful shutdown, grace 3s"),
        lc.ArmTimer(timer=lc.Timer.SHUTDOWN, at=100.0),
    ]
    tick = launcher.fire(lc.Timer.SHUTDOWN, 100.0, RUNNING)
    assert tick == [lc.ShutdownDomain(), lc.ArmTimer(timer=lc.Timer.SHUTDOWN, at=103.0)]
    launcher.returned(lc.ShutdownDomain(), RUNNING)
    assert launcher.fire(lc.Timer.SHUTDOWN, 103.0, RUNNING) == [lc.DestroyDomain()]


# -- live migration, the source ----------------------------------------------------------

MIGRATE = MigrateTo(
    id=11,
    migration_uid="m1",
    target_uri="qemu+unix:///system?socket=/n2/libvirt-sock",
    completion_timeout_per_gib=150,
    progress_timeout_seconds=150,
    progress_interval_seconds=0.25,
)


def migrating(**overrides: object) -> tuple[Launcher, list[lc.Action]]:
    launcher = Launcher(**({"test_driver": False, "guest_memory_bytes": 2 * GiB} | overrides))
    launcher.boot(disks_prepared=True)
    launcher.connect(1, SHUTOFF)
    launcher.event(DomainEvent.STARTED, StateReason.BOOTED, RUNNING)
    return launcher, launcher.command(MIGRATE, RUNNING)


def progress(remaining: int, active: bool = True) -> lc.JobProgress:
    return lc.JobProgress(active=active, processed=100, remaining=remaining, total=GiB)


def poll(launcher: Launcher, at: float, p: lc.JobProgress | None) -> list[lc.Action]:
    assert launcher.fire(lc.Timer.MIGRATION_POLL, at, RUNNING) == [lc.PollMigration(migration=1)]
    return launcher.feed(lc.MigrationPolled(now=at, migration=1, progress=p))


def result_of(actions: list[lc.Action]) -> MigrationResult:
    results = [a.report for a in only(actions, lc.Broadcast)]
    (result,) = [r for r in results if isinstance(r, MigrationResult)]
    return result


def test_migrate_to_is_accepted_and_runs_off_the_loop_with_progress_polls() -> None:
    launcher, actions = migrating()
    assert reply(actions).ok
    assert lc.MigrateDomain(migration=1, command=MIGRATE) in actions
    assert lc.ArmTimer(timer=lc.Timer.MIGRATION_POLL, at=100.25) in actions
    polled = poll(launcher, 100.25, progress(remaining=500))
    (report,) = only(polled, lc.Broadcast)
    assert report.report == MigrationProgress(
        migration_uid="m1", processed=100, remaining=500, total=GiB, mode="PreCopy"
    )
    assert polled[-1] == lc.ArmTimer(timer=lc.Timer.MIGRATION_POLL, at=100.5)
    # an inactive job or unreadable statistics: just poll again
    assert poll(launcher, 100.5, progress(0, active=False)) == [
        lc.ArmTimer(timer=lc.Timer.MIGRATION_POLL, at=100.75)
    ]
    assert poll(launcher, 100.75, None) == [lc.ArmTimer(timer=lc.Timer.MIGRATION_POLL, at=101.0)]


@pytest.mark.parametrize(
    ("overrides", "seen", "error"),
    [
        ({"test_driver": True}, RUNNING, "the test driver cannot migrate (test mode simulates it)"),
        ({}, SHUTOFF, "the domain is not running"),
    ],
)
def test_migrate_to_is_refused(overrides: dict[str, object], seen: lc.Seen, error: str) -> None:
    launcher = Launcher(**({"test_driver": False} | overrides))
    launcher.boot()
    result = reply(launcher.command(MIGRATE, seen))
    assert (result.ok, result.error) == (False, error)


def test_one_migration_at_a_time_and_none_while_shutting_down() -> None:
    launcher, _ = migrating()
    again = reply(launcher.command(MIGRATE, RUNNING))
    assert (again.ok, again.error) == (False, "a migration is already running")
    stopping, _ = migrating()
    stopping.feed(lc.MigrationEnded(now=101.0, migration=1, error="boom", seen=RUNNING))
    stopping.command(Shutdown(grace_period_seconds=30), RUNNING)
    refused = reply(stopping.command(MIGRATE, RUNNING))
    assert (refused.ok, refused.error) == (False, "the domain is shutting down")


def test_a_successful_migration_hands_the_disks_over_and_reports_the_end_after_it() -> None:
    launcher, _ = migrating()
    assert launcher.state.owns_disks
    moved = lc.Seen(state=DomainState.SHUTOFF, reason=StateReason.MIGRATED, wall=1001.0)
    # libvirt's Stopped/Migrated arrives before migrateToURI3 returns: held back
    assert launcher.event(DomainEvent.STOPPED, StateReason.MIGRATED, moved) == []
    assert launcher.state.final is None
    actions = launcher.feed(lc.MigrationEnded(now=102.0, migration=1, seen=moved))
    result = result_of(actions)
    assert (result.ok, result.aborted, result.error, result.duration_seconds) == (
        True,
        False,
        None,
        2.0,
    )
    final = final_of(actions)
    assert actions.index(only(actions, lc.DeliverFinal)[0]) > actions.index(
        only(actions, lc.Broadcast)[0]
    )
    assert (final.state, final.reason, final.event) == (
        DomainState.SHUTOFF,
        StateReason.MIGRATED,
        DomainEvent.STOPPED,
    )
    assert not launcher.state.owns_disks  # the target's launcher owns them now
    assert launcher.fire(lc.Timer.MIGRATION_POLL, 102.25, moved) == []  # no more polls


def test_abort_on_request_keeps_the_guest_and_reports_aborted() -> None:
    launcher, _ = migrating()
    (abort,) = launcher.command(AbortMigration(id=12), RUNNING)
    assert abort == lc.AbortJob(reply_to=lc.ReplyTo(1, 12))
    assert isinstance(abort, lc.AbortJob)
    assert reply(launcher.returned(abort, RUNNING)).ok
    ended = launcher.feed(
        lc.MigrationEnded(now=103.0, migration=1, error="operation aborted", seen=RUNNING)
    )
    result = result_of(ended)
    assert (result.ok, result.aborted, result.error) == (False, True, "aborted on request")
    assert launcher.state.owns_disks and launcher.state.final is None
    no_job = reply(launcher.command(AbortMigration(id=13), RUNNING))
    assert (no_job.ok, no_job.error) == (False, "no migration is running")


def test_no_progress_for_progress_timeout_aborts() -> None:
    launcher, _ = migrating()
    poll(launcher, 101.0, progress(remaining=500))
    assert only(poll(launcher, 250.0, progress(remaining=500)), lc.AbortJob) == []
    assert only(poll(launcher, 251.5, progress(remaining=600)), lc.AbortJob) == [lc.AbortJob()]
    # the abort is under way: no second one
    assert only(poll(launcher, 252.0, progress(remaining=600)), lc.AbortJob) == []
    ended = launcher.feed(lc.MigrationEnded(now=253.0, migration=1, error="cancel", seen=RUNNING))
    result = result_of(ended)
    assert (result.aborted, result.error) == (True, "no progress for 150s (progressTimeout)")


def test_completion_timeout_counts_per_gib_and_aborts_without_post_copy() -> None:
    launcher, _ = migrating()  # 2 GiB guest at 150 s per GiB, from 100.0: until 400.0
    assert hypervisor_calls(poll(launcher, 399.75, progress(remaining=20))) == []
    assert hypervisor_calls(poll(launcher, 400.25, progress(remaining=10))) == [lc.AbortJob()]
    ended = launcher.feed(lc.MigrationEnded(now=401.0, migration=1, error="cancel", seen=RUNNING))
    result = result_of(ended)
    assert (result.ok, result.aborted, result.error) == (
        False,
        True,
        "not completed within 150s per GiB (completionTimeoutPerGiB)",
    )


def test_completion_timeout_switches_to_post_copy_when_allowed() -> None:
    launcher = Launcher(test_driver=False, guest_memory_bytes=GiB // 2)  # counts as 1 GiB
    launcher.boot()
    launcher.connect(1, SHUTOFF)
    launcher.event(DomainEvent.STARTED, StateReason.BOOTED, RUNNING)
    command = MigrateTo(migration_uid="m2", target_uri="x", allow_post_copy=True)
    launcher.command(command, RUNNING)
    assert only(poll(launcher, 250.0, progress(10)), lc.SwitchToPostCopy) == []
    switch = only(poll(launcher, 250.5, progress(9)), lc.SwitchToPostCopy)
    assert switch == [lc.SwitchToPostCopy(migration=1)]
    assert launcher.returned(switch[0], RUNNING) == []
    later = poll(launcher, 251.0, progress(8))
    (report,) = [a.report for a in only(later, lc.Broadcast)]
    assert isinstance(report, MigrationProgress) and report.mode == "PostCopy"
    assert hypervisor_calls(later) == []  # past the switch nothing is enforced
    ended = launcher.feed(lc.MigrationEnded(now=252.0, migration=1, seen=SHUTOFF))
    assert result_of(ended).mode == "PostCopy"


def test_stopping_the_vmi_aborts_its_migration_and_the_stop_proceeds_after() -> None:
    launcher, _ = migrating()
    actions = launcher.command(Shutdown(grace_period_seconds=30), RUNNING)
    assert actions[:2] == [lc.AbortJob(), lc.ArmTimer(timer=lc.Timer.SHUTDOWN, at=100.0)]
    ended = launcher.feed(lc.MigrationEnded(now=101.0, migration=1, error="x", seen=RUNNING))
    assert result_of(ended).error == "the VMI is being stopped"
    assert launcher.fire(lc.Timer.SHUTDOWN, 101.0, RUNNING)[0] == lc.ShutdownDomain()


def test_stale_migration_inputs_are_ignored() -> None:
    launcher, _ = migrating()
    assert launcher.feed(lc.MigrationPolled(now=101.0, migration=7, progress=progress(1))) == []
    assert launcher.feed(lc.MigrationEnded(now=101.0, migration=7, seen=RUNNING)) == []
    assert launcher.state.migration is not None


# -- purity ------------------------------------------------------------------------------


def test_the_machine_imports_no_io_and_reads_no_clock() -> None:
    source = Path(lc.__file__).read_text()
    tree = ast.parse(source)
    imported = {
        alias.name.split(".")[0]
        for node in ast.walk(tree)
        if isinstance(node, ast.Import)
        for alias in node.names
    } | {
        node.module.split(".")[0]
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.module
    }
    forbidden = {"asyncio", "libvirt", "libvirtaio", "socket", "time", "os", "subprocess"}
    assert imported & forbidden == set()
    assert imported <= {"__future__", "enum", "typing", "msgspec", "services"}
