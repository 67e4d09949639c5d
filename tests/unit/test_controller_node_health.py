"""Heartbeat timeouts: NodeUnresponsive, failing its VMIs, recovery elsewhere, NodeResponsive."""

from __future__ import annotations

from events.catalog import NodeDeleted, NodeResponsive, NodeUnresponsive, PodScheduled, VMIFailed
from events.meta import Kind
from tests.unit.test_controller_world import World, of, types


def cluster() -> World:
    w = World(node_timeout=60.0)
    w.given(w.node_joined("node1"))
    w.run(w.vm_created("vm1", "Always"))
    w.start_running()
    w.given(w.node_joined("node2"))
    return w


def test_a_joined_node_gets_a_grace_period() -> None:
    w = cluster()
    w.now += 59
    assert w.tick() == []


def test_heartbeats_keep_a_node_responsive() -> None:
    w = cluster()
    for _ in range(5):
        w.now += 30
        for n in ("node1", "node2"):
            w.heartbeat(n, w.now)
        assert w.tick() == []


def test_silent_node_is_unresponsive_and_its_vms_restart_elsewhere() -> None:
    w = cluster()
    joined = w.now
    w.now += 61
    w.heartbeat("node2", w.now)
    out = w.tick()
    assert types(out) == ["NodeUnresponsive"]
    ev = out[0]
    assert isinstance(ev, NodeUnresponsive) and ev.meta.aggregate.name == "node1"
    assert ev.last_heartbeat == joined
    assert ev.message == "virt-handler is not responsive, marking node as unresponsive"
    out = w.settle(out)
    assert types(out) == [
        "NodeUnresponsive",
        "VMIFailed",
        "VMIDeleteRequested",
        "VMIRemoved",
        "VMICreated",
        "PodScheduled",
    ]
    assert of(out, VMIFailed)[0].reason == "NodeUnresponsive"
    assert of(out, PodScheduled)[0].node == "node2"
    assert w.tick() == []


def test_a_node_that_heartbeats_again_is_responsive() -> None:
    w = cluster()
    w.now += 61
    w.heartbeat("node2", w.now)
    w.settle(w.tick())
    w.now += 5
    w.heartbeat("node1", w.now)
    w.heartbeat("node2", w.now)
    out = w.tick()
    assert types(out) == ["NodeResponsive"] and isinstance(out[0], NodeResponsive)
    assert out[0].last_heartbeat == w.now
    w.settle(out)
    assert w.state.cluster.nodes["node1"].schedulable and w.tick() == []


def test_heartbeats_are_trusted_only_once_watched() -> None:
    """A restarted controller does not time out nodes before its heartbeat watch runs."""
    w = cluster()
    w.now += 3600
    w.watch_started(w.now)
    assert w.tick() == []
    w.now += 61
    assert types(w.tick()) == ["NodeUnresponsive", "NodeUnresponsive"]


def test_a_stale_heartbeat_does_not_revive() -> None:
    w = cluster()
    w.heartbeat("node1", w.now + 1)
    w.now += 200
    w.heartbeat("node2", w.now)
    w.settle(w.tick())
    assert w.state.cluster.nodes["node1"].unresponsive
    assert w.tick() == []


def test_a_node_the_cluster_no_longer_runs_gets_no_grace_from_a_restart() -> None:
    """`up --nodes 1` after a run with two: node2's handler is not coming back, so it is
    unresponsive once the timeout has passed since its last heartbeat, while node1 (started
    again) keeps the grace a restarted controller gives."""
    w = cluster()
    w.controller.cluster_nodes = frozenset({"node1"})
    w.heartbeat("node1", w.now)
    w.heartbeat("node2", w.now)
    w.now += 45  # the previous run ended; a new controller starts watching
    w.watch_started(w.now)
    assert w.tick() == []
    w.now += 16  # 61 s after node2's last heartbeat, 16 s after the restart
    (gone,) = w.tick()
    assert isinstance(gone, NodeUnresponsive) and gone.meta.aggregate.name == "node2"
    assert gone.last_heartbeat == w.now - 61


def test_a_deleted_nodes_vmis_fail_and_their_vms_restart_elsewhere() -> None:
    """`delete node node1` while vm1's VMI runs there: the VMI fails (its node is gone, as
    Kubernetes' pod garbage collector removes its pod) and the VM restarts it on node2."""
    w = cluster()
    assert w.vmi() is not None and w.vmi().node == "node1"  # type: ignore[union-attr]
    out = w.run(NodeDeleted(meta=w.m(Kind.NODE, "node1")))
    assert "node1" not in w.state.cluster.nodes
    assert types(out)[:2] == ["VMIFailed", "VMIDeleteRequested"]
    failed = of(out, VMIFailed)[0]
    assert (failed.reason, failed.message) == ("NodeDeleted", "node node1 was deleted")
    assert of(out, PodScheduled)[0].node == "node2"
    assert w.tick() == []


def test_a_tick_fails_what_a_deleted_node_left() -> None:
    """Level-triggered: a controller that missed the reaction finds the VMI on its tick."""
    w = cluster()
    w.given(NodeDeleted(meta=w.m(Kind.NODE, "node1")))
    assert types(w.tick()) == ["VMIFailed"]
