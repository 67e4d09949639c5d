"""The handler's decider (pure): bus events, launcher observations and ticks in, appends,
fleet actions and notes out; no NATS, no launcher, no libvirt."""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import msgspec

from events.catalog import (
    DomainMigratedIn,
    DomainStarted,
    DomainStopped,
    Event,
    LauncherExited,
    LauncherStarted,
    MigrationFailed,
    MigrationSucceeded,
    NodeJoined,
    StopReason,
    TargetPrepared,
    TargetPreparing,
    VMIRemoved,
    VMIUnpauseRequested,
    VMIWarning,
)
from events.envelope import Decision
from services.handler.effects import Cleanup, Launch, LauncherSeen, Observed, Release, Send
from services.handler.migration import TARGET_GONE_GRACE, TargetOver
from services.handler.planner import MAX_ATTEMPTS, rejected
from services.handler.reactor import HandlerState
from services.launcher.domain_state import DomainState
from services.launcher.protocol import Resume, Start
from services.runtime.reactor import Note
from tests.unit.handler_support import (
    MIG,
    NODE,
    TARGET,
    VMI,
    VMI_UID,
    ctx,
    decider,
    deliver,
    launcher,
    meta,
    pod_scheduled,
    scheduled,
    settle,
    stored,
)


def appended(outputs: Sequence[object]) -> list[Event]:
    assert all(not isinstance(o, Decision) or not o.occ for o in outputs), "handler appends: no OCC"
    return [o.event for o in outputs if isinstance(o, Decision)]


def seen(state: HandlerState, o: Observed | None, key: str = "default/vm1") -> LauncherSeen:
    return LauncherSeen(key, o)


def test_first_tick_registers_the_node_once() -> None:
    d, state = decider(), HandlerState()
    (joined,) = appended(settle(d, state, d.tick(state, ctx(5.0, d))))
    assert isinstance(joined, NodeJoined) and joined.capacity.cpu_millis == 4000
    assert joined.meta.event_id.startswith(f"virt-handler-{NODE}/NodeJoined/")
    assert state.joined
    assert d.tick(state, ctx(6.0, d)) == []


def test_pod_scheduled_launches_with_the_manifest_completed() -> None:
    d, state = decider(), HandlerState(joined=True)
    (launch,) = deliver(d, state, pod_scheduled(), 1, 2.0)
    assert isinstance(launch, Launch) and launch.key == "default/vm1" and launch.uid == VMI_UID
    assert not launch.migration_target
    md = msgspec.json.decode(launch.manifest)["metadata"]
    assert md == {"name": "vm1", "namespace": "default", "uid": VMI_UID}


def test_launcher_reports_become_events_and_commands() -> None:
    d, state = decider(), HandlerState(joined=True)
    deliver(d, state, pod_scheduled(), 1, 2.0)
    obs = seen(state, launcher(DomainState.SHUTOFF))
    d.observe(state, obs)
    out = d.respond(state, obs, ctx(3.0, d))
    (started,) = appended(out)
    assert isinstance(started, LauncherStarted) and started.pid == 42
    assert [o.command for o in out if isinstance(o, Send)] == [Start(paused=False)]
    # the same state asks for the same (ids repeat: a duplicate, dropped by the shell)
    again = d.respond(state, obs, ctx(3.5, d))
    assert appended(again)[0].meta.event_id == started.meta.event_id
    obs = seen(state, launcher(DomainState.RUNNING, start_sent=True))
    d.observe(state, obs)
    assert [type(e).__name__ for e in appended(d.respond(state, obs, ctx(4.0, d)))] == [
        "LauncherStarted",
        "DomainStarted",
    ]


def test_a_failed_spawn_is_reported_once_and_then_released() -> None:
    d, state = decider(), HandlerState(joined=True)
    deliver(d, state, pod_scheduled(), 1, 2.0)
    failed = Observed(uid=VMI_UID, gone=True, spawn_error="no zygote", ended_at=2.5)
    d.observe(state, seen(state, failed))
    (stopped,) = appended(d.respond(state, seen(state, failed), ctx(3.0, d)))
    assert isinstance(stopped, DomainStopped) and stopped.reason is StopReason.FAILED
    assert stopped.message == "virt-launcher failed to start: no zygote"
    # no respawn, no LauncherExited (it never started); folded: forget the launcher
    assert deliver(d, state, stopped, 2, 4.0) == [Release("default/vm1")]
    d.observe(state, seen(state, None))
    assert d.tick(state, ctx(5.0, d)) == []


def test_a_gone_launcher_of_an_exited_vmi_is_released_and_an_orphan_cleaned_up() -> None:
    d, state = decider(), HandlerState(joined=True)
    deliver(d, state, pod_scheduled(), 1, 2.0)
    gone = launcher(DomainState.SHUTOFF, connected=False, gone=True)
    d.observe(state, seen(state, gone))
    exited = LauncherExited(meta=meta(VMI, NODE, 3), node=NODE, pod_uid="pod-1")
    deliver(d, state, exited, 3, 3.0)
    assert d.respond(state, seen(state, gone), ctx(4.0, d)) == [Release("default/vm1")]
    # a running launcher whose VMI is gone from this node: destroy it
    d.observe(state, seen(state, launcher(DomainState.RUNNING)))
    assert deliver(d, state, VMIRemoved(meta=meta(VMI, NODE, 4)), 4, 5.0) == [
        Cleanup("default/vm1")
    ]


def test_a_migration_target_prepares_and_spawns_a_target_launcher() -> None:
    for qemu in (False, True):
        d, state = decider(TARGET, qemu=qemu), HandlerState(joined=True)
        out = deliver(d, state, scheduled(), 10, 2.0)
        preparing, launch = appended(out)[0], out[1]
        assert isinstance(preparing, TargetPreparing)
        assert preparing.meta.event_id == f"virt-handler-{TARGET}/mig-uid/TargetPreparing"
        assert isinstance(launch, Launch) and launch.migration_target is qemu
        assert state.migrations.owns("default/vm1")


def test_target_readiness_goes_out_once_per_incarnation() -> None:
    d, state = decider(TARGET), HandlerState(joined=True)
    deliver(d, state, scheduled(), 10, 2.0)
    d.observe(state, seen(state, Observed(uid=VMI_UID, spawning=True)))  # the Launch
    preparing = TargetPreparing(meta=meta(MIG, TARGET, 11), target_node=TARGET)
    assert deliver(d, state, preparing, 11, 2.1) == []
    paused = launcher(DomainState.PAUSED, start_sent=True)
    d.observe(state, seen(state, paused))
    (ready,) = appended(settle(d, state, d.respond(state, seen(state, paused), ctx(3.0, d))))
    assert isinstance(ready, TargetPrepared) and ready.meta.node == NODE  # to the source
    assert ready.target_address == "10.0.0.1"  # test mode: the node's address
    # routed away, never delivered here: the note keeps it from going out again
    assert d.respond(state, seen(state, paused), ctx(4.0, d)) == []


def test_qemu_target_gone_waits_for_the_grace_then_reports_target_pod_down() -> None:
    d, state = decider(TARGET, qemu=True), HandlerState(joined=True)
    deliver(d, state, scheduled(), 10, 2.0)
    d.observe(state, seen(state, Observed(uid=VMI_UID, spawning=True)))  # the Launch
    preparing = TargetPreparing(meta=meta(MIG, TARGET, 11), target_node=TARGET)
    assert deliver(d, state, preparing, 11, 2.1) == []
    gone = launcher(None, connected=False, gone=True, ended_at=10.0)
    d.observe(state, seen(state, gone))
    assert d.respond(state, seen(state, gone), ctx(10.5, d)) == []
    assert d.wakeup(state) == 10.0 + TARGET_GONE_GRACE
    (down,) = appended(settle(d, state, d.tick(state, ctx(12.5, d))))
    assert isinstance(down, MigrationFailed) and down.meta.node == NODE
    assert d.wakeup(state) is None and d.tick(state, ctx(13.0, d)) == []


def test_a_succeeded_target_resumes_then_the_planner_takes_over() -> None:
    d, state = decider(TARGET), HandlerState(joined=True)
    deliver(d, state, scheduled(), 10, 2.0)
    paused = launcher(DomainState.PAUSED, start_sent=True)
    d.observe(state, seen(state, paused))
    ok = MigrationSucceeded(
        meta=meta(MIG, TARGET, 14), target_node=TARGET, target_pod_uid="tpod-uid"
    )
    assert deliver(d, state, ok, 14, 5.0) == [Send("default/vm1", Resume())]
    running = launcher(DomainState.RUNNING, start_sent=True)
    d.observe(state, seen(state, running))
    out = d.respond(state, seen(state, running), ctx(6.0, d))
    assert [type(o.observation) for o in out if isinstance(o, Note)] == [TargetOver]
    assert settle(d, state, out) == []
    assert not state.migrations.owns("default/vm1")
    # decided again (as the shell does after a note): the planner reports the arrival,
    # no LauncherStarted/DomainStarted
    (moved,) = appended(d.respond(state, seen(state, running), ctx(6.0, d)))
    assert isinstance(moved, DomainMigratedIn)
    assert moved.meta.event_id == f"virt-handler-{TARGET}/tpod-uid/DomainMigratedIn"


def test_a_domain_refusing_every_command_gets_bounded_attempts_and_one_warning() -> None:
    """An unpause the domain refuses: over two minutes of ticks the handler sends the
    command MAX_ATTEMPTS times with growing gaps, then appends one SyncFailed warning and
    nothing more (no retry storm); another unpause request earns one more round."""
    d, state = decider(), HandlerState(joined=True)
    deliver(d, state, pod_scheduled(), 1, 1.0)
    seq = 2
    for event in (
        LauncherStarted(meta=meta(VMI, NODE, seq), node=NODE, pod_uid="pod-1", pid=42),
        DomainStarted(meta=meta(VMI, NODE, seq + 1), node=NODE, domain="default_vm1", paused=True),
        VMIUnpauseRequested(meta=meta(VMI, NODE, seq + 2)),
    ):
        deliver(d, state, event, seq, 2.0)
        seq += 1
    d.observe(state, seen(state, launcher(DomainState.PAUSED)))

    def run(start: float, seconds: float) -> tuple[list[float], list[Event]]:
        nonlocal seq
        sends: list[float] = []
        appends: list[Event] = []
        t = start
        while t < start + seconds:
            for out in settle(d, state, d.tick(state, ctx(t, d))):
                if isinstance(out, Send):  # the launcher refuses it at once
                    sends.append(t)
                    o = state.observed["default/vm1"]
                    rj = rejected(o.rejected, "Resume", out.cause, "Resetting the Virtual "
                                  "Machine is required", t)  # fmt: skip
                    d.observe(state, seen(state, msgspec.structs.replace(o, rejected=rj)))
                elif isinstance(out, Decision):
                    appends.append(out.event)
                    seq += 1
                    deliver(d, state, out.event, seq, t)  # the consumer delivers it back
            t += 0.25
        return sends, appends

    sends, appends = run(10.0, 120.0)
    assert len(sends) == MAX_ATTEMPTS
    gaps = [b - a for a, b in itertools.pairwise(sends)]
    assert gaps == [1.0, 2.0, 4.0, 8.0]
    (warning,) = appends
    assert isinstance(warning, VMIWarning) and warning.reason == "SyncFailed"
    deliver(d, state, VMIUnpauseRequested(meta=meta(VMI, NODE, 500)), 500, 131.0)
    sends, appends = run(131.0, 60.0)
    assert len(sends) == MAX_ATTEMPTS and len(appends) == 1


def test_the_log_alone_forgets_an_arrival_once_its_vmi_is_removed() -> None:
    # the fold a checkpoint saves sees no notes: the arrival of a VMI that was removed
    # since must not stay in it for good
    d, state = decider(TARGET), HandlerState(joined=True)
    d.evolve(state, stored(scheduled(), 10))
    ok = MigrationSucceeded(
        meta=meta(MIG, TARGET, 14), target_node=TARGET, target_pod_uid="tpod-uid"
    )
    d.evolve(state, stored(ok, 14))
    assert "default/vm1" in state.migrations.targets and "default/vm1" in state.records
    d.evolve(state, stored(VMIRemoved(meta=meta(VMI, TARGET, 20)), 20))
    assert not state.migrations.targets and not state.records
