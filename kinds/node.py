"""Node (core group, cluster-scoped): its registry entry, the writes a user makes of a node
(labels, annotations, taints and `spec.unschedulable`, by PUT, PATCH or apply: `kubectl
label|annotate|taint|cordon|uncordon node`), its deletion, and the cordon, uncordon and
drain operations (virtstream's subresources). The rest of a node is its agent's: a write
of it is ignored, as the API server's node strategy keeps the status of a PUT."""

from __future__ import annotations

from typing import Any

from core import names
from core.context import Append, Outcome, RequestContext
from core.errors import ApiError, bad_request, not_found
from core.intents import view
from core.kind import Answer, CallArgs, Subresource
from events.catalog import (
    Event,
    NodeCordoned,
    NodeDeleted,
    NodeDrainRequested,
    NodeMetadataChanged,
    NodeTaintsChanged,
    NodeUncordoned,
    Taint,
)
from events.meta import Kind
from events.objects import Node, StatusCause
from events.quantity import parse_quantity
from kinds import columns as col
from kinds.spec import Column, KindSpec, Scope
from projections.cluster import Cluster
from projections.evolve import evolve_node
from projections.render import NODE_SERVER_ANNOTATIONS, node_labels, render_node
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


TAINT_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")


def _strings(value: Any, field: str) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
        raise bad_request(
            f"the body of the request was in an unknown format: {field} must be a map of strings"
        )
    return value


def _taints(spec: JSON) -> tuple[tuple[Taint, ...], list[StatusCause]]:
    """`spec.taints` as written, and the API server's causes against them
    (`validateNodeTaints`: key, value, effect, unique by key and effect)."""
    raw = spec.get("taints") or []
    if not isinstance(raw, list) or not all(isinstance(t, dict) for t in raw):
        raise bad_request("the body of the request was in an unknown format: spec.taints")
    out: list[Taint] = []
    causes: list[StatusCause] = []
    seen: set[tuple[str, str]] = set()
    for i, t in enumerate(raw):
        at = f"spec.taints[{i}]"
        key, value, effect = (str(t.get(f) or "") for f in ("key", "value", "effect"))
        causes += [names.invalid(f"{at}.key", key, e) for e in names.qualified_name_errors(key)]
        causes += [names.invalid(f"{at}.value", value, e) for e in names.label_value_errors(value)]
        if not effect:
            causes.append(
                StatusCause(type=names.REQUIRED, message="Required value", field=f"{at}.effect")
            )
        elif effect not in TAINT_EFFECTS:
            supported = ", ".join(f'"{e}"' for e in TAINT_EFFECTS)
            causes.append(
                StatusCause(
                    type="FieldValueNotSupported",
                    message=f"Unsupported value: {names.go_quote(effect)}: "
                    f"supported values: {supported}",
                    field=f"{at}.effect",
                )
            )
        if (key, effect) in seen:
            causes.append(
                StatusCause(
                    type="FieldValueDuplicate",
                    message=f"Duplicate value: {names.go_quote(key + ':' + effect)}: "
                    "taints must be unique by key and effect pair",
                    field=at,
                )
            )
        seen.add((key, effect))
        out.append(Taint(key=key, effect=effect, value=value))
    return tuple(out), causes


def write(cluster: Cluster, _: str, name: str, written: JSON, ctx: RequestContext) -> Outcome:
    """A node as a user wrote it (PUT, or what a PATCH or an apply made of it as served):
    its labels, annotations, taints and `spec.unschedulable` recorded, each as its event
    (nothing when nothing changed: 200, as the API server's no-op update)."""
    node: NodeView = view(cluster, SPEC, "", name)
    meta = written.get("metadata") or {}
    spec = written.get("spec") or {}
    if not isinstance(meta, dict) or not isinstance(spec, dict):
        raise bad_request("the body of the request was in an unknown format")
    labels = _strings(meta.get("labels"), "metadata.labels")
    annotations = {
        k: v
        for k, v in _strings(meta.get("annotations"), "metadata.annotations").items()
        if k not in NODE_SERVER_ANNOTATIONS
    }
    taints, causes = _taints(spec)
    causes = names.validate_labels(labels) + names.validate_annotation_keys(annotations) + causes
    if causes:
        raise ApiError(names.invalid_object(SPEC.kind, SPEC.group, name, causes))
    events: list[Event] = []
    if labels != node_labels(node) or annotations != node.annotations:
        events.append(
            NodeMetadataChanged(
                meta=ctx.meta(Kind.NODE, "", name), labels=labels, annotations=annotations
            )
        )
    if taints != node.taints:
        events.append(NodeTaintsChanged(meta=ctx.meta(Kind.NODE, "", name), taints=taints))
    unschedulable = spec.get("unschedulable") is True
    if unschedulable and not node.cordoned:
        events.append(NodeCordoned(meta=ctx.meta(Kind.NODE, "", name)))
    elif not unschedulable and (node.cordoned or node.draining):
        events.append(NodeUncordoned(meta=ctx.meta(Kind.NODE, "", name)))
    # one write, one decision: the first on the version it was decided against
    appends = tuple(Append(e, node.version if i == 0 else None) for i, e in enumerate(events))
    return Outcome(appends, Kind.NODE, name, 200)


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
    verbs=("get", "list", "watch", "update", "delete"),
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
    replace=write,
)
