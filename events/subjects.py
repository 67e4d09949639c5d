"""Subject layout: ``virt.<kind>.<namespace>.<name>.<EventType>.<node>``.

- ``virt.<kind>.<ns>.<name>.>`` is one aggregate: the optimistic-concurrency scope and the
  filter that loads it without scanning the stream.
- the last token is the node the event is routed to (``_`` for none), so a handler filters
  server-side with ``virt.vmi.*.*.*.<node>`` and never reads other nodes' traffic.
Kubernetes names may contain dots, which NATS uses as separators: they are written as
``~``, a character Kubernetes names cannot contain, so the mapping is reversible.
"""

from __future__ import annotations

from events.meta import CLUSTER_SCOPE, Aggregate, Kind

PREFIX = "virt"
NO_NODE = "_"


def token(value: str) -> str:
    return value.replace(".", "~") if value else NO_NODE


def untoken(value: str) -> str:
    return "" if value == NO_NODE else value.replace("~", ".")


def event_subject(agg: Aggregate, event_type: str, node: str = "") -> str:
    return (
        f"{PREFIX}.{agg.kind}.{token(agg.namespace or CLUSTER_SCOPE)}.{token(agg.name)}."
        f"{event_type}.{token(node)}"
    )


def aggregate_filter(kind: Kind | str, namespace: str, name: str) -> str:
    return f"{PREFIX}.{kind}.{token(namespace or CLUSTER_SCOPE)}.{token(name)}.>"


def kind_filter(kind: Kind | str) -> str:
    return f"{PREFIX}.{kind}.>"


def node_filter(kind: Kind | str, node: str) -> str:
    return f"{PREFIX}.{kind}.*.*.*.{token(node)}"


ALL = f"{PREFIX}.>"


def aggregate_key(subject: str) -> str:
    """``virt.vm.ns.name.Type.node`` → ``vm/ns/name`` (tokens as stored)."""
    parts = subject.split(".", 5)
    return f"{parts[1]}/{parts[2]}/{parts[3]}"


def parse(subject: str) -> tuple[str, str, str, str, str]:
    """→ (kind, namespace, name, event type, node), untokened."""
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
