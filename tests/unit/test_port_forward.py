"""The portforward subresource's pure parts: virt-api's refusals and the node's URL, the
RBAC subresource its path names, QEMU's `info usernet` and the netdev of a domain's NIC,
and the CLI's targets and ports."""

from __future__ import annotations

import pytest

from cli.port_forward import parse_ports, parse_target
from core.errors import ApiError
from events.catalog import DomainPaused
from events.meta import Kind
from services.api import streams
from services.api.rbac import attributes
from services.handler.port_forward import forwards, netdev_of
from tests.factories import meta
from tests.unit.test_api_streams import Given, running, scheduled

SUB = "/apis/subresources.kubevirt.io/v1/namespaces/default/virtualmachineinstances"


def refusal(g: Given, port: int = 22, protocol: str = "tcp", name: str = "vm1") -> tuple:
    with pytest.raises(ApiError) as e:
        streams.forward_target(g.cluster, "default", name, port, protocol)
    return e.value.code, e.value.status.message


def test_virt_apis_refusals() -> None:
    assert refusal(Given(), name="nope") == (
        404, 'virtualmachineinstances.kubevirt.io "nope" not found'
    )  # fmt: skip
    assert refusal(scheduled(4000)) == (
        400,
        "Unable to connect to VirtualMachineInstance because phase is Scheduled instead of Running",
    )
    paused = running(4000)(DomainPaused(meta=meta(Kind.VMI, node="node-1")))
    assert refusal(paused) == (
        409, 'Operation cannot be fulfilled on virtualmachineinstances.kubevirt.io "vm1": '
        "VMI is paused",
    )  # fmt: skip
    assert refusal(running(4000), protocol="udp")[0] == 400
    assert refusal(running(4000), port=70000)[0] == 400
    assert refusal(running(0)) == (400, "no network interfaces are present")


def test_the_nodes_url_for_the_guests_port() -> None:
    t = streams.forward_target(running(4000).cluster, "default", "vm1", 22, secure=True)
    assert t.url == (
        "wss://127.0.0.1:4000/v1/namespaces/default/virtualmachineinstances/vm1/portforward/22/tcp"
    )


def test_rbac_names_the_subresource_without_its_port() -> None:
    for path in (f"{SUB}/vm1/portforward/22", f"{SUB}/vm1/portforward/22/tcp"):
        a = attributes("GET", path)
        assert (a.verb, a.resource, a.subresource, a.name) == (
            "get", "virtualmachineinstances", "portforward", "vm1"
        )  # fmt: skip


USERNET = """Hub -1 (hostua-net0):
  Protocol[State]    FD  Source Address  Port   Dest. Address  Port RecvQ SendQ
  TCP[HOST_FORWARD]  12       127.0.0.1 39615       10.0.2.15    22     0     0
  TCP[ESTABLISHED]   15       127.0.0.1 40312       10.0.2.15    22     0     0
  TCP[HOST_FORWARD]  16       127.0.0.1 41007       10.0.2.15  8080     0     0
  UDP[236 sec]       18       10.0.2.15   68        10.0.2.2     67     0     0
"""


def test_the_forwards_qemu_lists() -> None:
    assert forwards(USERNET) == {(39615, 22), (41007, 8080)}
    assert forwards("Hub -1 (hostua-net0):\n") == set()


def test_the_netdev_of_the_first_user_mode_nic() -> None:
    xml = """<domain><devices>
      <interface type='bridge'><alias name='net9'/></interface>
      <interface type='user'><mac address='52:54:00:00:00:01'/><alias name='ua-default'/>
      </interface></devices></domain>"""
    assert netdev_of(xml) == "hostua-default"
    assert netdev_of("<domain><devices/></domain>") is None


def test_the_clis_targets_and_ports() -> None:
    assert parse_target("vmi/vm1") == ("", "vmi", "vm1")
    assert parse_target("alice@vm/web") == ("alice", "vm", "web")
    for bad in ("vm1", "pod/vm1", "vmi/"):
        with pytest.raises(ValueError):
            parse_target(bad)
    assert parse_ports("2222:22") == (2222, 22)
    assert parse_ports("22") == (22, 22)
    assert parse_ports("0:22") == (0, 22)
    for bad in ("ssh", "22:0", "1:70000"):
        with pytest.raises(ValueError):
            parse_ports(bad)
