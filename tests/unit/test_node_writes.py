"""A node a user writes (PATCH, PUT): labels, annotations, taints and `spec.unschedulable`
become the node's events, the rest is the agent's; a rejoin keeps what users wrote;
the API server's messages for bad labels and taints (`ValidateObjectMeta`,
`validateNodeTaints` in kubernetes/pkg/apis/core/validation/validation.go)."""

from __future__ import annotations

import itertools
import json
from typing import Any

import pytest

from core import commands
from core.commands import Request, Verb
from core.context import RequestContext
from core.errors import ApiError
from events.catalog import (
    Event,
    NodeCordoned,
    NodeJoined,
    NodeMetadataChanged,
    NodeTaintsChanged,
    NodeUncordoned,
    Resources,
    Taint,
)
from events.envelope import Stored
from events.meta import Kind
from kinds.registry import REGISTRY
from projections.cluster import Cluster
from tests.factories import meta

_ids = itertools.count(1)


class Log:
    def __init__(self) -> None:
        self.cluster = Cluster()
        self.stored: list[Stored] = []
        self.fold(self.joined())

    def joined(self, **labels: str) -> NodeJoined:
        return NodeJoined(
            meta=meta(Kind.NODE, "node-1", namespace="_"),
            node="node-1",
            capacity=Resources(cpu_millis=4000, memory_bytes=1 << 32),
            labels={"kubernetes.io/hostname": "node-1", **labels},
        )

    def fold(self, event: Event) -> None:
        s = Stored(seq=len(self.stored) + 1, subject="", time=0.0, event=event)
        self.stored.append(s)
        self.cluster.apply(s)

    def patch(self, body: Any, kind: str = "application/merge-patch+json") -> list[Event]:
        return self.run(Verb.PATCH, json.dumps(body).encode(), kind)

    def run(self, verb: Verb, body: bytes, content_type: str) -> list[Event]:
        req = Request(
            verb=verb, spec=REGISTRY.resource("nodes"), namespace="", name="node-1",
            body=body, content_type=content_type,
        )  # fmt: skip
        ctx = RequestContext(
            now=1000.0, correlation_id="req", new_id=lambda: f"{next(_ids):032x}",
            suffix=lambda: "abcde",
        )  # fmt: skip
        outcome = commands.decide(commands.decode(req), self.cluster, ctx, REGISTRY.updatable)
        for append in outcome.appends:
            self.fold(append.event)
        return [a.event for a in outcome.appends]

    def served(self) -> dict[str, Any]:
        obj = REGISTRY.render_object(self.cluster, Kind.NODE, "node-1", 1000.0)
        assert obj is not None
        return obj


def test_a_label_is_one_event_and_repeating_it_none() -> None:
    log = Log()
    out = log.patch({"metadata": {"labels": {"rack": "r1"}}})
    assert [type(e) for e in out] == [NodeMetadataChanged]
    assert log.served()["metadata"]["labels"]["rack"] == "r1"
    assert log.patch({"metadata": {"labels": {"rack": "r1"}}}) == []


def test_annotations_are_the_users_and_the_servers_stay() -> None:
    log = Log()
    log.patch({"metadata": {"annotations": {"owner": "ops", "kubevirt.io/heartbeat": "x"}}})
    node = log.cluster.nodes["node-1"]
    assert node.annotations == {"owner": "ops"}  # the server's annotation is not stored
    served = log.served()["metadata"]["annotations"]
    assert served["owner"] == "ops" and served["kubevirt.io/heartbeat"] != "x"


def test_taints_by_strategic_merge_and_cordon_by_unschedulable() -> None:
    log = Log()
    taint = {"key": "gpu", "value": "yes", "effect": "NoSchedule"}
    out = log.patch({"spec": {"taints": [taint]}}, "application/strategic-merge-patch+json")
    assert out == [NodeTaintsChanged(meta=out[0].meta, taints=(Taint("gpu", "NoSchedule", "yes"),))]
    assert log.served()["spec"]["taints"] == [taint]
    out = log.patch({"spec": {"unschedulable": True}}, "application/strategic-merge-patch+json")
    assert [type(e) for e in out] == [NodeCordoned]
    out = log.patch({"spec": {"unschedulable": None}}, "application/strategic-merge-patch+json")
    assert [type(e) for e in out] == [NodeUncordoned]


def test_a_json_patch_and_a_put_change_only_what_is_the_users() -> None:
    log = Log()
    ops = [{"op": "add", "path": "/metadata/labels/zone", "value": "z1"}]
    assert [type(e) for e in log.patch(ops, "application/json-patch+json")] == [NodeMetadataChanged]
    node = log.served()
    node["status"]["capacity"]["cpu"] = "64"
    node["spec"]["unschedulable"] = True
    out = log.run(Verb.UPDATE, json.dumps(node).encode(), "application/json")
    assert [type(e) for e in out] == [NodeCordoned]
    assert log.served()["status"]["capacity"]["cpu"] == "4"


def test_a_rejoin_keeps_what_users_wrote() -> None:
    log = Log()
    log.patch({"metadata": {"labels": {"rack": "r1"}, "annotations": {"a": "b"}}})
    log.patch({"spec": {"taints": [{"key": "k", "effect": "NoExecute"}], "unschedulable": True}})
    log.fold(log.joined(arch="amd64"))
    node = log.cluster.nodes["node-1"]
    assert node.labels == {"kubernetes.io/hostname": "node-1", "rack": "r1", "arch": "amd64"}
    assert node.annotations == {"a": "b"}
    assert node.taints == (Taint("k", "NoExecute"),) and node.cordoned


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (
            {"metadata": {"labels": {"rack": "not ok!"}}},
            'Node "node-1" is invalid: metadata.labels: Invalid value: "not ok!": a valid label '
            "must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and "
            "must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  "
            "or '12345', regex used for validation is "
            "'(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')",
        ),
        (
            {"metadata": {"labels": {"-rack": "r"}}},
            'Node "node-1" is invalid: metadata.labels: Invalid value: "-rack": name part must '
            "consist of alphanumeric characters, '-', '_' or '.', and must start and end with an "
            "alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for "
            "validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')",
        ),
        (
            {"spec": {"taints": [{"key": "k", "effect": "Sometimes"}]}},
            'Node "node-1" is invalid: spec.taints[0].effect: Unsupported value: "Sometimes": '
            'supported values: "NoSchedule", "PreferNoSchedule", "NoExecute"',
        ),
        (
            {"spec": {"taints": [{"key": "k"}]}},
            'Node "node-1" is invalid: spec.taints[0].effect: Required value',
        ),
        (
            {"spec": {"taints": [{"key": "k", "effect": "NoSchedule"}] * 2}},
            'Node "node-1" is invalid: spec.taints[1]: Duplicate value: "k:NoSchedule": taints '
            "must be unique by key and effect pair",
        ),
    ],
)
def test_bad_labels_and_taints_are_the_api_servers_422(body: Any, message: str) -> None:
    log = Log()
    with pytest.raises(ApiError) as exc:
        log.patch(body)
    assert (exc.value.code, exc.value.status.message) == (422, message)
    assert len(log.stored) == 1  # nothing appended
