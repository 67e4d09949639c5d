"""ConfigMap (core/v1, kinds/configmap.py): stored as a generic kind, validated as the API
server validates it (key alphabet, data/binaryData overlap, immutability), and read from
kubectl's protobuf body (services/api/protowire.py)."""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from core import intents
from core.context import RequestContext
from core.errors import ApiError
from events.envelope import Stored
from kinds import configmap
from kinds.registry import REGISTRY
from projections.cluster import Cluster
from services.api import protowire
from tests.factories import with_namespaces

_ids = itertools.count(1)
SPEC = REGISTRY.resource("configmaps")


def ctx() -> RequestContext:
    return RequestContext(
        now=1000.0, correlation_id="r", new_id=lambda: f"{next(_ids):032x}", suffix=lambda: "x"
    )


def body(name: str = "cfg", **fields: Any) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, **fields}


def applied(c: Cluster, outcome: Any) -> None:
    for append in outcome.appends:
        c.apply(Stored(seq=c.last_seq + 1, subject="", time=0.0, event=append.event))


def refusal(c: Cluster, doc: dict[str, Any]) -> str:
    with pytest.raises(ApiError) as exc:
        intents.create(c, SPEC, "default", doc, ctx())
    assert exc.value.status.code == 422
    return str(exc.value.status.message)


def test_a_configmap_is_stored_under_its_short_name() -> None:
    c = with_namespaces()
    assert REGISTRY.resource("cm") is SPEC and SPEC.group == "" and SPEC.namespaced
    applied(c, intents.create(c, SPEC, "default", body(data={"mode": "fast"}), ctx()))
    assert c.resources[configmap.KIND_TOKEN]["default/cfg"].manifest["data"] == {"mode": "fast"}


def test_keys_and_overlaps_are_refused_in_the_api_servers_words() -> None:
    c = with_namespaces()
    assert "a valid config key must consist of alphanumeric characters" in refusal(
        c, body(data={"a b": "c"})
    )
    assert "must not start with '..'" in refusal(c, body(data={"..x": "c"}))
    message = refusal(c, body(data={"k": "v"}, binaryData={"k": "dg=="}))
    assert "data[k]" in message and "duplicate of key present in binaryData" in message
    assert message.startswith('ConfigMap "cfg" is invalid: ')
    too_long = body(data={"k": "x" * (1 << 20) + "x"})
    assert ": Too long: must have at most 1048576 bytes" in refusal(c, too_long)
    assert not c.resources[configmap.KIND_TOKEN]


def test_the_data_of_an_immutable_configmap_never_changes() -> None:
    c = with_namespaces()
    doc = body(data={"k": "v"}, immutable=True)
    applied(c, intents.create(c, SPEC, "default", doc, ctx()))
    changed = body(data={"k": "w"}, immutable=True)
    with pytest.raises(ApiError) as exc:
        intents.update(c, SPEC, "default", "cfg", changed, ctx(), updatable=("configmaps",))
    assert "field is immutable when `immutable` is set" in str(exc.value.status.message)
    relabelled = body(data={"k": "v"}, immutable=True)
    relabelled["metadata"]["labels"] = {"a": "b"}
    assert intents.update(
        c, SPEC, "default", "cfg", relabelled, ctx(), updatable=("configmaps",)
    ).appends


def test_kubectls_protobuf_configmap_is_read() -> None:
    f = protowire._bytes_field
    entry = lambda k, v: f(1, k.encode()) + f(2, v)  # noqa: E731
    raw = (
        f(1, f(1, b"settings"))
        + f(2, entry("mode", b"fast"))
        + f(3, entry("blob", b"\x00\x01"))
        + protowire._key(4, 0)
        + b"\x01"
    )
    unknown = f(1, f(1, b"v1") + f(2, b"ConfigMap")) + f(2, raw)
    assert protowire.configmap(protowire.MAGIC + unknown) == {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "settings"},
        "data": {"mode": "fast"},
        "binaryData": {"blob": "AAE="},
        "immutable": True,
    }
