"""Subject layout: ``virt.<kind>.<namespace>.<name>.<EventType>.<node>``.

- ``virt.<kind>.<ns>.<name>.>`` is one aggregate: the optimistic-concurrency scope and the
  filter that loads it without scanning the stream.
- the last token is the node the event is routed to (``_`` for none), so a handler filters
  server-side with ``virt.vmi.*.*.*.<node>`` and never reads other nodes' traffic.
Every value that becomes a token is encoded, so no input can form a wildcard, an empty or
an extra token, whatever validation let through: letters, digits and ``-`` stay; a dot
(Kubernetes names may hold them; NATS separates tokens with them) is written ``~``; any
other character is ``_`` and the hex of each of its UTF-8 bytes (``_2A`` for ``*``). Empty
is ``_``. The encoding is reversible and injective, and leaves valid Kubernetes names (and
so existing subjects) as they were.
"""

from __future__ import annotations

import re

from events.meta import CLUSTER_SCOPE, Aggregate, Kind

PREFIX = "virt"
NO_NODE = "_"

_PLAIN = re.compile(r"[A-Za-z0-9.-]+")
_ESCAPED = re.compile(r"(?:_[0-9A-F]{2})+")


def _escape(m: re.Match[str]) -> str:
    return "".join(f"_{b:02X}" for b in m.group(0).encode())


def token(value: str) -> str:
    if not value:
        return NO_NODE
    if _PLAIN.fullmatch(value) is None:  # the rare case: anything but a DNS-style name
        value = re.sub(r"[^A-Za-z0-9.-]+", _escape, value)
    return value.replace(".", "~")


def untoken(value: str) -> str:
    if value == NO_NODE:
        return ""
    value = value.replace("~", ".")
    if "_" in value:
        value = _ESCAPED.sub(lambda m: bytes.fromhex(m.group(0).replace("_", "")).decode(), value)
    return value


def _scope(namespace: str) -> str:
    # cluster-scoped aggregates carry CLUSTER_SCOPE ("_") as namespace: its token is itself
    return NO_NODE if namespace in ("", CLUSTER_SCOPE) else token(namespace)


def event_subject(agg: Aggregate, event_type: str, node: str = "") -> str:
    return (
        f"{PREFIX}.{agg.kind}.{_scope(agg.namespace)}.{token(agg.name)}.{event_type}.{token(node)}"
    )


def aggregate_filter(kind: Kind | str, namespace: str, name: str) -> str:
    return f"{PREFIX}.{kind}.{_scope(namespace)}.{token(name)}.>"


def kind_filter(kind: Kind | str) -> str:
    return f"{PREFIX}.{kind}.>"


def node_filter(kind: Kind | str, node: str) -> str:
    return f"{PREFIX}.{kind}.*.*.*.{token(node)}"


def type_filter(kind: Kind | str, event_type: str, node: str | None = None) -> str:
    """One event type of a kind, routed to `node` (None: to any node)."""
    return f"{PREFIX}.{kind}.*.*.{event_type}.{'*' if node is None else token(node)}"


ALL = f"{PREFIX}.>"


def aggregate_key(subject: str) -> str:
    """``virt.vm.ns.name.Type.node`` → ``vm/ns/name`` (tokens as stored)."""
    parts = subject.split(".", 5)
    return f"{parts[1]}/{parts[2]}/{parts[3]}"


def parse_key(key: str) -> tuple[str, str, str]:
    """``vm/ns/name`` (an `aggregate_key`) → (kind, namespace, name), untokened ("" for
    cluster scope)."""
    kind, ns, name = key.split("/", 2)
    return kind, untoken(ns), untoken(name)


def parse(subject: str) -> tuple[str, str, str, str, str]:
    """→ (kind, namespace, name, event type, node), untokened ("" for cluster scope)."""
    _, kind, ns, name, etype, node = subject.split(".", 5)
    return kind, untoken(ns), untoken(name), etype, untoken(node)


def matches(pattern: str, subject: str) -> bool:
    """NATS wildcard match (``*`` one token, ``>`` the rest)."""
    p = pattern.split(".")
    s = subject.split(".")
    for i, tok in enumerate(p):
        if tok == ">":
            return len(s) > i
        if i >= len(s) or (tok != "*" and tok != s[i]):
            return False
    return len(p) == len(s)
