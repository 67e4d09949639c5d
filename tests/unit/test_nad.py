"""NetworkAttachmentDefinition (k8s.cni.cncf.io/v1, kinds/nad.py): stored as a generic
kind, its CNI config checked; a VMI's multus network naming a missing one is refused in
KubeVirt's words (pkg/network/multus/nad.go: NetworkToResource)."""

from __future__ import annotations

import itertools
import json
from typing import Any

import pytest

from core import intents
from core.context import RequestContext
from core.errors import ApiError
from events.envelope import Stored
from kinds import nad
from kinds.registry import REGISTRY
from projections.cluster import Cluster
from tests.factories import with_namespaces

_ids = itertools.count(1)
CONFIG = {
    "cniVersion": "0.3.1", "name": "br-test", "type": "bridge", "bridge": "br-test",
    "ipam": {"type": "host-local", "subnet": "192.168.100.0/24"},
}  # fmt: skip


def ctx() -> RequestContext:
    return RequestContext(
        now=1000.0, correlation_id="r", new_id=lambda: f"{next(_ids):032x}", suffix=lambda: "x"
    )


def nad_body(config: Any, name: str = "br-test") -> dict[str, Any]:
    return {
        "apiVersion": "k8s.cni.cncf.io/v1",
        "kind": "NetworkAttachmentDefinition",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"config": config},
    }


def vmi_body(network_name: str) -> dict[str, Any]:
    return {
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachineInstance",
        "metadata": {"name": "vmi1", "namespace": "default"},
        "spec": {
            "domain": {
                "devices": {"interfaces": [{"name": "default", "masquerade": {}},
                                           {"name": "sec", "bridge": {}}]},
                "resources": {"requests": {"memory": "64Mi"}},
            },
            "networks": [{"name": "default", "pod": {}},
                         {"name": "sec", "multus": {"networkName": network_name}}],
        },
    }  # fmt: skip


def applied(c: Cluster, outcome: Any) -> None:
    for append in outcome.appends:
        c.apply(Stored(seq=c.last_seq + 1, subject="", time=0.0, event=append.event))


def test_a_definition_is_stored_and_its_config_must_be_cni_json() -> None:
    c = with_namespaces()
    spec = REGISTRY.resource("network-attachment-definitions")
    assert REGISTRY.resource("net-attach-def") is spec and spec.group == "k8s.cni.cncf.io"
    applied(c, intents.create(c, spec, "default", nad_body(json.dumps(CONFIG)), ctx()))
    assert "default/br-test" in c.resources[nad.KIND_TOKEN]
    with pytest.raises(ApiError) as exc:
        intents.create(c, spec, "default", nad_body("{not json", "bad"), ctx())
    assert exc.value.status.code == 422
    assert "invalid CNI configuration" in str(exc.value.status.message)


def test_a_vmi_naming_a_missing_definition_is_refused_in_kubevirts_words() -> None:
    c = with_namespaces()
    spec = REGISTRY.resource("vmi")
    with pytest.raises(ApiError) as exc:
        intents.create(c, spec, "default", vmi_body("other/br-test"), ctx())
    assert exc.value.status.code == 422
    assert "failed to locate network attachment definition other/br-test" in str(
        exc.value.status.message
    )
    nads = REGISTRY.resource("network-attachment-definitions")
    applied(c, intents.create(c, nads, "default", nad_body(json.dumps(CONFIG)), ctx()))
    assert intents.create(c, spec, "default", vmi_body("br-test"), ctx()).appends  # its own ns
    assert intents.create(c, spec, "default", vmi_body("default/br-test"), ctx()).appends
