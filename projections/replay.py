"""The event log as history: raw event lines, an aggregate's replay with the rendered
object's diff after each event, and the whole cluster as of a stream sequence or a time.

Everything that decides is pure (`summarize`, `diff_objects`, `replay_steps`, `render_object`)
and works on `Stored` lists; the async helpers only choose which events to read.

Times: "at TIME" means the JetStream timestamp (the server's clock when the event was
stored), because it grows with the sequence and the server can seek to it
(DeliverPolicy.BY_START_TIME). `occurred_at` (the emitting service's clock) is what the
causal latencies use."""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Iterable, Iterator
from typing import Any

import msgspec

from events import subjects
from events.catalog import Event
from events.codec import event_type
from events.envelope import Stored
from events.meta import CLUSTER_SCOPED, Aggregate, Kind, KindToken
from projections.cluster import Cluster, view_key
from projections.render import render_view
from projections.views import MigrationView

JSON = dict[str, Any]

# Fields a rendered object changes on every event or with the clock: not news in a diff.
NOISE = ("metadata.resourceVersion", "status.heartbeatAgeSeconds")
# Bookkeeping of who set which field (server-side apply): each write rewrites its entry's
# time and field set, so it would outnumber the change itself; `kubectl get` hides it too.
QUIET_METADATA = ("managedFields",)


class RefError(ValueError):
    """A KIND/NS/NAME, time or sequence the user wrote that does not parse."""


class Point(msgspec.Struct, frozen=True):
    """A place in the log: a stream sequence or a (server) time, epoch seconds."""

    seq: int | None = None
    time: float | None = None


_DURATION = re.compile(r"^(\d+(?:\.\d+)?)(ms|s|m|h|d)$")
_UNIT = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


def parse_point(text: str, now: float) -> Point:
    """`123` (a sequence), `5m`/`90s`/`2h` (that long ago), `@1700000000.5` (epoch) or an
    ISO 8601 / RFC 3339 time (`2026-11-21T10:00:00Z`; naive times are UTC). `now` is the
    caller's clock, for durations."""
    text = text.strip()
    if text.isdigit():
        return Point(seq=int(text))
    if m := _DURATION.match(text):
        return Point(time=now - float(m.group(1)) * _UNIT[m.group(2)])
    if text.startswith("@"):
        try:
            return Point(time=float(text[1:]))
        except ValueError:
            pass
    try:
        when = dt.datetime.fromisoformat(text)
    except ValueError:
        raise RefError(
            f"{text!r}: expected a sequence number, a duration ago (5m), @EPOCH or an ISO time"
        ) from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=dt.UTC)
    return Point(time=when.timestamp())


def iso(ts: float) -> str:
    """Millisecond RFC 3339, UTC: the precision a hop latency needs."""
    return dt.datetime.fromtimestamp(ts, dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


# ---------------------------------------------------------- event filters
def event_filters(agg: Aggregate | None = None, etype: str | None = None) -> list[str]:
    """Server-side filters: the event type is a subject token, so it filters there too."""
    if agg is None:
        return [f"{subjects.PREFIX}.*.*.*.{etype}.*"] if etype else [subjects.ALL]
    scope = subjects.aggregate_filter(agg.kind, agg.namespace, agg.name)
    return [scope[:-1] + f"{etype}.*"] if etype else [scope]


def related_filters(agg: Aggregate) -> list[str]:
    """What an aggregate's rendered object depends on: a VM on its VMI, a VMI on its
    migrations (named freely, so all of the namespace's), a migration on its VMI; a node on
    every VMI placed there and migrations targeting it, i.e. on everything. A migration or a
    policy renders from its own events only."""
    ns, name = agg.namespace, agg.name
    match agg.kind:
        case Kind.VM | Kind.VMI:
            return [
                subjects.aggregate_filter(Kind.VM, ns, name),
                subjects.aggregate_filter(Kind.VMI, ns, name),
                f"{subjects.PREFIX}.{Kind.MIGRATION}.{subjects.token(ns)}.>",
            ]
        case Kind.MIGRATION | Kind.POLICY:
            return [subjects.aggregate_filter(agg.kind, ns, name)]
    return [subjects.ALL]


# ------------------------------------------------------------- event lines
_SKIP_FIELDS = ("meta", "manifest", "type")


def key_fields(event: Event) -> dict[str, Any]:
    """The event's own fields that fit a line (not the metadata, not whole manifests)."""
    out: dict[str, Any] = {}
    for k, v in msgspec.to_builtins(event).items():
        if k in _SKIP_FIELDS or v in ("", None, {}, []):
            continue
        out[k] = v
    return out


class EventLine(msgspec.Struct, frozen=True):
    seq: int
    time: float
    occurred_at: float
    aggregate: str
    type: str
    actor: str
    fields: str


def actor_of(event: Event) -> str:
    a = event.meta.actor
    who = f"{a.service}@{a.node}" if a.node else a.service
    return f"{who} ({a.user})" if a.user else who


def _short(v: Any) -> str:
    text = msgspec.json.encode(v).decode() if isinstance(v, (dict, list)) else str(v)
    return text if len(text) <= 60 else text[:57] + "..."


def summarize(s: Stored) -> EventLine:
    ev = s.event
    agg = ev.meta.aggregate
    where = agg.name if agg.kind in CLUSTER_SCOPED else f"{agg.namespace}/{agg.name}"
    fields = " ".join(f"{k}={_short(v)}" for k, v in key_fields(ev).items())
    if ev.meta.node:
        fields = f"→{ev.meta.node} {fields}".rstrip()
    return EventLine(
        seq=s.seq,
        time=s.time,
        occurred_at=ev.meta.occurred_at,
        aggregate=f"{agg.kind}/{where}",
        type=event_type(ev),
        actor=actor_of(ev),
        fields=fields,
    )


def event_json(s: Stored) -> JSON:
    """One `-o json` line: the stored position, the metadata flattened, and the data."""
    ev = s.event
    m = ev.meta
    data = msgspec.to_builtins(ev)
    data.pop("meta", None)
    data.pop("type", None)
    return {
        "seq": s.seq,
        "time": iso(s.time),
        "subject": s.subject,
        "type": event_type(ev),
        "eventId": m.event_id,
        "correlationId": m.correlation_id,
        "causationId": m.causation_id,
        **({"causationSeq": m.causation_seq} if m.causation_seq else {}),
        "occurredAt": iso(m.occurred_at),
        "aggregate": msgspec.to_builtins(m.aggregate),
        "actor": msgspec.to_builtins(m.actor),
        "node": m.node,
        "data": data,
    }


# ------------------------------------------------------------ rendering
def gone(view: object) -> bool:
    """A deleted migration that has finished is gone for readers (Kubernetes deletes it)."""
    return isinstance(view, MigrationView) and view.gone


def render_object(cluster: Cluster, kind: KindToken, k: str, now: float) -> JSON | None:
    """The object as the api would serve it from this cluster (None when it does not exist)."""
    view = cluster.table(kind).get(k)
    if view is None or gone(view):
        return None
    return render_view(cluster, kind, view, now)


# ------------------------------------------------------------------- diffs
class FieldChange(msgspec.Struct, frozen=True):
    path: str
    before: Any = None  # None: the field did not exist
    after: Any = None

    def __str__(self) -> str:
        if self.before is None:
            return f"+ {self.path}: {_short(self.after)}"
        if self.after is None:
            return f"- {self.path}: {_short(self.before)}"
        return f"  {self.path}: {_short(self.before)} → {_short(self.after)}"


def _list_key(item: Any, i: int) -> str:
    # conditions are keyed by type, like Kubernetes' strategic merge keys
    if isinstance(item, dict) and isinstance(item.get("type"), str):
        return f"[type={item['type']}]"
    return f"[{i}]"


def _flatten(obj: Any, prefix: str, out: dict[str, Any]) -> None:
    if isinstance(obj, dict) and obj:
        for k, v in obj.items():
            _flatten(v, f"{prefix}.{k}" if prefix else str(k), out)
    elif isinstance(obj, list) and obj and all(isinstance(x, (dict, list)) for x in obj):
        for i, v in enumerate(obj):
            _flatten(v, prefix + _list_key(v, i), out)
    elif prefix:  # an empty root (no object) has no fields
        out[prefix] = obj


_ABSENT = object()


def _changed_leaves(other: Any, obj: Any, prefix: str, out: dict[str, Any]) -> None:
    """`obj`'s leaves as `_flatten` gives them, but only under the mappings that differ
    from `other`'s at the same path: an equal subtree (compared in C) has no change to
    find, and a history diffs each event's rendering against the one before it."""
    if isinstance(obj, dict) and obj and isinstance(other, dict) and other:
        for k, v in obj.items():
            if k in other and other[k] == v:
                continue
            _changed_leaves(other.get(k, _ABSENT), v, f"{prefix}.{k}" if prefix else str(k), out)
    else:
        _flatten(obj, prefix, out)


def _quiet(obj: JSON | None) -> JSON | None:
    """`obj` without the metadata a diff leaves out (a shallow copy, only when it has it)."""
    md = obj.get("metadata") if obj else None
    if not isinstance(md, dict) or not any(k in md for k in QUIET_METADATA):
        return obj
    assert obj is not None
    return {**obj, "metadata": {k: v for k, v in md.items() if k not in QUIET_METADATA}}


def diff_objects(
    before: JSON | None, after: JSON | None, ignore: Iterable[str] = NOISE
) -> list[FieldChange]:
    """Leaf-level changes between two renderings of an object, in `after`'s field order
    (its managed fields left out)."""
    a: dict[str, Any] = {}
    b: dict[str, Any] = {}
    before, after = _quiet(before), _quiet(after)
    _changed_leaves(after or {}, before or {}, "", a)
    _changed_leaves(before or {}, after or {}, "", b)
    skip = set(ignore)
    changes = [FieldChange(p, a.get(p), v) for p, v in b.items() if p not in skip and a.get(p) != v]
    changes += [FieldChange(p, v, None) for p, v in a.items() if p not in skip and p not in b]
    return changes


OBJECT = "(object)"


def object_changes(before: JSON | None, after: JSON | None) -> list[FieldChange]:
    """A replay's diff: a created object shows its status (the spec is what the user
    wrote), a deleted one a single line."""
    if before is None and after is not None:
        status = {"status": after.get("status")} if after.get("status") else None
        return [FieldChange(OBJECT, None, "created"), *diff_objects(None, status)]
    if after is None and before is not None:
        return [FieldChange(OBJECT, "deleted", None)]
    return diff_objects(before, after)


# ------------------------------------------------------------------ replay
class Step(msgspec.Struct, frozen=True):
    """One event and what it did to the object (empty `changes`: nothing visible)."""

    stored: Stored
    own: bool  # the event belongs to the object's aggregate (else a related one)
    changes: list[FieldChange]
    exists: bool  # the object exists after the event
    rendered: JSON | None = None  # the object after the event, as the api served it then
    born: bool = False  # the object came to exist with it: an earlier one of the name is gone


def current_life(steps: list[Step]) -> list[Step]:
    """The steps of the object that has the name now (or had it last): a name reused after
    its object was gone names a new object, with its own uid and history."""
    start = max((i for i, st in enumerate(steps) if st.born), default=0)
    return steps[start:]


class Position:
    """Where a replay stands: the fold so far and the object as last rendered. Handed to
    `replay_steps` again with the events that followed, the replay goes on from there."""

    def __init__(self) -> None:
        self.cluster = Cluster()
        self.before: JSON | None = None


def replay_steps(
    events: Iterable[Stored], agg: Aggregate, at: Position | None = None
) -> Iterator[Step]:
    """Fold `events` (the aggregate's and its related ones', in stream order) and yield a
    step for each event of the aggregate and each related event that changed the object.
    Rendered with the event's own clock, so the history does not depend on when it runs.
    `at`: go on from an earlier replay's position (and keep it current)."""
    at = at if at is not None else Position()
    k = view_key(agg)
    for s in events:
        at.cluster.apply(s)
        m = s.event.meta
        own = m.aggregate.kind == agg.kind and view_key(m.aggregate) == k
        after = render_object(at.cluster, agg.kind, k, m.occurred_at)
        changes = object_changes(at.before, after)
        if own or changes:
            born = own and at.before is None and after is not None
            yield Step(
                stored=s, own=own, changes=changes, exists=after is not None, rendered=after,
                born=born,
            )  # fmt: skip
        at.before = after


def fold(events: Iterable[Stored], cluster: Cluster | None = None) -> Cluster:
    cluster = cluster or Cluster()
    for s in events:
        cluster.apply(s)
    return cluster
