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


def last_seen(state: ControllerState, node: NodeView) -> float:
    return max(state.heartbeats.get(node.name, 0.0), node.last_heartbeat, state.heartbeats_since)


def check(state: ControllerState, node: NodeView, ctx: Context, timeout: float) -> list[Event]:
    """NodeUnresponsive / NodeResponsive for one node, from the clock and heartbeats."""
    agg = emit.node_aggregate(node)
    if not node.unresponsive:
        seen = last_seen(state, node)
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
    out: list[Event] = []
    for vmi in sorted(cluster.vmis_on(node.name), key=lambda v: (v.namespace, v.name)):
        if not vmi.final:
            out.append(
                VMIFailed(
                    meta=emit.meta(
                        ctx, emit.vmi_aggregate(vmi), f"node-failed/{vmi.uid}", node=vmi.node
                    ),
                    reason="NodeUnresponsive",
                    message=f"virt-handler on node {node.name} is not responsive",
                )
            )
    return out
