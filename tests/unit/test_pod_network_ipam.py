"""The pod network's addresses: allocated by the scheduler from the node's pod CIDR and
recorded in PodScheduled (the log is the only table), free again once their VMI ended;
the domain of a VMI with one has a tap for its pod interface and keeps the address (and
the interface's ports) in its metadata; a node shows its CIDR or why it has none."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from cli import up
from events.catalog import PodScheduled, Resources
from host import pod_network
from projections.cluster import Cluster
from projections.render import render_node
from projections.views import NodeView
from services.controller import ipam
from services.launcher.domain_xml import (
    build_domain_xml,
    pod_address_of,
    pod_interface,
    pod_ports_of,
)
from services.launcher.guest_network import taps
from tests.unit.test_controller_world import World, of


def test_allocate_skips_the_gateway_and_held_addresses_and_says_full() -> None:
    assert ipam.allocate("10.244.1.0/24", ()) == "10.244.1.2"
    assert ipam.allocate("10.244.1.0/24", {"10.244.1.2", "10.244.1.4"}) == "10.244.1.3"
    full = {f"10.244.1.{i}" for i in range(2, 255)}
    assert ipam.allocate("10.244.1.0/24", full) == ""
    assert ipam.allocate("", ()) == ""  # a node without a pod network


def scheduled(w: World, name: str) -> PodScheduled:
    out = of(w.run(w.vmi_created(name)), PodScheduled)
    assert out, f"{name} not scheduled"
    return out[0]


def test_each_vmi_gets_a_distinct_address_of_its_nodes_cidr() -> None:
    w = World()
    w.given(w.node_joined("node1", pod_cidr="10.244.1.0/24"))
    w.given(w.node_joined("node2", pod_cidr="10.244.2.0/24"))
    a, b, c = (scheduled(w, n) for n in ("a", "b", "c"))
    assert (a.node, a.pod_address) == ("node1", "10.244.1.2")
    assert (b.node, b.pod_address) == ("node2", "10.244.2.2")
    assert (c.node, c.pod_address) == ("node1", "10.244.1.3")


def test_one_pass_allocates_distinct_addresses() -> None:
    w = World()
    w.given(w.vmi_created("a"), w.vmi_created("b"))
    out = of(w.run(w.node_joined("node1", pod_cidr="10.244.1.0/24")), PodScheduled)
    assert sorted(e.pod_address for e in out) == ["10.244.1.2", "10.244.1.3"]


def test_an_ended_vmis_address_is_free_again() -> None:
    w = World()
    w.given(w.node_joined("node1", pod_cidr="10.244.1.0/24"))
    assert scheduled(w, "a").pod_address == "10.244.1.2"
    w.run(w.launcher_started("a"))
    w.run(w.domain_stopped("a"))
    assert scheduled(w, "b").pod_address == "10.244.1.2"


def test_a_node_without_a_pod_network_allocates_nothing() -> None:
    w = World()
    w.given(w.node_joined("node1"))
    assert scheduled(w, "a").pod_address == ""


VMI = {
    "metadata": {"name": "v", "namespace": "default", "uid": "u1"},
    "spec": {
        "domain": {
            "memory": {"guest": "64Mi"},
            "devices": {
                "interfaces": [
                    {"name": "default", "masquerade": {}, "ports": [{"port": 22}, {"port": 80}]},
                    {"name": "other", "bridge": {}},
                ]
            },
        },
        "networks": [{"name": "default", "pod": {}}, {"name": "other", "multus": {}}],
    },
}


def test_the_pod_interface_is_a_tap_and_the_address_and_ports_travel_in_the_metadata() -> None:
    assert pod_interface(VMI) == "default"
    xml = build_domain_xml(VMI, pod_address="10.244.1.2")
    assert '<interface type="ethernet">' in xml and '<interface type="user">' in xml
    assert pod_address_of(xml) == "10.244.1.2"
    assert pod_ports_of(xml) == (22, 80)
    # without an address (test mode, no pod network): user-mode networking, as before
    plain = build_domain_xml(VMI)
    assert 'type="ethernet"' not in plain and pod_address_of(plain) == ""
    assert pod_ports_of(plain) is None


def test_taps_reads_libvirts_taps_and_macs_by_interface_from_the_live_xml() -> None:
    live = (
        "<domain><devices>"
        '<interface type="user"><mac address="52:54:00:00:00:01"/><alias name="ua-u"/>'
        "</interface>"
        '<interface type="ethernet"><mac address="52:54:00:AA:BB:CC"/>'
        '<target dev="vnet7"/><alias name="ua-default"/></interface>'
        '<interface type="ethernet"><mac address="52:54:00:AA:BB:CD"/>'
        '<target dev="vnet8"/><alias name="ua-blue"/></interface>'
        "</devices></domain>"
    )
    assert taps(live) == {
        "default": ("vnet7", "52:54:00:aa:bb:cc"),
        "blue": ("vnet8", "52:54:00:aa:bb:cd"),
    }
    assert taps("<domain><devices/></domain>") == {}


def node(**kw: Any) -> NodeView:
    cap = Resources(cpu_millis=1000, memory_bytes=1 << 30)
    return NodeView(name="n1", capacity=cap, created_at=0.0, version=1, resource_version=1, **kw)


def conditions(view: NodeView) -> dict[str, dict[str, str]]:
    out = render_node(Cluster(), view, 0.0)
    return {c["type"]: c for c in out["status"]["conditions"]}


def test_a_node_shows_its_pod_cidr_or_why_it_has_no_pod_network() -> None:
    with_net = node(hypervisor="qemu", pod_cidr="10.244.1.0/24")
    assert render_node(Cluster(), with_net, 0.0)["spec"]["podCIDR"] == "10.244.1.0/24"
    assert conditions(with_net)["NetworkUnavailable"]["status"] == "False"
    without = node(hypervisor="qemu", pod_network_message="ip netns add: Operation not permitted")
    c = conditions(without)["NetworkUnavailable"]
    assert (c["status"], c["reason"]) == ("True", "NoPodNetwork")
    assert c["message"].endswith("ip netns add: Operation not permitted")
    assert "NetworkUnavailable" not in conditions(node())  # test mode: no such thing


def test_a_host_without_dnsmasq_falls_back_to_user_mode_networking_and_says_why(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(pod_network.shutil, "which", lambda *_a, **_k: None)
    with pytest.raises(pod_network.PodNetworkUnavailable, match="dnsmasq is not installed"):
        pod_network.create(tmp_path, ["node-1"])
    reason = up.start_pod_network(tmp_path, ["node-1"])
    assert reason == "dnsmasq is not installed (apt-get install dnsmasq-base)"
    out = capsys.readouterr().out
    assert "pod network: none, guests get user-mode networking (dnsmasq is not installed" in out
    assert not (tmp_path / "podnet").exists()
