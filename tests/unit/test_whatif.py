"""What-if: a recorded history replayed through today's controller decider reproduces every
decision; a changed policy's placements and a changed decider's decisions are reported."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
import typer
from hypothesis import given, settings
from hypothesis import strategies as st

from cli.whatif import load_decider, policy_prelude
from events.catalog import (
    MigrationRequested,
    MigrationScheduled,
    PodScheduled,
    StopReason,
    VMDeleted,
)
from events.meta import Kind
from services.controller import scheduler
from services.controller.reactor import ControllerReactor
from services.controller.whatif import Decider, Report, WhatIf
from tests.unit.test_controller_world import GiB, World
from tests.unit.whatif_fixtures import forgetful

NODES = ("node1", "node2", "node3")


def history(vms: int = 12, churn: bool = True) -> World:
    """A live controller's log: three nodes, `vms` VMs started and run (spread by today's
    scheduler), with `churn` some stopped and deleted, and started again."""
    w = World()
    for n in NODES:
        w.run(w.node_joined(n))
    for i in range(vms):
        w.now += 1.0
        w.run(w.vm_created(f"vm{i}"))
        w.start_running(f"vm{i}")
    if churn:
        for i in range(0, vms, 4):
            w.now += 1.0
            w.run(VMDeleted(meta=w.m(Kind.VM, f"vm{i}")))
            w.stop_guest(f"vm{i}")
        w.now += 1.0
        w.run(w.vm_created("late"))
        w.start_running("late")
    return w


def whatif(w: World, decider: Decider, **kw: object) -> Report:
    sandbox = WhatIf(decider, **kw)  # type: ignore[arg-type]
    for s in w.log:
        sandbox.feed(s)
    return sandbox.report()


def test_todays_decider_reproduces_every_decision_of_the_log() -> None:
    w = history()
    live = [s for s in w.log if s.event.meta.actor.service == "virt-controller"]
    assert len(live) > 30
    r = whatif(w, ControllerReactor(node_timeout=1e9))
    assert r.differences == []
    assert r.events == len(w.log)
    assert r.summary.reproduced == r.summary.live_decisions == len(live)
    assert r.summary.first_divergence is None
    placed = Counter(s.event.node for s in live if isinstance(s.event, PodScheduled))
    assert r.summary.placements["live"] == r.summary.placements["whatif"] == dict(placed)


def test_a_window_decides_only_its_events_and_compares_only_their_decisions() -> None:
    w = history()
    mid = len(w.log) // 2
    r = whatif(w, ControllerReactor(node_timeout=1e9), since=mid, until=len(w.log) - 5)
    assert r.differences == []
    assert r.events == len(w.log) - 5 - mid + 1
    assert 0 < r.summary.live_decisions < len(w.log)
    assert r.summary.window == [mid, len(w.log) - 5]


def test_pack_reports_each_placement_that_differs_with_both_nodes() -> None:
    w = history(12, churn=False)
    live = {
        s.event.meta.aggregate.name: s.event.node
        for s in w.log
        if isinstance(s.event, PodScheduled)
    }
    assert sorted(Counter(live.values()).values()) == [4, 4, 4]  # spread today
    r = whatif(w, ControllerReactor(node_timeout=1e9, scheduler_policy="pack"), change="pack")
    moved = {d.aggregate: (d.live, d.whatif) for d in r.differences}
    assert moved, "pack places differently"
    for agg, (lv, wi) in moved.items():
        assert lv is not None and wi is not None
        assert lv.type == wi.type == "PodScheduled"
        assert lv.fields == wi.fields == ["meta.node", "node"]
        assert lv.node == live[agg.split("/")[-1]] != wi.node
    # each placement is answered on the live cluster (spread 1-1-1 before every third):
    # pack takes the fullest node, node1 (by name on a tie), where spread took another
    assert len(moved) == 8 and {wi.node for _, wi in moved.values() if wi} == {"node1"}
    assert r.summary.placements["whatif"] == {"node1": 12}
    assert r.summary.first_divergence is not None
    assert r.summary.first_divergence["aggregate"] == r.differences[0].aggregate


def test_a_changed_decider_is_caught() -> None:
    w = history()
    r = whatif(w, forgetful(), change="decider")
    assert r.differences
    assert {(d.live.type if d.live else None, d.whatif) for d in r.differences} == {
        ("PodScheduled", None)
    }
    first = r.differences[0]
    assert r.summary.first_divergence == {
        "cause": first.cause,
        "aggregate": first.aggregate,
        "id": first.id,
    }


def test_pack_scores_the_most_allocated_node_that_fits() -> None:
    w = World()
    for n in NODES:
        w.run(w.node_joined(n))
    w.run(w.vm_created("a"))
    placed = w.state.cluster.vmis["default/a"].node
    m = w.state.cluster.vmis["default/a"].manifest
    c = w.state.cluster
    assert scheduler.place(m, c, policy=scheduler.PACK) == scheduler.Placement(placed)
    assert scheduler.place(m, c) != scheduler.Placement(placed)


def test_weights_score_the_share_of_capacity_not_the_bytes() -> None:
    """A big node with more allocated and a small one with less: today's rank (allocated
    memory bytes) spreads onto the small node; by the share of capacity (memory weighted),
    onto the big one; packing by that share, onto the small one."""
    w = World()
    w.run(w.node_joined("big", memory=64 * GiB))
    w.run(w.node_joined("small", memory=8 * GiB))
    on = "kubernetes.io/hostname"
    w.run(w.vm_created("a", memory="8Gi", spec={"nodeSelector": {on: "big"}}))
    w.run(w.vm_created("b", memory="2Gi", spec={"nodeSelector": {on: "small"}}))
    w.run(w.vm_created("c", memory="1Gi"))
    c = w.state.cluster
    m = c.vmis["default/c"].manifest
    assert c.vmis["default/c"].node == "small"
    assert scheduler.place(m, c) == scheduler.Placement("small")
    memory = scheduler.parse_weights("memory=1")
    assert scheduler.place(m, c, weights=memory) == scheduler.Placement("big")
    assert scheduler.place(m, c, policy=scheduler.PACK, weights=memory) == scheduler.Placement(
        "small"
    )


def test_weights_are_parsed_and_refused_in_one_line() -> None:
    assert scheduler.parse_weights("cpu=1, memory=3") == (("cpu", 1), ("memory", 3))
    assert scheduler.parse_weights("") == ()
    for bad, said in (
        ("disk=1", "unknown resource 'disk'"),
        ("cpu=x", "weight of cpu"),
        ("cpu=101", "weight of cpu"),
        ("cpu=0,memory=0", "the weights are all 0"),
    ):
        with pytest.raises(ValueError, match=said):
            scheduler.parse_weights(bad)


# ------------------------------------------------- determinism over generated histories
@st.composite
def operations(draw: st.DrawFn) -> list[tuple[str, int]]:
    ops = st.tuples(st.sampled_from(["create", "run", "fail", "delete", "node"]), st.integers(0, 5))
    return draw(st.lists(ops, min_size=1, max_size=40))


def play(ops: list[tuple[str, int]]) -> World:
    """A history the controller wrote, driven by random user and handler events: VMs of
    4 GiB created, run, their guests failing (Always restarts them), deleted; nodes of
    8 GiB joining (too few of them leave VMIs unschedulable for a while)."""
    w = World()
    w.run(w.node_joined("node0", memory=8 * GiB))
    joined = 1
    for op, i in ops:
        w.now += 1.0
        name = f"vm{i}"
        vm = w.state.cluster.vms.get(f"default/{name}")
        vmi = w.vmi(name)
        if op == "create" and vm is None:
            w.run(w.vm_created(name, memory="4Gi"))
        elif op == "run" and vmi is not None and vmi.node and vmi.phase == "Scheduling":
            w.start_running(name)
        elif op == "fail" and vmi is not None and vmi.node and vmi.phase == "Running":
            w.stop_guest(name, StopReason.CRASHED)
        elif op == "delete" and vm is not None:
            w.run(VMDeleted(meta=w.m(Kind.VM, name)))
            if vmi is not None and vmi.node and vmi.phase in ("Scheduling", "Running"):
                w.stop_guest(name)
        elif op == "node" and joined < 4:
            w.run(w.node_joined(f"node{joined}", memory=8 * GiB))
            joined += 1
    return w


@settings(max_examples=40, deadline=None)
@given(operations())
def test_any_history_the_controller_wrote_replays_with_no_difference(
    ops: list[tuple[str, int]],
) -> None:
    w = play(ops)
    r = whatif(w, ControllerReactor(node_timeout=1e9))
    assert r.differences == [], r.differences[0]
    assert r.summary.reproduced == r.summary.live_decisions


@settings(max_examples=20, deadline=None)
@given(operations(), st.floats(0.0, 1.0), st.floats(0.0, 1.0))
def test_any_window_of_such_a_history_replays_with_no_difference(
    ops: list[tuple[str, int]], a: float, b: float
) -> None:
    w = play(ops)
    since, until = sorted((1 + int(a * (len(w.log) - 1)), 1 + int(b * (len(w.log) - 1))))
    r = whatif(w, ControllerReactor(node_timeout=1e9), since=since, until=until)
    assert r.differences == [], r.differences[0]
    assert r.events == until - since + 1


def test_a_decider_is_named_as_controller_module_factory() -> None:
    assert isinstance(
        load_decider("controller=tests.unit.whatif_fixtures:forgetful"), ControllerReactor
    )
    for bad in ("tests.unit.whatif_fixtures:forgetful", "handler=m:f", "controller=nope:f",
                "controller=tests.unit.whatif_fixtures:nothing"):  # fmt: skip
        with pytest.raises(typer.Exit):
            load_decider(bad)


def test_a_migration_policy_from_the_windows_start_changes_the_migrations_settings(
    tmp_path: Path,
) -> None:
    """`whatif --migration-policy FILE`: the policy is created in the sandbox as the window
    begins (through the kind's admission), so the migrations decided after it carry its
    settings; a file the api would refuse is refused at once, in the api's words."""
    w = World()
    w.run(w.node_joined("node1"))
    w.run(w.vm_created("vm1"))
    w.start_running("vm1")
    w.run(w.node_joined("node2"))
    start = len(w.log) + 1
    manifest = {
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachineInstanceMigration",
        "metadata": {"name": "m1", "namespace": "default", "uid": "mig-uid-m1"},
        "spec": {"vmiName": "vm1"},
    }
    w.run(MigrationRequested(meta=w.m(Kind.MIGRATION, "m1"), manifest=manifest))
    scheduled = [s for s in w.log if isinstance(s.event, MigrationScheduled)]
    assert len(scheduled) == 1
    policy = tmp_path / "slow.yaml"
    policy.write_text(
        "apiVersion: migrations.kubevirt.io/v1alpha1\nkind: MigrationPolicy\n"
        "metadata: {name: slow}\nspec:\n  bandwidthPerMigration: 1Mi\n"
    )
    prelude, change = policy_prelude(policy)
    assert change == f"migration policy slow ({policy})"  # named as the api names it
    sandbox = WhatIf(
        ControllerReactor(node_timeout=1e9), since=start, change=change, prelude=prelude
    )
    for s in w.log:
        sandbox.feed(s)
    r = sandbox.report()
    assert [(d.live.type if d.live else None) for d in r.differences] == ["MigrationScheduled"]
    changed = r.differences[0].live
    assert changed is not None and changed.fields == ["settings"]  # the policy's, not none
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        "apiVersion: migrations.kubevirt.io/v1alpha1\nkind: MigrationPolicy\n"
        "metadata: {name: UPPER}\nspec: {}\n"
    )
    with pytest.raises(typer.Exit):
        policy_prelude(bad)
