"""Scheduling: fit, selectors, node affinity, pod (anti-)affinity, taints, cordon,
Unschedulable messages, retry when the cluster changes, target placement for migrations."""

from __future__ import annotations

from typing import Any

import pytest

from events.catalog import NodeCordoned, NodeUncordoned, PodScheduled, Taint, Unschedulable
from events.meta import Kind
from services.controller import scheduler
from tests.unit.test_controller_world import GiB, World, of, types, vmi_manifest


def three_nodes(w: World, **labels: dict[str, str]) -> None:
    for name in ("node1", "node2", "node3"):
        w.given(w.node_joined(name, labels=labels.get(name, {})))


def placed(w: World, name: str, **kw: Any) -> str:
    out = w.run(w.vmi_created(name, **kw))
    scheduled = of(out, PodScheduled)
    assert scheduled, f"not scheduled: {[getattr(e, 'message', '') for e in out]}"
    return str(scheduled[0].node)


def unschedulable(w: World, name: str, **kw: Any) -> str:
    out = w.run(w.vmi_created(name, **kw))
    assert types(out) == ["Unschedulable"], types(out)
    ev = out[0]
    assert isinstance(ev, Unschedulable) and ev.reason == "Unschedulable"
    return ev.message


def test_least_allocated_node_wins_then_name() -> None:
    w = World()
    three_nodes(w)
    assert [placed(w, f"v{i}") for i in range(4)] == ["node1", "node2", "node3", "node1"]


def test_insufficient_memory_message_then_scheduled_when_a_node_joins() -> None:
    w = World()
    w.given(w.node_joined("small", memory=1 * GiB))
    msg = unschedulable(w, "big", memory="4Gi")
    assert msg == "0/1 nodes are available: 1 Insufficient memory."
    assert w.tick() == []  # the same message is not repeated
    out = w.run(w.node_joined("large", memory=32 * GiB))
    assert types(out) == ["PodScheduled"] and of(out, PodScheduled)[0].node == "large"


def test_capacity_freed_by_a_removed_vmi_reschedules() -> None:
    w = World()
    w.given(w.node_joined("node1", memory=3 * GiB))
    assert placed(w, "a", memory="2Gi") == "node1"
    unschedulable(w, "b", memory="2Gi")
    w.run(w.launcher_started("a"))
    out = w.run(w.domain_stopped("a"))  # final VMIs hold no capacity
    assert of(out, PodScheduled)[0].node == "node1"


def test_cpu_is_checked_too() -> None:
    w = World()
    w.given(w.node_joined("node1", cpu=1000))
    msg = unschedulable(w, "v", cpu="2")
    assert msg == "0/1 nodes are available: 1 Insufficient cpu."


def test_placements_in_one_pass_count_against_each_other() -> None:
    w = World()
    w.given(w.vmi_created("a", memory="2Gi"), w.vmi_created("b", memory="2Gi"))
    out = w.run(w.node_joined("node1", memory=4 * GiB))
    assert types(out) == ["PodScheduled", "Unschedulable"]


def test_node_selector_and_message_counts() -> None:
    w = World()
    three_nodes(w, node3={"disk": "ssd"})
    assert placed(w, "v", spec={"nodeSelector": {"disk": "ssd"}}) == "node3"
    assert placed(w, "h", spec={"nodeSelector": {"kubernetes.io/hostname": "node2"}}) == "node2"
    w.given(w.node_joined("tiny", memory=GiB // 2, labels={"disk": "ssd"}))
    msg = unschedulable(w, "y", memory="20Gi", spec={"nodeSelector": {"disk": "ssd"}})
    assert msg == (
        "0/4 nodes are available: 2 Insufficient memory, "
        "2 node(s) didn't match Pod's node affinity/selector."
    )


def affinity(*exprs: dict[str, Any]) -> dict[str, Any]:
    terms = [{"matchExpressions": list(exprs)}]
    return {
        "affinity": {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms}
            }
        }
    }


@pytest.mark.parametrize(
    ("expr", "expected"),
    [
        ({"key": "zone", "operator": "In", "values": ["b", "c"]}, {"node2", "node3"}),
        ({"key": "zone", "operator": "NotIn", "values": ["a"]}, {"node2", "node3"}),
        ({"key": "gpu", "operator": "Exists"}, {"node3"}),
        ({"key": "gpu", "operator": "DoesNotExist"}, {"node1", "node2"}),
        ({"key": "cores", "operator": "Gt", "values": ["16"]}, {"node2"}),
        ({"key": "cores", "operator": "Lt", "values": ["16"]}, {"node1"}),
    ],
)
def test_node_affinity_operators(expr: dict[str, Any], expected: set[str]) -> None:
    w = World()
    three_nodes(
        w,
        node1={"zone": "a", "cores": "8"},
        node2={"zone": "b", "cores": "32"},
        node3={"zone": "c", "gpu": "yes", "cores": "16"},
    )
    ok = {
        n
        for n in w.state.cluster.nodes
        if scheduler.matches_node_selection(affinity(expr), w.state.cluster.nodes[n])
    }
    assert ok == expected


def test_node_affinity_terms_are_ored() -> None:
    w = World()
    three_nodes(w, node1={"zone": "a"}, node3={"zone": "c"})
    terms = [
        {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["c"]}]},
        {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["node1"]}]},
    ]
    spec = {
        "affinity": {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms}
            }
        }
    }
    assert placed(w, "a", spec=spec) == "node1"
    assert placed(w, "b", spec=spec) == "node3"


def anti(app: str, kind: str = "podAntiAffinity") -> dict[str, Any]:
    term = {"labelSelector": {"matchLabels": {"app": app}}, "topologyKey": "kubernetes.io/hostname"}
    return {"affinity": {kind: {"requiredDuringSchedulingIgnoredDuringExecution": [term]}}}


def test_pod_anti_affinity_spreads_and_then_blocks() -> None:
    w = World()
    w.given(w.node_joined("node1"), w.node_joined("node2"))
    nodes = {placed(w, f"db{i}", labels={"app": "db"}, spec=anti("db")) for i in range(2)}
    assert nodes == {"node1", "node2"}
    msg = unschedulable(w, "db2", labels={"app": "db"}, spec=anti("db"))
    assert msg == "0/2 nodes are available: 2 node(s) didn't match pod anti-affinity rules."


def test_existing_pods_anti_affinity_is_respected() -> None:
    w = World()
    w.given(w.node_joined("node1"), w.node_joined("node2"))
    assert placed(w, "loner", labels={"app": "loner"}, spec=anti("web")) == "node1"
    # node1 and node2 would tie on load; the loner's anti-affinity keeps web off node1
    assert placed(w, "web", labels={"app": "web"}) == "node2"
    assert placed(w, "other", labels={"app": "other"}) == "node1"


def test_pod_affinity_follows_its_peer() -> None:
    w = World()
    three_nodes(w)
    assert placed(w, "first", labels={"app": "cache"}) == "node1"
    placed(w, "filler", labels={"app": "x"})  # node2 now busier than node3
    assert placed(w, "buddy", labels={"app": "web"}, spec=anti("cache", "podAffinity")) == "node1"
    # the first of a group may go anywhere when it matches its own term
    assert placed(w, "self", labels={"app": "grp"}, spec=anti("grp", "podAffinity")) == "node3"


def test_taints_and_tolerations() -> None:
    w = World()
    w.given(
        w.node_joined("node1", taints=(Taint(key="dedicated", value="gpu", effect="NoSchedule"),)),
        w.node_joined("node2", taints=(Taint(key="maint", effect="NoExecute"),)),
        w.node_joined("node3", taints=(Taint(key="soft", effect="PreferNoSchedule"),)),
    )
    assert placed(w, "plain") == "node3"  # PreferNoSchedule does not filter
    gpu = {
        "tolerations": [
            {"key": "dedicated", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"}
        ],
        "nodeSelector": {"kubernetes.io/hostname": "node1"},
    }
    assert placed(w, "gpu", spec=gpu) == "node1"
    wrong = {
        "tolerations": [{"key": "dedicated", "value": "cpu"}],
        "nodeSelector": {"kubernetes.io/hostname": "node1"},
    }
    msg = unschedulable(w, "wrong", spec=wrong)
    # taints are checked before selectors, reasons are sorted
    assert msg == (
        "0/3 nodes are available: 1 node(s) didn't match Pod's node affinity/selector, "
        "1 node(s) had untolerated taint {dedicated: gpu}, "
        "1 node(s) had untolerated taint {maint: }."
    )
    everything = {
        "tolerations": [{"operator": "Exists"}],
        "nodeSelector": {"kubernetes.io/hostname": "node2"},
    }
    assert placed(w, "all", spec=everything) == "node2"


def test_cordoned_nodes_are_skipped_until_uncordoned() -> None:
    w = World()
    w.given(w.node_joined("node1"), NodeCordoned(meta=w.m(Kind.NODE, "node1")))
    msg = unschedulable(w, "v")
    assert msg == "0/1 nodes are available: 1 node(s) were unschedulable."
    out = w.run(NodeUncordoned(meta=w.m(Kind.NODE, "node1")))
    assert types(out) == ["PodScheduled"]


def test_no_nodes() -> None:
    w = World()
    msg = unschedulable(w, "v")
    assert msg == "0/0 nodes are available: no nodes available to schedule pods."
    assert w.vmi("v").unschedulable == msg  # type: ignore[union-attr]
    assert of(w.tick(), Unschedulable) == []


def test_place_excludes_nodes_and_adds_selectors_for_migration_targets() -> None:
    w = World()
    three_nodes(w, node3={"rack": "r2"})
    m = vmi_manifest("mig")
    c = w.state.cluster
    assert scheduler.place(m, c, exclude={"node1"}) == scheduler.Placement("node2")
    assert scheduler.place(m, c, extra_selector={"rack": "r2"}) == scheduler.Placement("node3")
    none = scheduler.place(m, c, exclude={"node3"}, extra_selector={"rack": "r2"})
    assert isinstance(none, scheduler.NoFit)
