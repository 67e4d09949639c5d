"""KubeVirt's common instance types and preferences deployed as its operator deploys them
(pkg/virt-operator/resource/apply/instancetypes.go: created when missing, updated when
they differ, marked as virt-operator's): the first start creates the whole bundle, a start
on the same bundle appends nothing, a changed bundle updates what it marks."""

from __future__ import annotations

import itertools
import json
from typing import Any

from core.context import RequestContext
from events.envelope import Stored
from events.meta import ResourceKind
from kinds import common_instancetypes as common
from projections.cluster import Cluster
from services.api.service import bundled_instancetypes

_ids = itertools.count(1)


def _ctx() -> RequestContext:
    return RequestContext(
        now=1000.0, correlation_id="boot", new_id=lambda: f"{next(_ids):032x}",
        suffix=lambda: "abcde",
    )  # fmt: skip


def _ident(docs: tuple[dict[str, Any], ...]) -> str:
    return common.identifier(json.dumps(docs, sort_keys=True).encode())


def _deploy(cluster: Cluster, docs: tuple[dict[str, Any], ...], seq: list[int]) -> int:
    outcome = common.deploy(docs, _ident(docs), cluster, _ctx())
    for append in outcome.appends:
        seq[0] += 1
        cluster.apply(Stored(seq=seq[0], subject="", time=0.0, event=append.event))
    return len(outcome.appends)


def test_the_bundle_is_deployed_once_and_again_only_when_it_changes() -> None:
    docs = bundled_instancetypes()
    cluster, seq = Cluster(), [0]
    assert _deploy(cluster, docs, seq) == len(docs) >= 50
    types = cluster.resources[ResourceKind.CLUSTER_INSTANCETYPE]
    prefs = cluster.resources[ResourceKind.CLUSTER_PREFERENCE]
    assert {"u1.small", "u1.medium"} <= set(types) and "centos.stream9" in prefs
    meta = types["u1.small"].manifest["metadata"]
    assert meta["labels"]["app.kubernetes.io/managed-by"] == "virt-operator"
    assert meta["labels"]["instancetype.kubevirt.io/size"] == "small"  # the bundle's own
    assert meta["annotations"][common.IDENTIFIER] == _ident(docs)

    assert common.up_to_date(cluster, _ident(docs), len(docs))  # a restart parses nothing
    assert not common.up_to_date(cluster, "another", len(docs))
    assert _deploy(cluster, docs, seq) == 0  # unchanged: nothing appended

    changed = list(docs)
    small = next(i for i, d in enumerate(changed) if d["metadata"]["name"] == "u1.small")
    changed[small] = {**changed[small], "spec": {**changed[small]["spec"], "cpu": {"guest": 2}}}
    assert _deploy(cluster, tuple(changed), seq) == len(docs)  # every object re-marked
    assert types["u1.small"].manifest["spec"]["cpu"] == {"guest": 2}
    assert cluster.resources[ResourceKind.CLUSTER_INSTANCETYPE]["u1.small"].generation == 2


def test_a_users_object_of_a_bundled_name_is_taken_over() -> None:
    """As the operator's createOrUpdate: an object of that name is made the bundle's."""
    docs = bundled_instancetypes()
    cluster, seq = Cluster(), [0]
    mine = tuple(d for d in docs if d["metadata"]["name"] == "u1.small")
    theirs = ({**mine[0], "spec": {"cpu": {"guest": 7}, "memory": {"guest": "7Gi"}}},)
    _deploy(cluster, theirs, seq)
    _deploy(cluster, docs, seq)
    spec = cluster.resources[ResourceKind.CLUSTER_INSTANCETYPE]["u1.small"].manifest["spec"]
    assert spec == mine[0]["spec"]
