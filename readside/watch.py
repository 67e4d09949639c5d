"""Watch plumbing for the read side: Kubernetes label and field selectors, the change records
the runner keeps, and per-watcher queues.

Selectors follow Kubernetes' syntax: labels `a=b`, `a==b`, `a!=b`, `a in (x,y)`,
`a notin (x)`, `a`, `!a`; fields `metadata.name`, `metadata.namespace`, `status.nodeName`,
`status.phase` with `=`, `==`, `!=` (Events: `involvedObject.name` and the others of
`projections.kube_events.FIELDS`)."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable
from enum import StrEnum
from typing import Any

import msgspec

from events.meta import KindToken
from projections import kube_events

JSON = dict[str, Any]


class SelectorError(ValueError):
    """A selector that does not parse (the api answers 400 BadRequest)."""


class EventType(StrEnum):
    ADDED = "ADDED"
    MODIFIED = "MODIFIED"
    DELETED = "DELETED"
    ERROR = "ERROR"


class Change(msgspec.Struct, frozen=True):
    """One object's change at one stream sequence, rendered as it was then."""

    seq: int
    type: EventType
    kind: KindToken
    key: str
    object: JSON


# ------------------------------------------------------------------ selectors
class Requirement(msgspec.Struct, frozen=True):
    key: str
    op: str  # = != in notin exists !exists
    values: tuple[str, ...] = ()

    def matches(self, labels: dict[str, str]) -> bool:
        match self.op:
            case "=":
                return labels.get(self.key) == self.values[0]
            case "!=":
                return labels.get(self.key) != self.values[0]
            case "in":
                return labels.get(self.key) in self.values
            case "notin":
                return labels.get(self.key) not in self.values
            case "exists":
                return self.key in labels
            case "!exists":
                return self.key not in labels
        return False


_SET_EXPR = re.compile(r"^\s*([A-Za-z0-9_./-]+)\s+(in|notin)\s+\(([^)]*)\)\s*$")
_EQ_EXPR = re.compile(r"^\s*([A-Za-z0-9_./-]+)\s*(==|=|!=)\s*([A-Za-z0-9_.-]*)\s*$")
_EXISTS = re.compile(r"^\s*(!?)\s*([A-Za-z0-9_./-]+)\s*$")


def _split_terms(text: str) -> list[str]:
    """Split on commas outside parentheses."""
    terms: list[str] = []
    cur: list[str] = []
    depth = 0
    for ch in text:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == "," and depth == 0:
            terms.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    terms.append("".join(cur))
    return [t for t in terms if t.strip()]


def parse_label_selector(text: str | None) -> tuple[Requirement, ...]:
    reqs: list[Requirement] = []
    for term in _split_terms(text or ""):
        if m := _SET_EXPR.match(term):
            values = tuple(v.strip() for v in m.group(3).split(",") if v.strip())
            reqs.append(Requirement(m.group(1), m.group(2), values))
        elif m := _EQ_EXPR.match(term):
            op = "!=" if m.group(2) == "!=" else "="
            reqs.append(Requirement(m.group(1), op, (m.group(3),)))
        elif m := _EXISTS.match(term):
            reqs.append(Requirement(m.group(2), "!exists" if m.group(1) else "exists"))
        else:
            raise SelectorError(f"unable to parse requirement: {term.strip()!r}")
    return tuple(reqs)


FIELDS = ("metadata.name", "metadata.namespace", "status.nodeName", "status.phase")
# the kinds whose field labels are their own (the API server's per-kind field sets)
KIND_FIELDS: dict[KindToken, tuple[str, ...]] = {kube_events.KIND: kube_events.FIELDS}


def parse_field_selector(
    text: str | None, fields: tuple[str, ...] = FIELDS
) -> tuple[Requirement, ...]:
    reqs: list[Requirement] = []
    for term in _field_terms(text or ""):
        m = _FIELD_EXPR.match(term)
        if not m:
            raise SelectorError(f"invalid selector: '{term.strip()}'; can't understand it")
        if m.group(1) not in fields:
            raise SelectorError(f'field label not supported: "{m.group(1)}"')
        op = "!=" if m.group(2) == "!=" else "="
        reqs.append(Requirement(m.group(1), op, (_unescape(m.group(3).strip()),)))
    return tuple(reqs)


# A field selector's value is any text, `\`, `,` and `=` escaped with a backslash
# (apimachinery's fields.EscapeValue): `involvedObject.apiVersion=kubevirt.io/v1`.
_FIELD_EXPR = re.compile(r"^\s*([A-Za-z0-9_./-]+)\s*(==|=|!=)(.*)$")


def _field_terms(text: str) -> list[str]:
    """Split on the commas no backslash escapes."""
    terms, cur, escaped = [], [], False
    for ch in text:
        if escaped:
            cur.append(ch)
            escaped = False
        elif ch == "\\":
            cur.append(ch)
            escaped = True
        elif ch == ",":
            terms.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    terms.append("".join(cur))
    return [t for t in terms if t.strip()]


def _unescape(value: str) -> str:
    return re.sub(r"\\(.)", r"\1", value)


def field_value(obj: JSON, path: str) -> str:
    cur: Any = obj
    for part in path.split("."):
        if not isinstance(cur, dict):
            return ""
        cur = cur.get(part)
    return "" if cur is None else str(cur)


class Selector(msgspec.Struct, frozen=True):
    """Which objects a list or watch wants: one kind, maybe one namespace, selectors."""

    kind: KindToken
    namespace: str = ""  # "" = all namespaces (and cluster-scoped kinds)
    labels: tuple[Requirement, ...] = ()
    fields: tuple[Requirement, ...] = ()

    @classmethod
    def parse(
        cls,
        kind: KindToken,
        namespace: str = "",
        label_selector: str | None = None,
        field_selector: str | None = None,
        fields: tuple[str, ...] = (),
    ) -> Selector:
        """`fields`: the field labels allowed, when not the kind's (another view of its
        aggregates: pods of the VMIs)."""
        return cls(
            kind,
            namespace,
            parse_label_selector(label_selector),
            parse_field_selector(field_selector, fields or KIND_FIELDS.get(kind, FIELDS)),
        )

    def matches(self, kind: KindToken, obj: JSON) -> bool:
        if kind != self.kind:
            return False
        meta = obj.get("metadata") or {}
        if self.namespace and meta.get("namespace", "") != self.namespace:
            return False
        labels = meta.get("labels") or {}
        if not all(r.matches(labels) for r in self.labels):
            return False
        return all(r.matches({r.key: field_value(obj, r.key)}) for r in self.fields)


# ------------------------------------------------------------------- watchers
class TooOldResourceVersion(Exception):
    """The requested resourceVersion is older than the kept history (Kubernetes: 410)."""

    def __init__(self, requested: int, oldest: int) -> None:
        super().__init__(f"too old resource version: {requested} ({oldest})")
        self.requested = requested
        self.oldest = oldest


class Watcher:
    """One open watch: a queue of watch events fed by the runner. A watcher that falls
    more than `limit` events behind is closed (the client re-watches from its last rv)."""

    def __init__(
        self,
        selector: Selector,
        limit: int = 10_000,
        convert: Callable[[JSON], JSON] | None = None,
    ) -> None:
        self.selector = selector
        self.limit = limit
        # another version's shape of the objects, converted before the selector reads them
        self.convert = convert
        self.queue: asyncio.Queue[JSON | None] = asyncio.Queue()
        self.closed = False
        # keys this watcher has shown as present: an object that stops matching the
        # selector is then sent as DELETED, one that starts matching as ADDED (Kubernetes)
        self.shown: set[str] = set()

    def initial(self, key: str, obj: JSON) -> None:
        self.shown.add(key)
        obj = self.convert(obj) if self.convert is not None else obj
        self.queue.put_nowait({"type": "ADDED", "object": obj})

    def offer(self, change: Change) -> None:
        # other kinds share keys ("ns/name" of a VM and its VMI): never this watch's objects
        if self.closed or change.kind != self.selector.kind:
            return
        if self.convert is not None:
            change = msgspec.structs.replace(change, object=self.convert(change.object))
        matches = self.selector.matches(change.kind, change.object)
        was_shown = change.key in self.shown
        if change.type is EventType.DELETED:
            if not (matches or was_shown):
                return
            self.shown.discard(change.key)
            etype = EventType.DELETED
        elif matches:
            self.shown.add(change.key)
            filtered = bool(self.selector.labels or self.selector.fields)
            # newly matching a label/field selector reads as ADDED to this watcher
            etype = EventType.ADDED if filtered and not was_shown else change.type
        elif was_shown:
            self.shown.discard(change.key)
            etype = EventType.DELETED
        else:
            return
        if self.queue.qsize() >= self.limit:
            self.close()
            return
        self.queue.put_nowait({"type": str(etype), "object": change.object})

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self.queue.put_nowait(None)

    def __aiter__(self) -> Watcher:
        return self

    async def __anext__(self) -> JSON:
        item = await self.queue.get()
        if item is None:
            raise StopAsyncIteration
        return item
