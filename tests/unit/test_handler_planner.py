"""The handler's pure core: given what the events say and what the launcher says, plan."""

from __future__ import annotations

from collections.abc import Sequence

from msgspec.structs import replace

from events.catalog import DomainStarted, DomainStopped, LauncherExited, LauncherStarted, StopReason
from events.envelope import Decision
from services.handler.effects import Cleanup, Launch, Observed, Send
from services.handler.planner import launch_manifest, plan
from services.handler.state import VMIRecord
from services.launcher.domain_state import DomainState, StateReason
from services.launcher.protocol import DomainStatus, Pause, Shutdown, Start

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
    stopped, exited = events(plan(KEY, r, o, "n1", 0.0))
    assert isinstance(stopped, DomainStopped) and stopped.reason is StopReason.CRASHED
    assert isinstance(exited, LauncherExited)


def test_launcher_vanished_while_away() -> None:
    r = record(launcher_pid=42, started=True)
    stopped, exited = events(plan(KEY, r, None, "n1", 0.0))
    assert isinstance(stopped, DomainStopped) and stopped.reason is StopReason.FAILED
    assert isinstance(exited, LauncherExited)


def test_orphan_is_destroyed() -> None:
    assert plan(KEY, None, observed(DomainState.RUNNING), "n1", 0.0) == [Cleanup(key=KEY)]
    newer = record(uid="u2")
    assert plan(KEY, newer, observed(DomainState.RUNNING), "n1", 0.0) == [Cleanup(key=KEY)]
