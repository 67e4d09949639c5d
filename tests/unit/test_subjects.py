"""Subject tokens: no value can form a wildcard or an extra token, and the encoding is
reversible and injective, so two aggregates never share a subject."""

from __future__ import annotations

import random

import pytest

from events import subjects
from events.meta import CLUSTER_SCOPE, Aggregate, Kind

HOSTILE = [".", "*", ">", "~", " ", "\t", "a.b", "a~b", "a_b", "_", "__", "_2E", "~7E", "é",
           "UPPER", "a b", "a\tb", "a*b", "a>b", "ns.>", "*.*", "", "x" * 400, "a\nb", "a/b",
           "日本"]  # fmt: skip


def tokens_ok(subject: str, n: int) -> bool:
    parts = subject.split(".")
    return (
        len(parts) == n
        and all(p and p not in ("*", ">") for p in parts)
        and all(c.isascii() and c.isprintable() and c not in " *>\t" for c in subject)
    )


@pytest.mark.parametrize("value", HOSTILE)
def test_a_hostile_value_is_one_plain_token(value: str) -> None:
    t = subjects.token(value)
    assert tokens_ok(t, 1), t
    assert subjects.untoken(t) == value
    # "_" as a namespace is the cluster scope's marker (validation refuses it as a namespace)
    ns = value if value not in ("", CLUSTER_SCOPE) else "default"
    agg = Aggregate(kind=Kind.VM, namespace=ns, name=value or "x")
    subject = subjects.event_subject(agg, "VMCreated", value)
    assert tokens_ok(subject, 6), subject
    assert subjects.matches(subjects.aggregate_filter(Kind.VM, agg.namespace, agg.name), subject)
    kind, ns, name, etype, node = subjects.parse(subject)
    assert (kind, ns, name, etype, node) == ("vm", agg.namespace, agg.name, "VMCreated", value)


def test_distinct_values_never_share_a_token() -> None:
    rng = random.Random(1123)
    alphabet = "ab.~_-*> \t9é2EF"
    values = {"".join(rng.choice(alphabet) for _ in range(rng.randint(1, 6))) for _ in range(5000)}
    values |= set(HOSTILE)
    assert len({subjects.token(v) for v in values}) == len(values)


def test_kubernetes_names_keep_their_subjects() -> None:
    # valid names (and so every subject already stored) are unchanged by the escaping
    assert subjects.token("web.v1") == "web~v1"
    assert subjects.token("vm-cirros") == "vm-cirros"
    node = Aggregate(kind=Kind.NODE, namespace=CLUSTER_SCOPE, name="node-1")
    assert subjects.event_subject(node, "NodeJoined") == "virt.node._.node-1.NodeJoined._"
