"""Node liveness from virt-handler heartbeats (seen in the KV bucket, not in the log).

A node whose latest sign of life (heartbeat, join, or the moment the controller started
watching) is older than `node_timeout` becomes NodeUnresponsive, and every non-final VMI
on it fails with reason NodeUnresponsive; the run strategies take it from there. A fresh
heartbeat brings it back (NodeResponsive). A re-join makes it responsive by itself (the
projection's NodeJoined starts a fresh view).

Heartbeats are observations, not events: the service's watch of the bucket puts them into
the shell's inbox, and `observe` folds them like any observation."""

from __future__ import annotations

from typing import assert_never

import msgspec

from events.catalog import Event, NodeResponsive, NodeUnresponsive, VMIFailed
from events.envelope import Context
from projections.cluster import Cluster
from projections.views import NodeView
from services.controller import emit
from services.controller.state import ControllerState
from services.runtime import timeouts

DEFAULT_NODE_TIMEOUT = timeouts.NODE_TIMEOUT  # the handlers fence at half of it


class HeartbeatSeen(msgspec.Struct, frozen=True):
    """A handler's heartbeat, as the watch read it from the bucket."""

    node: str
    at: float  # epoch seconds


class WatchStarted(msgspec.Struct, frozen=True):
    """The heartbeat watch began at `at`: heartbeats are trusted from then on (before it
    has read the latest ones, no node times out)."""

    at: float


Observation = HeartbeatSeen | WatchStarted


def observe(state: ControllerState, obs: Observation) -> ControllerState:
    match obs:
        case HeartbeatSeen(node=node, at=at):
            if at > state.heartbeats.get(node, 0.0):
                state.heartbeats[node] = at
        case WatchStarted(at=at):
            state.heartbeats_since = at
        case _:
            assert_never(obs)
    return state


def last_seen(state: ControllerState, node: NodeView, runs: bool = True) -> float:
    """The node's latest sign of life; for a node whose handler may be starting again
    (`runs`), at least the moment this controller began watching heartbeats."""
    beat = max(state.heartbeats.get(node.name, 0.0), node.last_heartbeat)
    return max(beat, state.heartbeats_since) if runs else beat


def check(
    state: ControllerState,
    node: NodeView,
    ctx: Context,
    timeout: float,
    cluster_nodes: frozenset[str] | None = None,
) -> list[Event]:
    """NodeUnresponsive / NodeResponsive for one node, from the clock and heartbeats.
    `cluster_nodes`: the nodes the cluster runs (`virtstream up` knows them); one not
    among them gets no grace from the controller's start: its handler is not coming
    back, so it is unresponsive once the timeout has passed since its last heartbeat."""
    agg = emit.node_aggregate(node)
    if not node.unresponsive:
        runs = cluster_nodes is None or node.name in cluster_nodes
        if not runs and state.heartbeats_since == 0.0:
            return []  # the heartbeat watch has not started: its last beat is not known yet
        seen = last_seen(state, node, runs)
        if ctx.now - seen > timeout:
            k = f"unresponsive/{node.name}/{node.version}"
            return [NodeUnresponsive(meta=emit.meta(ctx, agg, k), last_heartbeat=seen)]
        return []
    beat = state.heartbeats.get(node.name, 0.0)
    if beat > node.last_heartbeat and ctx.now - beat <= timeout:
        k = f"responsive/{node.name}/{node.version}"
        return [NodeResponsive(meta=emit.meta(ctx, agg, k), last_heartbeat=beat)]
    return []


def fail_stranded_vmis(cluster: Cluster, node: NodeView, ctx: Context) -> list[Event]:
    """Non-final VMIs on an unresponsive node can no longer be run or reported on."""
    if not node.unresponsive:
        return []
    message = f"virt-handler on node {node.name} is not responsive"
    return _fail_vmis_on(cluster, node.name, "NodeUnresponsive", message, ctx)


def fail_vmis_of_deleted(cluster: Cluster, name: str, ctx: Context) -> list[Event]:
    """Non-final VMIs on a node that no longer exists (deleted) fail, as Kubernetes'
    pod garbage collector removes the pods bound to a node that is gone."""
    if name in cluster.nodes:
        return []
    return _fail_vmis_on(cluster, name, "NodeDeleted", f"node {name} was deleted", ctx)


def _fail_vmis_on(
    cluster: Cluster, node: str, reason: str, message: str, ctx: Context
) -> list[Event]:
    """A VMIFailed for each non-final VMI on `node` (one id per VMI, whatever the reason:
    a VMI fails once)."""
    return [
        VMIFailed(
            meta=emit.meta(ctx, emit.vmi_aggregate(vmi), f"node-failed/{vmi.uid}", node=vmi.node),
            reason=reason,
            message=message,
        )
        for vmi in sorted(cluster.vmis_on(node), key=lambda v: (v.namespace, v.name))
        if not vmi.final
    ]
