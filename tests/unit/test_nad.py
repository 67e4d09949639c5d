"""NetworkAttachmentDefinition (k8s.cni.cncf.io/v1, kinds/nad.py): stored as a generic
kind, its CNI config checked; a VMI's multus network naming a missing one is refused in
KubeVirt's words (pkg/network/multus/nad.go: NetworkToResource)."""

from __future__ import annotations

import itertools
import json
import xml.etree.ElementTree as ET
from typing import Any

import msgspec
import pytest

from core import intents
from core.context import RequestContext
from core.errors import ApiError
from events.catalog import Attachment, PodScheduled, VMICreated, VMIFailed
from events.envelope import Stored
from events.meta import Kind
from kinds import nad
from kinds.registry import REGISTRY
from projections.cluster import Cluster
from services.controller import scheduler
from services.launcher.domain_xml import DomainType, attachments_of, build_domain_xml
from tests.factories import vmi_manifest, with_namespaces
from tests.unit.test_controller_world import World

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


def test_a_bridge_definition_with_host_local_addresses_has_an_ipam() -> None:
    block = nad.bridge_ipam({"config": json.dumps(CONFIG)})
    assert block == nad.BridgeIpam(
        subnet="192.168.100.0/24", gateway="192.168.100.1",
        first="192.168.100.1", last="192.168.100.254",
    )  # fmt: skip
    ranged = {**CONFIG, "ipam": {"type": "host-local", "ranges": [[{
        "subnet": "10.200.0.0/24", "rangeStart": "10.200.0.10", "rangeEnd": "10.200.0.11",
        "gateway": "10.200.0.254"}]]}}  # fmt: skip
    assert nad.bridge_ipam({"config": json.dumps(ranged)}) == nad.BridgeIpam(
        subnet="10.200.0.0/24", gateway="10.200.0.254", first="10.200.0.10", last="10.200.0.11"
    )
    # another plugin, or other addresses: no address of ours (QEMU's user network)
    assert nad.bridge_ipam({"config": json.dumps({**CONFIG, "type": "macvlan"})}) is None
    assert nad.bridge_ipam({"config": json.dumps({**CONFIG, "ipam": {"type": "dhcp"}})}) is None
    assert nad.bridge_ipam({}) is None


def test_the_scheduler_allocates_each_secondary_address_from_the_range_once() -> None:
    c = with_namespaces()
    nads = REGISTRY.resource("network-attachment-definitions")
    ranged = {**CONFIG, "ipam": {"type": "host-local", "subnet": "10.9.0.0/24",
                                 "rangeStart": "10.9.0.1", "rangeEnd": "10.9.0.3"}}  # fmt: skip
    applied(c, intents.create(c, nads, "default", nad_body(json.dumps(ranged)), ctx()))
    reserved = scheduler.Reserved()
    got = [scheduler.attachments(c, "default", vmi_body("br-test"), reserved) for _ in range(3)]
    # the gateway (.1, the subnet's first) is the bridge's; .2 and .3, then none left
    assert [a.address for (a,) in got] == ["10.9.0.2", "10.9.0.3", ""]
    (first,) = got[0]
    assert first == Attachment(
        network="sec", definition="default/br-test", address="10.9.0.2",
        subnet="10.9.0.0/24", gateway="10.9.0.1",
    )  # fmt: skip


def test_a_secondary_nic_is_a_tap_and_its_address_travels_in_the_domain() -> None:
    body = vmi_body("br-test")
    body["metadata"]["uid"] = "u1"
    a = Attachment(
        network="sec", definition="default/br-test", address="10.9.0.2",
        subnet="10.9.0.0/24", gateway="10.9.0.1",
    )  # fmt: skip
    xml = build_domain_xml(body, domain_type=DomainType.QEMU, pod_address="10.244.1.2",
                           attachments=(a,))  # fmt: skip
    kinds = [i.get("type") for i in ET.fromstring(xml).iterfind("./devices/interface")]
    assert kinds == ["ethernet", "ethernet"]
    assert attachments_of(xml) == (a,)
    # without an address (a full range): QEMU's user network, nothing kept
    xml = build_domain_xml(body, domain_type=DomainType.QEMU, pod_address="10.244.1.2",
                           attachments=(msgspec.structs.replace(a, address=""),))  # fmt: skip
    kinds = [i.get("type") for i in ET.fromstring(xml).iterfind("./devices/interface")]
    assert kinds == ["ethernet", "user"] and attachments_of(xml) == ()


def test_a_secondary_address_is_held_while_its_vmi_lives_and_then_given_again() -> None:
    """Through the controller's fold and its index (what a pass asks, without a scan)."""
    w = World()
    w.run(w.node_joined("n1", pod_cidr="10.244.1.0/24"))
    nads = REGISTRY.resource("network-attachment-definitions")
    ranged = {**CONFIG, "ipam": {"type": "host-local", "subnet": "10.9.0.0/24"}}
    created = intents.create(
        with_namespaces(), nads, "default", nad_body(json.dumps(ranged)), ctx()
    )
    for append in created.appends:
        w.fold(append.event)

    def started(name: str) -> tuple[str, ...]:
        manifest = vmi_manifest(name)
        manifest["spec"].update(vmi_body("br-test")["spec"])
        out = w.run(VMICreated(meta=w.m(Kind.VMI, name), manifest=manifest))
        (scheduled,) = [e for e in out if isinstance(e, PodScheduled)]
        assert scheduler.held_addresses(w.state.cluster, "default/br-test", w.state.index) == (
            scheduler.held_addresses(w.state.cluster, "default/br-test")
        )
        return tuple(a.address for a in scheduled.attachments)

    assert started("a") == ("10.9.0.2",)
    assert started("b") == ("10.9.0.3",)
    w.run(VMIFailed(meta=w.m(Kind.VMI, "a", "n1"), reason="Test"))  # `a` ended: free again
    assert "10.9.0.2" not in w.state.index.held["default/br-test"]
    assert started("c") == ("10.9.0.2",)
