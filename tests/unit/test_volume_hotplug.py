"""Volume hotplug on plain data: the addvolume/removevolume intents (KubeVirt's answers),
the VMI's spec and volumeStatus, the handler's plan and the launcher's machine."""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from core import context as intents
from core.errors import ApiError
from core.kind import CallArgs
from events.catalog import (
    DomainStarted,
    Event,
    LauncherStarted,
    PodScheduled,
    VMICreated,
    VMIVolumeAdded,
    VMIVolumeRemoved,
    VolumeAttached,
    VolumeDetached,
)
from events.envelope import Decision, Stored
from events.meta import Kind
from kinds import vmi_volumes
from projections.cluster import Cluster
from projections.render import render_vmi
from services.handler.effects import Send
from services.handler.planner import plan
from services.launcher import lifecycle as lc
from services.launcher.domain_state import DomainEvent, DomainState, StateReason
from services.launcher.domain_xml import disk_xml_of, hotplug_disk_xml
from services.launcher.protocol import (
    AttachVolume,
    CommandResult,
    DetachVolume,
    DomainStatus,
    Hello,
)
from tests.factories import meta
from tests.unit.test_handler_planner import KEY, observed, record

_ids = itertools.count(1)
VMI = {
    "metadata": {"name": "vm1", "namespace": "default", "uid": "u1"},
    "spec": {"domain": {"devices": {"disks": [{"name": "root", "disk": {"bus": "virtio"}}]}},
             "volumes": [{"name": "root", "containerDisk": {"image": "cirros"}}]},
}  # fmt: skip
ADD: dict[str, Any] = {
    "name": "data",
    "disk": {"disk": {"bus": "scsi"}, "serial": "data"},
    "volumeSource": {"persistentVolumeClaim": {"claimName": "data", "hotpluggable": True}},
}


def ctx() -> intents.RequestContext:
    return intents.RequestContext(
        now=1000.0, correlation_id="r", new_id=lambda: f"{next(_ids):032x}", suffix=lambda: "x"
    )


def fold(c: Cluster, *events: Event) -> None:
    for ev in events:
        c.apply(Stored(seq=c.last_seq + 1, subject="", time=0.0, event=ev))


def running() -> Cluster:
    c = Cluster()
    m = lambda: meta(Kind.VMI, "vm1", node="n1")  # noqa: E731
    fold(
        c,
        VMICreated(meta=m(), manifest=VMI),
        PodScheduled(
            meta=m(), node="n1", pod_name="virt-launcher-vm1-x", pod_uid="p", manifest=VMI
        ),
        LauncherStarted(meta=m(), node="n1", pod_uid="p", pid=1),
        DomainStarted(meta=m(), node="n1", domain="default_vm1"),
    )
    return c


def add(c: Cluster, body: dict[str, Any]) -> list[Event]:
    out = vmi_volumes.addvolume(c, "default", "vm1", CallArgs(body=body, query={}), ctx())
    return [a.event for a in out.appends]


def refused(fn: Any, c: Cluster, body: dict[str, Any]) -> tuple[int, str]:
    with pytest.raises(ApiError) as e:
        fn(c, "default", "vm1", CallArgs(body=body, query={}), ctx())
    return e.value.code, e.value.status.message


def test_addvolume_patches_the_spec_routed_to_the_node_and_shows_the_volume_status() -> None:
    c = running()
    (added,) = add(c, ADD)
    assert isinstance(added, VMIVolumeAdded) and added.meta.node == "n1"
    assert added.volume == {
        "name": "data",
        "persistentVolumeClaim": {"claimName": "data", "hotpluggable": True},
    }
    assert added.disk == {"name": "data", "disk": {"bus": "scsi"}, "serial": "data"}
    fold(c, added)
    obj = render_vmi(c, c.vmis["default/vm1"])
    assert [v["name"] for v in obj["spec"]["volumes"]] == ["root", "data"]
    root, pending = obj["status"]["volumeStatus"]  # every volume, in the spec's order
    assert root["name"] == "root" and "phase" not in root
    assert (pending["name"], pending["phase"]) == ("data", "Pending")
    fold(c, VolumeAttached(meta=meta(Kind.VMI, "vm1", node="n1"), name="data", target="sda"))
    _, ready = render_vmi(c, c.vmis["default/vm1"])["status"]["volumeStatus"]
    assert ready["target"] == "sda" and ready["phase"] == "Ready"
    assert ready["message"] == "Successfully attach hotplugged volume data to VM"
    assert ready["hotplugVolume"] == {"attachPodName": "virt-launcher-vm1-x"}
    # removevolume: out of the spec at once, Detaching until the handler says it is gone
    out = vmi_volumes.removevolume(
        c, "default", "vm1", CallArgs(body={"name": "data"}, query={}), ctx()
    )
    (removed,) = [a.event for a in out.appends]
    assert isinstance(removed, VMIVolumeRemoved) and removed.name == "data"
    fold(c, removed)
    obj = render_vmi(c, c.vmis["default/vm1"])
    assert [v["name"] for v in obj["spec"]["volumes"]] == ["root"]
    root, leaving = obj["status"]["volumeStatus"]
    assert root["name"] == "root" and (leaving["name"], leaving["phase"]) == ("data", "Detaching")
    fold(c, VolumeDetached(meta=meta(Kind.VMI, "vm1", node="n1"), name="data"))
    volume_status = render_vmi(c, c.vmis["default/vm1"])["status"]["volumeStatus"]
    assert [v["name"] for v in volume_status] == ["root"]


def test_kubevirts_refusals_of_an_addvolume_and_a_removevolume() -> None:
    c = running()
    assert refused(vmi_volumes.addvolume, c, {}) == (
        400,
        "Request with no body, a new name is expected as the request body",
    )
    no_disk = {k: v for k, v in ADD.items() if k != "disk"}
    assert (
        refused(vmi_volumes.addvolume, c, no_disk)[1]
        == "AddVolumeOptions requires disk to not be nil"
    )
    code, message = refused(vmi_volumes.addvolume, c, {**ADD, "name": "root"})
    assert code == 409 and message.endswith(
        "Unable to add volume [root] because volume with that name already exists"
    )
    code, message = refused(vmi_volumes.addvolume, c, {**ADD, "disk": {"disk": {"bus": "sata"}}})
    assert code == 422 and message.endswith(
        "Hotplug configuration for disk [data] requires bus to be 'scsi' or 'virtio'. "
        "[sata] is not permitted."
    )
    code, message = refused(vmi_volumes.removevolume, c, {"name": "root"})
    assert code == 409 and message.endswith(
        "Unable to remove volume [root] because it is not hotpluggable"
    )
    code, message = refused(vmi_volumes.removevolume, c, {"name": "nope"})
    assert message.endswith("Unable to remove volume [nope] because it does not exist")
    assert add(c, {**ADD, "dryRun": ["All"]}) == []  # checked, nothing appended


def test_the_handler_attaches_what_the_spec_holds_and_reports_what_the_launcher_did() -> None:
    import msgspec

    volume = msgspec.json.encode({**ADD["volumeSource"], "name": "data"})
    disk = msgspec.json.encode({"name": "data", "disk": {"bus": "scsi"}})
    r = record(launcher_pid=42, started=True, hotplug=(("data", volume, disk),), causation_id="c")
    (send,) = plan(KEY, r, observed(DomainState.RUNNING), "n1", 0.0)
    assert isinstance(send, Send) and isinstance(send.command, AttachVolume)
    assert send.command.name == "data" and send.command.disk["disk"] == {"bus": "scsi"}
    o = observed()
    o = o.updated(DomainStatus(state=DomainState.RUNNING, seq=2, volumes={"data": "sda"}), 0.0)
    (attached,) = [a.event for a in plan(KEY, r, o, "n1", 0.0) if isinstance(a, Decision)]
    assert isinstance(attached, VolumeAttached) and attached.target == "sda"
    done = msgspec.structs.replace(r, attached=(("data", "sda"),), volume_events=1)
    assert plan(KEY, done, o, "n1", 0.0) == []
    unplugged = msgspec.structs.replace(done, hotplug=())
    (send,) = plan(KEY, unplugged, o, "n1", 0.0)
    assert isinstance(send, Send) and send.command == DetachVolume(name="data")
    gone = observed(DomainState.RUNNING)
    planned = plan(KEY, unplugged, gone, "n1", 0.0)
    (detached,) = [a.event for a in planned if isinstance(a, Decision)]
    assert isinstance(detached, VolumeDetached)
    assert detached.meta.event_id == "virt-handler-n1/u1/VolumeDetached/data/2"


def test_the_launcher_attaches_a_disk_and_reports_its_target() -> None:
    settings = lc.Settings(
        domain_name="default_vm1", hello=Hello(vmi_uid="u1", domain_name="default_vm1", pid=1)
    )
    s = lc.initial(settings)
    up = lc.Seen(state=DomainState.RUNNING, reason=StateReason.BOOTED, pid=7)
    s, _ = lc.step(
        s, lc.DomainEventSeen(event=DomainEvent.STARTED, reason=StateReason.BOOTED, seen=up)
    )
    command = AttachVolume(id=3, name="data", volume={"name": "data"}, disk={"name": "data"})
    s, actions = lc.step(s, lc.CommandReceived(now=1.0, client=1, command=command, seen=up))
    (call,) = actions
    assert isinstance(call, lc.AttachDisk) and call.name == "data"
    s, actions = lc.step(s, lc.CallReturned(call=call, result="sda", seen=up))
    (sent,) = [a for a in actions if isinstance(a, lc.ReportTo)]
    assert isinstance(sent.report, CommandResult) and sent.report.ok
    assert sent.report.status is not None and sent.report.status.volumes == {"data": "sda"}
    s, actions = lc.step(
        s, lc.CommandReceived(now=2.0, client=1, command=DetachVolume(id=4, name="data"), seen=up)
    )
    (detach,) = actions
    assert detach == lc.DetachDisk(name="data", target="sda", reply_to=lc.ReplyTo(1, 4))


def test_a_hotplugged_disk_takes_the_first_free_target_of_its_bus() -> None:
    live = (
        "<domain><devices><disk><target dev='sda' bus='scsi'/></disk>"
        "<disk><target dev='vda' bus='virtio'/></disk></devices></domain>"
    )
    xml, target = hotplug_disk_xml({"name": "data", "disk": {"bus": "scsi"}}, "/d/data.qcow2", live)
    assert target == "sdb"
    assert 'dev="sdb"' in xml and 'bus="scsi"' in xml and 'type="qcow2"' in xml
    assert 'alias name="ua-data"' in xml
    assert disk_xml_of(live, "vda") is not None and disk_xml_of(live, "sdc") is None
