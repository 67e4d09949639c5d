"""The guest agent on plain data: libvirt's guest info in KubeVirt's shapes, the
AgentConnected condition, the subresources' refusals, the launcher's report."""

from __future__ import annotations

import pytest

from core.errors import ApiError
from events.catalog import (
    DomainStarted,
    Event,
    GuestAgentChanged,
    LauncherStarted,
    NodeJoined,
    PodScheduled,
    Resources,
    VMICreated,
)
from events.envelope import Decision, Stored
from events.meta import Kind
from projections.cluster import Cluster
from projections.render import render_vmi
from services.api import streams
from services.handler import agent_info
from services.handler.planner import plan
from services.launcher import lifecycle as lc
from services.launcher.domain_state import DomainEvent, DomainState, StateReason
from services.launcher.protocol import DomainStatus, Hello
from tests.factories import meta
from tests.unit.test_handler_planner import KEY, observed, record

PARAMS = {
    "hostname": "vm1",
    "os.id": "virtstream",
    "os.name": "virtstream guest",
    "os.pretty-name": "virtstream guest 1",
    "os.version-id": "1",
    "os.kernel-release": "6.1.0-56-cloud-amd64",
    "os.machine": "x86_64",
    "timezone.name": "UTC",
    "timezone.offset": 0,
    "user.count": 1,
    "user.0.name": "root",
    "user.0.login-time": 1700000000123,
    "fs.count": 1,
    "fs.0.name": "vdc",
    "fs.0.mountpoint": "/data",
    "fs.0.fstype": "ext4",
    "fs.0.total-bytes": 2000,
    "fs.0.used-bytes": 100,
    "fs.0.disk.count": 1,
    "fs.0.disk.0.serial": "data",
    "fs.0.disk.0.bus-type": "virtio",
}


def test_libvirts_guest_info_in_kubevirts_shapes() -> None:
    agent = {"version": "7.2.22", "supported_commands": [{"name": "guest-ping", "enabled": True}]}
    info = agent_info.guest_os_info(PARAMS, agent, "thawed")
    assert info["guestAgentVersion"] == "7.2.22"
    assert info["supportedCommands"] == [{"name": "guest-ping", "enabled": True}]
    assert info["hostname"] == "vm1" and info["timezone"] == "UTC, 0"
    assert info["os"] == {
        "name": "virtstream guest", "kernelRelease": "6.1.0-56-cloud-amd64",
        "prettyName": "virtstream guest 1", "versionId": "1", "machine": "x86_64",
        "id": "virtstream",
    }  # fmt: skip
    assert info["userList"] == [{"userName": "root", "loginTime": 1700000000.123}]
    (fs,) = info["fsInfo"]["disks"]
    assert fs == {
        "diskName": "vdc", "mountPoint": "/data", "fileSystemType": "ext4",
        "usedBytes": 100, "totalBytes": 2000, "disk": [{"busType": "virtio", "serial": "data"}],
    }  # fmt: skip
    assert info["fsFreezeStatus"] == "thawed"
    assert agent_info.filesystem_list(PARAMS)["items"] == [fs]
    assert agent_info.user_list({"user.count": 0}) == {"metadata": {}, "items": []}


def fold(c: Cluster, *events: Event) -> None:
    for ev in events:
        c.apply(Stored(seq=c.last_seq + 1, subject="", time=0.0, event=ev))


def test_the_agent_condition_and_virt_apis_refusals() -> None:
    c = Cluster()
    m = lambda: meta(Kind.VMI, "vm1", node="n1")  # noqa: E731
    manifest = {"metadata": {"name": "vm1", "namespace": "default", "uid": "u"}, "spec": {}}
    fold(
        c,
        NodeJoined(meta=meta(Kind.NODE, "n1"), node="n1", console_port=7000,
                   capacity=Resources(cpu_millis=1000, memory_bytes=2**30)),
        VMICreated(meta=m(), manifest=manifest),
    )  # fmt: skip

    def refusal() -> tuple[int, str]:
        with pytest.raises(ApiError) as e:
            streams.agent_target(c, "default", "vm1", "guestosinfo")
        return e.value.code, e.value.status.message

    assert refusal()[1].endswith("VMI is not running")
    fold(
        c,
        PodScheduled(meta=m(), node="n1", pod_name="p", pod_uid="pu", manifest=manifest),
        LauncherStarted(meta=m(), node="n1", pod_uid="pu", pid=1),
        DomainStarted(meta=m(), node="n1", domain="default_vm1"),
    )
    assert refusal() == (
        409,
        'Operation cannot be fulfilled on virtualmachineinstances.kubevirt.io "vm1": '
        "VMI does not have guest agent connected",
    )

    def types() -> set[str]:
        status = render_vmi(c, c.vmis["default/vm1"])["status"]
        return {x["type"] for x in status["conditions"]}

    assert "AgentConnected" not in types()
    fold(c, GuestAgentChanged(meta=m(), connected=True))
    assert "AgentConnected" in types()
    target = streams.agent_target(c, "default", "vm1", "userlist")
    assert target.url.endswith(":7000/v1/namespaces/default/virtualmachineinstances/vm1/userlist")
    fold(c, GuestAgentChanged(meta=m(), connected=False))
    assert "AgentConnected" not in types()


def test_the_handler_reports_the_agent_as_the_launcher_sees_it() -> None:
    r = record(launcher_pid=42, started=True)
    o = observed()
    o = o.updated(DomainStatus(state=DomainState.RUNNING, seq=2, agent_connected=True), 0.0)
    (changed,) = [a.event for a in plan(KEY, r, o, "n1", 0.0) if isinstance(a, Decision)]
    assert isinstance(changed, GuestAgentChanged) and changed.connected
    assert changed.meta.event_id == "virt-handler-n1/u1/GuestAgentChanged/1"
    import msgspec

    seen = msgspec.structs.replace(r, agent_connected=True, agent_events=1)
    assert plan(KEY, seen, o, "n1", 0.0) == []


def test_the_launcher_reports_the_agent_coming_and_going() -> None:
    settings = lc.Settings(
        domain_name="default_vm1", hello=Hello(vmi_uid="u1", domain_name="default_vm1", pid=1)
    )
    s = lc.initial(settings)
    up = lc.Seen(state=DomainState.RUNNING, reason=StateReason.BOOTED, pid=7)
    s, _ = lc.step(
        s, lc.DomainEventSeen(event=DomainEvent.STARTED, reason=StateReason.BOOTED, seen=up)
    )
    s, (sent,) = lc.step(s, lc.AgentSeen(connected=True, seen=up))
    assert isinstance(sent, lc.Broadcast) and isinstance(sent.report, DomainStatus)
    assert sent.report.agent_connected and sent.report.state is DomainState.RUNNING
    assert lc.step(s, lc.AgentSeen(connected=True, seen=up))[1] == []  # no change, no report


LIVE_XML = """<domain><devices>
  <interface type='user'><mac address='52:54:00:AB:CD:01'/><alias name='ua-default'/></interface>
  <interface type='user'><mac address='52:54:00:ab:cd:02'/><alias name='ua-second'/></interface>
  <channel type='unix'><alias name='channel0'/></channel>
</devices></domain>"""


def test_the_guests_nics_are_the_vmis_interfaces_by_mac() -> None:
    from services.launcher.guest_network import guest_interfaces
    from services.launcher.protocol import GuestInterface

    found: dict[str, tuple[str, tuple[str, ...]]] = {
        "52:54:00:ab:cd:01": ("eth0", ("fe80::1", "10.0.2.15"))
    }
    assert guest_interfaces(LIVE_XML, found) == (
        GuestInterface(name="default", mac="52:54:00:ab:cd:01", interface_name="eth0",
                       ip_addresses=("fe80::1", "10.0.2.15")),
        GuestInterface(name="second", mac="52:54:00:ab:cd:02"),
    )  # fmt: skip


def test_the_interfaces_reach_status_interfaces_and_the_ip_column() -> None:
    from events.catalog import DomainStopped, GuestInterfacesChanged, InterfaceStatus, StopReason
    from kinds.columns import lookup

    c = Cluster()
    m = lambda: meta(Kind.VMI, "vm1", node="n1")  # noqa: E731
    manifest = {"metadata": {"name": "vm1", "namespace": "default", "uid": "u"}, "spec": {}}
    fold(
        c,
        NodeJoined(meta=meta(Kind.NODE, "n1"), node="n1", console_port=7000,
                   capacity=Resources(cpu_millis=1000, memory_bytes=2**30)),
        VMICreated(meta=m(), manifest=manifest),
        PodScheduled(meta=m(), node="n1", pod_name="p", pod_uid="pu", manifest=manifest),
        LauncherStarted(meta=m(), node="n1", pod_uid="pu", pid=1),
        DomainStarted(meta=m(), node="n1", domain="default_vm1"),
        GuestInterfacesChanged(meta=m(), interfaces=(
            InterfaceStatus(name="default", mac="52:54:00:ab:cd:01", interface_name="eth0",
                            ip_addresses=("fe80::1", "10.0.2.15")),
        )),
    )  # fmt: skip
    obj = render_vmi(c, c.vmis["default/vm1"])
    assert obj["status"]["interfaces"] == [
        {"name": "default", "mac": "52:54:00:ab:cd:01", "infoSource": "domain, guest-agent",
         "interfaceName": "eth0", "ipAddress": "10.0.2.15",
         "ipAddresses": ["10.0.2.15", "fe80::1"]},
    ]  # fmt: skip
    assert lookup(obj, ".status.interfaces[0].ipAddress") == "10.0.2.15"  # kubectl's IP column
    fold(c, DomainStopped(meta=m(), reason=StopReason.SHUTDOWN))
    assert "interfaces" not in render_vmi(c, c.vmis["default/vm1"])["status"]


def test_the_launcher_and_the_handler_report_the_guests_addresses() -> None:
    from events.catalog import GuestInterfacesChanged
    from services.launcher.protocol import GuestInterface

    settings = lc.Settings(
        domain_name="default_vm1", hello=Hello(vmi_uid="u1", domain_name="default_vm1", pid=1)
    )
    s = lc.initial(settings)
    up = lc.Seen(state=DomainState.RUNNING, reason=StateReason.BOOTED, pid=7)
    s, _ = lc.step(
        s, lc.DomainEventSeen(event=DomainEvent.STARTED, reason=StateReason.BOOTED, seen=up)
    )
    nic = GuestInterface(
        name="default", mac="m", interface_name="eth0", ip_addresses=("10.0.2.15",)
    )
    s, (sent,) = lc.step(s, lc.InterfacesSeen(interfaces=(nic,), seen=up))
    assert isinstance(sent, lc.Broadcast) and isinstance(sent.report, DomainStatus)
    assert sent.report.interfaces == (nic,)
    assert lc.step(s, lc.InterfacesSeen(interfaces=(nic,), seen=up))[1] == []

    r = record(launcher_pid=42, started=True)
    o = observed().updated(sent.report, 0.0)
    (changed,) = [a.event for a in plan(KEY, r, o, "n1", 0.0) if isinstance(a, Decision)]
    assert isinstance(changed, GuestInterfacesChanged)
    assert changed.interfaces[0].ip_addresses == ("10.0.2.15",)
    assert changed.meta.event_id == "virt-handler-n1/u1/GuestInterfacesChanged/1"
    import msgspec

    folded = msgspec.structs.replace(r, interfaces=changed.interfaces, interface_events=1)
    assert plan(KEY, folded, o, "n1", 0.0) == []
