"""The handler's migration state and target planning (pure), and the api's abort routing."""

from __future__ import annotations

from msgspec.structs import replace

from events.catalog import (
    DomainMigratedIn,
    Event,
    MigrationAborted,
    MigrationFailed,
    MigrationScheduled,
    MigrationSettings,
    MigrationSucceeded,
    TargetPrepared,
    TargetPreparing,
)
from events.envelope import Decision, Stored
from events.meta import Actor, Aggregate, Kind, Meta
from services.handler.effects import Launch, Observed, Send
from services.handler.migration import (
    TARGET_POD_DOWN,
    MigrationState,
    TargetJob,
    TargetNoted,
    TargetOver,
    plan_target,
)
from services.handler.migration import fold as fold_stored
from services.handler.planner import launch_manifest, plan
from services.handler.state import NodeState
from services.handler.state import fold_event as fold_record
from services.launcher.domain_state import DomainState
from services.launcher.protocol import DomainStatus, Resume, Shutdown, Start
from services.runtime.reactor import Note

MIG = Aggregate(Kind.MIGRATION, "default", "m1", "mig-uid")
VMI = {"metadata": {"name": "vm1", "namespace": "default", "uid": "vmi-uid"}, "spec": {}}


def meta(node: str, n: int = 0) -> Meta:
    return Meta(
        event_id=f"e{n}",
        aggregate=MIG,
        occurred_at=1.0,
        correlation_id="corr",
        actor=Actor(service="test"),
        node=node,
    )


SCHEDULED_SEQ = 7  # where scheduled() is stored: the target's appends name it their cause


def stored(event: Event, seq: int) -> Stored:
    return Stored(seq=seq, subject="", time=0.0, event=event)


def fold(
    ms: MigrationState, records: NodeState, event: Event, node: str, seq: int = 20
) -> str | None:
    return fold_stored(ms, records, stored(event, seq), node)


def fold_event(records: NodeState, event: Event, seq: int = 30) -> NodeState:
    return fold_record(records, stored(event, seq))


def scheduled() -> MigrationScheduled:
    return MigrationScheduled(
        meta=meta("node-2"),
        vmi_name="vm1",
        vmi_uid="vmi-uid",
        source_node="node-1",
        source_pod="pod-src",
        target_node="node-2",
        target_pod="pod-tgt",
        target_pod_uid="tpod",
        settings=MigrationSettings(),
        manifest=VMI,
    )


def target_state() -> tuple[MigrationState, NodeState, TargetJob]:
    ms, records = MigrationState(), NodeState()
    assert fold(ms, records, scheduled(), "node-2", SCHEDULED_SEQ) == "default/vm1"
    return ms, records, ms.targets["default/vm1"]


def status(state: DomainState) -> DomainStatus:
    return DomainStatus(state=state, seq=1)


def test_only_events_routed_here_are_folded() -> None:
    ms: MigrationState = MigrationState()
    assert fold(ms, {}, scheduled(), "node-1") is None  # routed to node-2
    assert not ms.targets


def test_target_prepares_spawns_then_starts_paused_and_reports_ready() -> None:
    _, _, job = target_state()
    first = plan_target(job, None, "node-2", False, "10.0.0.2", 5.0)
    assert isinstance(first[0], Decision) and isinstance(first[0].event, TargetPreparing)
    assert first[0].event.meta.event_id == "virt-handler-node-2/mig-uid/TargetPreparing"
    assert not first[0].occ
    manifest = launch_manifest(job.manifest, "default/vm1", "vmi-uid")
    assert first[1] == Launch("default/vm1", "vmi-uid", manifest, migration_target=False)
    job.preparing = True
    o = Observed(uid="vmi-uid", connected=True, pid=7, status=status(DomainState.SHUTOFF))
    assert plan_target(job, o, "node-2", False, "10.0.0.2", 5.0) == [
        Send("default/vm1", Start(paused=True))
    ]
    o = replace(o, start_sent=True, status=status(DomainState.PAUSED))
    ready, noted = plan_target(job, o, "node-2", False, "10.0.0.2", 5.0)
    assert isinstance(ready, Decision) and isinstance(ready.event, TargetPrepared)
    # routed to the source, never delivered here: noted once appended
    assert noted == Note(TargetNoted("default/vm1", prepared=True))
    assert ready.event.meta.node == "node-1"  # routed to the source
    assert ready.event.target_address == "10.0.0.2" and ready.event.target_pod_uid == "tpod"
    # caused by the MigrationScheduled: its id and its stream sequence (`why` gets it by that)
    assert (ready.event.meta.causation_id, ready.event.meta.causation_seq) == ("e0", SCHEDULED_SEQ)


def test_qemu_target_is_ready_once_its_launcher_waits() -> None:
    _, _, job = target_state()
    job.preparing = True
    o = Observed(uid="vmi-uid", connected=True, pid=7, status=status(DomainState.SHUTOFF))
    ready, _ = plan_target(job, o, "node-2", True, "qemu+unix:///system?socket=/x", 5.0)
    assert isinstance(ready, Decision) and isinstance(ready.event, TargetPrepared)
    assert ready.event.target_address.startswith("qemu+unix://")


def test_target_launcher_gone_reports_target_pod_down_to_the_source() -> None:
    _, _, job = target_state()
    job.preparing = True
    o = Observed(uid="vmi-uid", gone=True, pid=7)
    down, noted = plan_target(job, o, "node-2", False, "a", 5.0)
    assert isinstance(down, Decision) and isinstance(down.event, MigrationFailed)
    assert down.event.message == TARGET_POD_DOWN and down.event.meta.node == "node-1"
    assert noted == Note(TargetNoted("default/vm1", failed=True))
    # unobserved after a restart (TargetPreparing recorded: it had been spawned)
    down2, _ = plan_target(job, None, "node-2", False, "a", 5.0)
    assert isinstance(down2, Decision) and down2.event.meta.event_id == down.event.meta.event_id


def test_success_makes_an_ordinary_record_and_resumes_then_the_planner_takes_over() -> None:
    ms, records, job = target_state()
    job.preparing = True
    ok = MigrationSucceeded(meta=meta("node-2", 2), target_node="node-2", target_pod_uid="tpod")
    fold(ms, records, ok, "node-2", seq=9)
    r = records["default/vm1"]
    assert r.migrated_in and r.started and r.pod_uid == "tpod" and r.id_scope == "tpod"
    assert (r.causation_id, r.causation_seq) == ("e2", 9)  # the handler's next appends' cause
    o = Observed(uid="vmi-uid", connected=True, pid=7, status=status(DomainState.PAUSED))
    assert plan_target(job, o, "node-2", False, "a", 5.0) == [Send("default/vm1", Resume())]
    o = replace(o, status=status(DomainState.RUNNING))
    assert plan_target(job, o, "node-2", False, "a", 5.0) == [Note(TargetOver("default/vm1"))]
    # no LauncherStarted / DomainStarted for a migrated-in VMI (it is Running already): one
    # DomainMigratedIn with the target's QEMU pid and domain type, id scoped by the target pod
    running = DomainStatus(state=DomainState.RUNNING, seq=2, domain_pid=4242)
    o = replace(o, status=running, domain_type="qemu")
    (moved,) = plan("default/vm1", r, o, "node-2", 5.0)
    assert isinstance(moved, Decision) and isinstance(moved.event, DomainMigratedIn)
    assert (moved.event.node, moved.event.qemu_pid, moved.event.domain_type) == (
        "node-2",
        4242,
        "qemu",
    )
    assert moved.event.meta.event_id == "virt-handler-node-2/tpod/DomainMigratedIn"
    assert moved.event.meta.node == "node-2" and moved.event.meta.aggregate.uid == "vmi-uid"
    # a plan repeated before its append was folded repeats the same id (a duplicate)
    (again,) = plan("default/vm1", r, o, "node-2", 6.0)
    assert isinstance(again, Decision) and again.event.meta.event_id == moved.event.meta.event_id
    # folded (live or on a restart's catch-up): reported once, nothing more to say
    fold_event(records, moved.event)
    assert records["default/vm1"].migrated_in_reported
    assert plan("default/vm1", records["default/vm1"], o, "node-2", 7.0) == []


def test_migrated_in_is_not_reported_before_the_domain_runs_here() -> None:
    ms, records, job = target_state()
    job.preparing = True
    ok = MigrationSucceeded(meta=meta("node-2", 2), target_node="node-2", target_pod_uid="tpod")
    fold(ms, records, ok, "node-2")
    r = records["default/vm1"]
    assert plan("default/vm1", r, Observed(uid="vmi-uid", connected=True, pid=7), "n", 5.0) == []
    gone = Observed(uid="vmi-uid", pid=7, status=status(DomainState.RUNNING))
    gone = gone.updated(DomainStatus(state=DomainState.SHUTOFF, seq=2, final=True), 5.0)
    assert not any(
        isinstance(a, Decision) and isinstance(a.event, DomainMigratedIn)
        for a in plan("default/vm1", r, gone, "node-2", 5.0)
    )


def test_a_second_arrival_on_the_same_node_is_reported_again_with_its_own_id() -> None:
    ms, records, _ = target_state()
    ok = MigrationSucceeded(meta=meta("node-2", 2), target_node="node-2", target_pod_uid="tpod")
    fold(ms, records, ok, "node-2")
    r = records["default/vm1"]
    o = Observed(uid="vmi-uid", connected=True, pid=7, status=status(DomainState.RUNNING))
    (first,) = plan("default/vm1", r, o, "node-2", 5.0)
    assert isinstance(first, Decision)
    fold_event(records, first.event)
    # the VMI left and comes back by another migration (a new target pod)
    del ms.targets["default/vm1"]
    m2 = replace(meta("node-2", 5), aggregate=Aggregate(Kind.MIGRATION, "default", "m2", "mig2"))
    fold(ms, records, replace(scheduled(), meta=m2, target_pod_uid="tpod2"), "node-2")
    ok2 = MigrationSucceeded(meta=m2, target_node="node-2", target_pod_uid="tpod2")
    fold(ms, records, ok2, "node-2")
    r2 = records["default/vm1"]
    assert r2.migrated_in and not r2.migrated_in_reported
    (second,) = plan("default/vm1", r2, o, "node-2", 6.0)
    assert isinstance(second, Decision) and isinstance(second.event, DomainMigratedIn)
    assert second.event.meta.event_id == "virt-handler-node-2/tpod2/DomainMigratedIn"


def test_failure_or_abort_destroys_the_target_launcher() -> None:
    ms, records, job = target_state()
    aborted = MigrationAborted(meta=meta("node-2", 3), reason="Migration aborted by user")
    fold(ms, records, aborted, "node-2")
    assert job.outcome == "failed" and "default/vm1" not in records
    o = Observed(uid="vmi-uid", connected=True, pid=7, status=status(DomainState.PAUSED))
    assert plan_target(job, o, "node-2", False, "a", 5.0) == [
        Send("default/vm1", Shutdown(grace_period_seconds=0))
    ]
    o = replace(o, gone=True)
    assert plan_target(job, o, "node-2", False, "a", 5.0) == [Note(TargetOver("default/vm1"))]


def test_source_job_folds_start_progress_abort_and_failure() -> None:
    ms: MigrationState = MigrationState()
    prepared = TargetPrepared(
        meta=meta("node-1"), target_node="node-2", target_address="a", target_pod_uid="tpod"
    )
    fold(ms, {}, prepared, "node-1")
    job = ms.sources["default/m1"]
    assert job.target_node == "node-2"
    fold(ms, {}, MigrationFailed(meta=meta("node-1", 4), reason="X", message="why"), "node-1")
    assert job.failure == "why"
