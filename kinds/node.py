"""Node (core group, cluster-scoped; made by its handler's join, never by the api): its
registry entry, delete, and the cordon, uncordon and drain operations (virtstream's
subresources)."""

from __future__ import annotations

from typing import Any

from core.context import Append, Outcome, RequestContext
from core.errors import not_found
from core.intents import view
from core.kind import Answer, CallArgs, Subresource
from events.catalog import Event, NodeCordoned, NodeDeleted, NodeDrainRequested, NodeUncordoned
from events.meta import Kind
from events.objects import Node
from events.quantity import parse_quantity
from kinds import columns as col
from kinds.spec import Column, KindSpec, Scope
from projections.cluster import Cluster
from projections.evolve import evolve_node
from projections.render import render_node
from projections.views import NodeView

JSON = dict[str, Any]


def node_action(cluster: Cluster, name: str, action: str, ctx: RequestContext) -> Outcome:
    """cordon / uncordon / drain. Repeating one is a no-op (200, nothing appended), as
    `kubectl cordon` on a cordoned node; uncordon stops a drain."""
    node: NodeView = view(cluster, SPEC, "", name)
    meta = ctx.meta(Kind.NODE, "", name)
    event: Event
    match action:
        case "cordon":
            if node.cordoned:
                return Outcome((), Kind.NODE, name, 200)
            event = NodeCordoned(meta=meta)
        case "uncordon":
            if not node.cordoned and not node.draining:
                return Outcome((), Kind.NODE, name, 200)
            event = NodeUncordoned(meta=meta)
        case "drain":
            if node.draining:
                return Outcome((), Kind.NODE, name, 200)
            event = NodeDrainRequested(meta=meta)
        case _:
            raise not_found(SPEC.resource, f"{name}/{action}")
    return Outcome((Append(event, node.version),), Kind.NODE, name, 202)


def delete(c: Cluster, _: str, name: str, __: CallArgs, ctx: RequestContext) -> Outcome:
    """`kubectl delete node`: the Node object goes; VMIs still on it fail (the controller:
    their node is gone), and a handler that starts again for it joins anew."""
    node: NodeView = view(c, SPEC, "", name)
    event = NodeDeleted(meta=ctx.meta(Kind.NODE, "", name))
    return Outcome((Append(event, node.version),), Kind.NODE, name, 200)


def _action(action: str) -> Subresource:
    def act(c: Cluster, _: str, name: str, __: CallArgs, ctx: RequestContext) -> Outcome:
        return node_action(c, name, action, ctx)

    return Subresource(action, act, answer=Answer.OBJECT, reads_body=False)


def _status_cell(o: JSON, _now: float) -> str:
    ready = "Ready" if col.ready(o) == "True" else "NotReady"
    return ready + ("" if col.status(o).get("schedulable", True) else ",SchedulingDisabled")


def _used(o: JSON, resource: str) -> str:
    allocated = col.status(o).get("allocated") or {}
    capacity = col.status(o).get("capacity") or {}
    return f"{allocated.get(resource, '0')}/{capacity.get(resource, '0')}"


def _memory(o: JSON, _now: float) -> str:
    """As kubectl prints quantities: `192Mi/3Gi`."""
    allocated = col.status(o).get("allocated") or {}
    capacity = col.status(o).get("capacity") or {}
    used, total = (parse_quantity(q.get("memory", 0) or 0) for q in (allocated, capacity))
    return f"{col.binary_quantity(used)}/{col.binary_quantity(total)}"


SPEC = KindSpec(
    group="",
    version="v1",
    kind="Node",
    plural="nodes",
    singular="node",
    short_names=("no",),
    scope=Scope.CLUSTER,
    verbs=("get", "list", "watch", "delete"),
    event_kind=Kind.NODE,
    object_type=Node,
    subresource_group="subresources.virtstream.io",
    subresources=(_action("cordon"), _action("uncordon"), _action("drain")),
    delete=delete,
    # KubeVirt has no CRD for nodes: virtstream's table, with kubectl's node STATUS
    columns=(
        col.NAME,
        Column("STATUS", _status_cell),
        Column("VMIS", lambda o, _: str((col.status(o).get("allocated") or {}).get("vmis", 0))),
        Column("CPU", lambda o, _: _used(o, "cpu")),
        Column("MEMORY", _memory),
        col.AGE,
    ),
    table=lambda c: c.nodes,
    render=render_node,
    evolve=evolve_node,
)
