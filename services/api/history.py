"""An object's history from the log, over HTTPS: `debug.virtstream.io/v1alpha1`.

The CLI's debugging commands (`virtstream replay`, `why`) read NATS directly; the web
console reads the same through the api, under its authentication and RBAC:

    GET /apis/debug.virtstream.io/v1alpha1/namespaces/{ns}/{plural}/{name}/history
    GET /apis/debug.virtstream.io/v1alpha1/namespaces/{ns}/{plural}/{name}/why[?seq=N]
    (cluster-scoped kinds: /apis/debug.virtstream.io/v1alpha1/{plural}/{name}/...)

`history` is `virtstream replay`: each event of the object, and each related event that
changed it, with the change it made, the object as it was after it (only where it
changed: a reader carries the last one forward) and the links between the events shown
(`causedBy`, `caused`). `why` is `virtstream why`: the causal chain of the object's
current state (or of the event `seq`) with each hop's latency and the slowest marked.
Both are the read side's functions (`readside/timetravel.py`, `readside/causality.py`);
nothing here folds or indexes on its own. RBAC reads them as the subresources `history`
and `why` of the kind's plural in this group; KubeVirt's view role (and so edit and admin)
may get them for every KubeVirt kind (`services/api/rbac.py`)."""

from __future__ import annotations

from typing import Any

import msgspec
from litestar import Request, Response, get

from events.meta import CLUSTER_SCOPE, Aggregate
from kinds.spec import KindSpec
from projections.replay import Step, summarize
from readside import causality, timetravel
from services.api.errors import bad_request, not_found, unknown_resource

JSON = dict[str, Any]
GROUP = "debug.virtstream.io"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"
SUBRESOURCES = ("history", "why")
PREFIX = f"/apis/{API_VERSION}"
_json = msgspec.json.Encoder()


def _spec(request: Request[Any, Any, Any], namespaced: bool) -> KindSpec:
    spec = request.app.state["api"].kinds.get(request.path_params["plural"])
    if spec is None or spec.plural != request.path_params["plural"]:
        raise unknown_resource()
    if spec.namespaced != namespaced:
        raise unknown_resource()
    return spec


def _aggregate(request: Request[Any, Any, Any], spec: KindSpec) -> Aggregate:
    ns = request.path_params.get("ns", CLUSTER_SCOPE)
    return Aggregate(kind=spec.event_kind, namespace=ns, name=request.path_params["name"])


def step_json(step: Step, index: dict[str, int], caused: dict[int, list[int]]) -> JSON:
    """One step as the console reads it; times are epoch seconds."""
    s = step.stored
    m = s.event.meta
    line = summarize(s)
    out: JSON = {
        "seq": s.seq,
        "time": s.time,
        "occurredAt": m.occurred_at,
        "type": line.type,
        "aggregate": line.aggregate,
        "actor": line.actor,
        "fields": line.fields,
        "own": step.own,
        "exists": step.exists,
        "eventId": m.event_id,
        "correlationId": m.correlation_id,
        "causationId": m.causation_id,
        "causedBy": index.get(m.causation_id) if m.causation_id else None,
        "caused": caused.get(s.seq, []),
        "changes": [{"path": c.path, "before": c.before, "after": c.after} for c in step.changes],
    }
    if step.changes:
        out["object"] = step.rendered
    return out


def history_document(target: str, steps: list[Step]) -> JSON:
    """The steps with their causal links among themselves (pure)."""
    index = {st.stored.event.meta.event_id: st.stored.seq for st in steps}
    caused: dict[int, list[int]] = {}
    for st in steps:
        cause = index.get(st.stored.event.meta.causation_id or "")
        if cause is not None:
            caused.setdefault(cause, []).append(st.stored.seq)
    return {
        "kind": "History",
        "apiVersion": API_VERSION,
        "target": target,
        "steps": [step_json(st, index, caused) for st in steps],
    }


def chain_document(chain: causality.Chain) -> JSON:
    body: JSON = msgspec.to_builtins(chain)
    body |= {
        "kind": "Why",
        "apiVersion": API_VERSION,
        "slowest": chain.slowest,
        "total": chain.total,
        "explanation": causality.explain(chain),
    }
    return body


def _respond(body: JSON) -> Response[bytes]:
    return Response(_json.encode(body), media_type="application/json")


async def _history(request: Request[Any, Any, Any], namespaced: bool) -> Response[bytes]:
    spec = _spec(request, namespaced)
    agg = _aggregate(request, spec)
    store = request.app.state["api"].runner.store
    steps = await timetravel.aggregate_replay(store, agg)
    if not steps:
        raise not_found(spec.resource, agg.name)
    return _respond(history_document(agg.key, steps))


async def _why(request: Request[Any, Any, Any], namespaced: bool) -> Response[bytes]:
    spec = _spec(request, namespaced)
    agg = _aggregate(request, spec)
    text = request.query_params.get("seq") or ""
    if text and not text.isdigit():
        raise bad_request(f"invalid seq: {text!r}")
    store = request.app.state["api"].runner.store
    chain = await causality.why(store, agg, anchor_seq=int(text) if text else None)
    if not chain.hops:
        raise not_found(spec.resource, agg.name)
    return _respond(chain_document(chain))


NAMESPACED = f"{PREFIX}/namespaces/{{ns:str}}/{{plural:str}}/{{name:str}}"
CLUSTER = f"{PREFIX}/{{plural:str}}/{{name:str}}"


@get(f"{NAMESPACED}/history", include_in_schema=False)
async def namespaced_history(request: Request[Any, Any, Any]) -> Response[bytes]:
    return await _history(request, True)


@get(f"{CLUSTER}/history", include_in_schema=False)
async def cluster_history(request: Request[Any, Any, Any]) -> Response[bytes]:
    return await _history(request, False)


@get(f"{NAMESPACED}/why", include_in_schema=False)
async def namespaced_why(request: Request[Any, Any, Any]) -> Response[bytes]:
    return await _why(request, True)


@get(f"{CLUSTER}/why", include_in_schema=False)
async def cluster_why(request: Request[Any, Any, Any]) -> Response[bytes]:
    return await _why(request, False)


ROUTES = [namespaced_history, cluster_history, namespaced_why, cluster_why]
