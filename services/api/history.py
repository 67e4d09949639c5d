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
Both are the read side's functions (`projections/replay.py`'s replay steps,
`readside/causality.py`); the api keeps the histories it served lately and brings one up
to date by reading only the events appended since (`Histories`). RBAC reads them as the
subresources `history` and `why` of the kind's plural in this group; KubeVirt's view role
(and so edit and admin) may get them for every KubeVirt kind (`services/api/rbac.py`)."""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from typing import Any

import msgspec
from litestar import Request, Response, get

from core.errors import bad_request, not_found, unknown_resource
from events.envelope import Stored
from events.meta import CLUSTER_SCOPE, Aggregate
from eventstore.port import EventLog
from kinds.spec import KindSpec
from projections.replay import Position, Step, related_filters, replay_steps, summarize
from readside import causality

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


def step_json(step: Step) -> JSON:
    """One step as the console reads it; times are epoch seconds. The links among the
    steps (`causedBy`, `caused`) are the `History`'s to fill."""
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
        "causedBy": None,
        "caused": [],
        "changes": [{"path": c.path, "before": c.before, "after": c.after} for c in step.changes],
    }
    if m.causation_seq:
        out["causationSeq"] = m.causation_seq
    if step.changes:
        out["object"] = step.rendered
    return out


class History:
    """An object's steps as the console reads them, with the causal links among them,
    extended as the log grows (pure: the caller reads the events)."""

    def __init__(self, agg: Aggregate) -> None:
        self.agg = agg
        self.position = Position()
        self.last_seq = 0
        self.steps: list[JSON] = []
        self._by_event: dict[str, JSON] = {}

    def extend(self, events: list[Stored]) -> History:
        for step in replay_steps(events, self.agg, self.position):
            if step.born:  # the name's new object: an earlier one's history is not its own
                self.steps, self._by_event = [], {}
            doc = step_json(step)
            cause = self._by_event.get(doc["causationId"] or "")
            if cause is not None:
                doc["causedBy"] = cause["seq"]
                cause["caused"].append(doc["seq"])
            self._by_event[doc["eventId"]] = doc
            self.steps.append(doc)
        if events:
            self.last_seq = events[-1].seq
        return self

    def document(self) -> JSON:
        return {
            "kind": "History",
            "apiVersion": API_VERSION,
            "target": self.agg.key,
            "steps": self.steps,
        }


def history_document(agg: Aggregate, events: list[Stored]) -> JSON:
    return History(agg).extend(events).document()


class Histories:
    """The histories served lately (`SIZE`, least recently used out), each brought up to
    the stream's end per request by reading only what was appended since: a second look
    at a long history costs its new events, not all of them."""

    SIZE = 32

    def __init__(self) -> None:
        self._cache: OrderedDict[str, History] = OrderedDict()
        self._locks: dict[str, asyncio.Lock] = {}

    async def get(self, store: EventLog, agg: Aggregate) -> History:
        key = agg.key
        lock = self._locks.setdefault(key, asyncio.Lock())
        async with lock:
            last = await store.stream_last_seq()
            found = self._cache.get(key)
            if found is None or found.last_seq > last:  # new, or the stream was recreated
                found = History(agg)
            if last > found.last_seq:
                tail = [
                    s
                    async for s in store.replay(
                        related_filters(agg),
                        start_seq=found.last_seq + 1,
                        until_seq=last,
                        raw=True,
                    )
                ]
                # the replay is CPU (~0.3 ms an event): in a thread, so the api's loop goes on
                # serving watches and writes meanwhile
                await asyncio.to_thread(found.extend, tail)
                found.last_seq = last
            self._cache[key] = found
            self._cache.move_to_end(key)
            while len(self._cache) > self.SIZE:
                gone, _ = self._cache.popitem(last=False)
                self._locks.pop(gone, None)
            return found


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
    state = request.app.state
    if "histories" not in state:
        state["histories"] = Histories()
    found = await state["histories"].get(state["api"].runner.store, agg)
    if not found.steps:
        raise not_found(spec.resource, agg.name)
    return _respond(found.document())


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
