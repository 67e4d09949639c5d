"""The handler's pure core: given what the events say and what the launcher says, plan."""

from __future__ import annotations

from collections.abc import Sequence

from msgspec.structs import replace

from events.catalog import (
    DomainPaused,
    DomainStarted,
    DomainStopped,
    LauncherExited,
    LauncherStarted,
    StopReason,
    VMIWarning,
)
from events.envelope import Decision
from services.handler.effects import Cleanup, Launch, Observed, Rejection, Send
from services.handler.planner import MAX_ATTEMPTS, launch_manifest, plan
from services.handler.state import VMIRecord
from services.launcher.domain_state import DomainState, StateReason
from services.launcher.protocol import DomainStatus, Pause, Resume, Shutdown, Start

KEY = "default/vm1"


def record(**kw: object) -> VMIRecord:
    base: dict[str, object] = dict(
        namespace="default", name="vm1", uid="u1", pod_uid="p1",
        manifest_json=b'{"spec": {"terminationGracePeriodSeconds": 7}}',
    )  # fmt: skip
    base.update(kw)
    return VMIRecord(**base)  # type: ignore[arg-type]


def observed(state: DomainState | None = None, **kw: object) -> Observed:
    o = Observed(uid="u1", pid=42, connected=True, domain_name="default_vm1")
    if state is not None:
        o = o.updated(DomainStatus(state=state, seq=1), 0.0)
    return replace(o, **kw)


def events(actions: Sequence[object]) -> list[object]:
    appends = [a for a in actions if isinstance(a, Decision)]
    assert not any(a.occ for a in appends)  # the handler sees only its node's events
    return [a.event for a in appends]


def test_scheduled_without_launcher_spawns() -> None:
    r = record()
    manifest = launch_manifest(r.manifest, KEY, "u1")
    assert plan(KEY, r, None, "n1", 0.0) == [Launch(KEY, "u1", manifest)]


def test_defined_domain_reports_launcher_and_starts() -> None:
    actions = plan(KEY, record(), observed(DomainState.SHUTOFF), "n1", 0.0)
    (started,) = events(actions)
    assert isinstance(started, LauncherStarted) and started.pid == 42
    assert started.meta.event_id == "virt-handler-n1/u1/LauncherStarted/42"
    assert started.meta.node == "n1"
    assert [a.command for a in actions if isinstance(a, Send)] == [Start(paused=False)]


def test_appends_name_the_records_cause_by_id_and_by_stream_sequence() -> None:
    r = record(causation_id="virt-controller/pod/u1", causation_seq=17)
    (started,) = events(plan(KEY, r, observed(DomainState.SHUTOFF), "n1", 0.0))
    assert isinstance(started, LauncherStarted)
    assert (started.meta.causation_id, started.meta.causation_seq) == ("virt-controller/pod/u1", 17)


def test_running_domain_reported_once() -> None:
    r = record(launcher_pid=42)
    (ev,) = events(plan(KEY, r, observed(DomainState.RUNNING), "n1", 0.0))
    assert isinstance(ev, DomainStarted)
    again = record(launcher_pid=42, started=True)
    assert plan(KEY, again, observed(DomainState.RUNNING), "n1", 0.0) == []


def test_delete_sends_shutdown_with_spec_grace_once() -> None:
    r = record(launcher_pid=42, started=True, delete_requested=True)
    actions = plan(KEY, r, observed(DomainState.RUNNING), "n1", 0.0)
    assert actions == [Send(KEY, Shutdown(grace_period_seconds=7))]
    sent = observed(DomainState.RUNNING, shutdown_grace=7)
    assert plan(KEY, r, sent, "n1", 0.0) == []
    shorter = record(launcher_pid=42, started=True, delete_requested=True, delete_grace=0)
    assert plan(KEY, shorter, sent, "n1", 0.0) == [Send(KEY, Shutdown(grace_period_seconds=0))]


def test_pause_wanted() -> None:
    r = record(launcher_pid=42, started=True, want_paused=True)
    assert plan(KEY, r, observed(DomainState.RUNNING), "n1", 0.0) == [Send(KEY, Pause())]


def test_final_status_and_exit() -> None:
    r = record(launcher_pid=42, started=True)
    o = observed(DomainState.RUNNING, gone=True)
    final = DomainStatus(state=DomainState.SHUTOFF, reason=StateReason.CRASHED, seq=2, final=True)
    o = o.updated(final, 0.0)
    warned, stopped, exited = events(plan(KEY, r, o, "n1", 0.0))
    assert isinstance(warned, VMIWarning)
    assert (warned.reason, warned.message) == ("Stopped", "The VirtualMachineInstance crashed.")
    assert isinstance(stopped, DomainStopped) and stopped.reason is StopReason.CRASHED
    assert isinstance(exited, LauncherExited)


def test_a_guest_panic_is_a_crash_with_kubevirts_warning() -> None:
    r = record(launcher_pid=42, started=True)
    o = observed(DomainState.RUNNING)
    o = o.updated(
        DomainStatus(state=DomainState.CRASHED, reason=StateReason.PANICKED, seq=2, final=True), 0.0
    )
    warned, stopped = events(plan(KEY, r, o, "n1", 0.0))
    assert isinstance(warned, VMIWarning) and warned.reason == "GuestPanicked"
    assert warned.message == "GuestPanicked (details unavailable)"
    assert warned.meta.event_id == "virt-handler-n1/u1/VMIWarning/GuestPanicked"
    assert isinstance(stopped, DomainStopped) and stopped.reason is StopReason.CRASHED
    assert stopped.message == "GuestPanicked (details unavailable)"


def test_a_domain_destroyed_as_irrecoverable_is_a_sync_failure() -> None:
    r = record(launcher_pid=42, started=True)
    o = observed(DomainState.RUNNING)
    why = "KVM internal error. Suberror: 1 (emulation failure)"
    o = o.updated(
        DomainStatus(
            state=DomainState.SHUTOFF, reason=StateReason.CRASHED, seq=2, final=True, message=why
        ),
        0.0,
    )
    warned, stopped = events(plan(KEY, r, o, "n1", 0.0))
    assert isinstance(warned, VMIWarning) and warned.reason == "SyncFailed"
    assert warned.message == f"VMI is irrecoverable due to {why}"
    assert isinstance(stopped, DomainStopped) and stopped.message == why


def test_a_pause_carries_the_domains_reason_never_a_made_up_user() -> None:
    r = record(launcher_pid=42, started=True)
    for reason, expected in (
        (StateReason.USER, "PausedByUser"),
        (StateReason.IO_ERROR, "PausedIOError"),
        (StateReason.UNKNOWN, "Unknown"),
    ):
        o = observed()
        o = o.updated(DomainStatus(state=DomainState.PAUSED, reason=reason, seq=1), 0.0)
        (paused,) = events(plan(KEY, r, o, "n1", 0.0))
        assert isinstance(paused, DomainPaused) and paused.reason == expected


def test_launcher_vanished_while_away() -> None:
    r = record(launcher_pid=42, started=True)
    stopped, exited = events(plan(KEY, r, None, "n1", 0.0))
    assert isinstance(stopped, DomainStopped) and stopped.reason is StopReason.FAILED
    assert isinstance(exited, LauncherExited)


def test_orphan_is_destroyed() -> None:
    assert plan(KEY, None, observed(DomainState.RUNNING), "n1", 0.0) == [Cleanup(key=KEY)]
    newer = record(uid="u2")
    assert plan(KEY, newer, observed(DomainState.RUNNING), "n1", 0.0) == [Cleanup(key=KEY)]


def refused(command: str, count: int, at: float, cause: str = "c1") -> Rejection:
    return Rejection(command=command, cause=cause, error="Resetting the Virtual Machine is "
                     "required", count=count, since=1.0, at=at)  # fmt: skip


def test_a_refused_command_is_sent_again_only_after_its_backoff() -> None:
    r = record(launcher_pid=42, started=True, paused=True, want_paused=False, causation_id="c1")
    o = observed(DomainState.PAUSED, rejected=refused("Resume", 1, at=10.0))
    assert plan(KEY, r, o, "n1", 10.5) == []  # 1 s after the first refusal
    assert plan(KEY, r, o, "n1", 11.0) == [Send(KEY, Resume(), cause="c1")]
    o = observed(DomainState.PAUSED, rejected=refused("Resume", 3, at=20.0))
    assert plan(KEY, r, o, "n1", 23.9) == []  # 4 s after the third
    assert plan(KEY, r, o, "n1", 24.0) == [Send(KEY, Resume(), cause="c1")]


def test_after_the_last_attempt_the_handler_gives_up_and_says_so_once() -> None:
    r = record(launcher_pid=42, started=True, paused=True, want_paused=False, causation_id="c1")
    o = observed(DomainState.PAUSED, rejected=refused("Resume", MAX_ATTEMPTS, at=30.0))
    (warned,) = events(plan(KEY, r, o, "n1", 500.0))
    assert not [a for a in plan(KEY, r, o, "n1", 500.0) if isinstance(a, Send)]
    assert isinstance(warned, VMIWarning) and warned.reason == "SyncFailed"
    assert warned.message == (
        f"Resume refused {MAX_ATTEMPTS} times, given up: Resetting the Virtual Machine is required"
    )
    folded = record(
        launcher_pid=42, started=True, paused=True, want_paused=False, causation_id="c1",
        last_warning=warned.meta.event_id,
    )  # fmt: skip
    assert plan(KEY, folded, o, "n1", 600.0) == []
    # a new request (another unpause) earns new attempts
    again = replace(folded, causation_id="c2")
    assert plan(KEY, again, o, "n1", 600.0) == [Send(KEY, Resume(), cause="c2")]


def test_a_refused_start_is_retried_too() -> None:
    r = record(causation_id="c1", launcher_pid=42)
    o = observed(DomainState.SHUTOFF, start_sent=True, rejected=refused("Start", 1, at=5.0))
    assert plan(KEY, r, o, "n1", 5.5) == []
    assert plan(KEY, r, o, "n1", 6.0) == [Send(KEY, Start(paused=False), cause="c1")]
    assert plan(KEY, r, observed(DomainState.SHUTOFF, start_sent=True), "n1", 6.0) == []
