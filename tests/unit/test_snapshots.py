"""The snapshot and restore controllers on plain data: KubeVirt's phases and conditions,
failure past the deadline, a restore refused while its target runs, restore to a new VM,
and idempotent decisions on redelivery."""

from __future__ import annotations

from typing import Any

import msgspec

from events.catalog import ResourceCreated, ResourceDeleted, VMStopRequested, VMUpdated
from events.meta import Kind, ResourceKind
from events.objects import VirtualMachineRestore
from kinds.registry import REGISTRY
from projections.render import render_vm
from projections.views import ResourceView
from services.controller import snapshot as sn
from tests.factories import vm_manifest
from tests.unit.test_controller_world import World, of


def snap_manifest(name: str = "snap1", vm: str = "vm1", **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "snapshot.kubevirt.io/v1beta1",
        "kind": "VirtualMachineSnapshot",
        "metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}"},
        "spec": {"source": {"apiGroup": "kubevirt.io", "kind": "VirtualMachine", "name": vm}}
        | spec,
    }


def restore_manifest(name: str = "r1", vm: str = "vm1", **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "snapshot.kubevirt.io/v1beta1",
        "kind": "VirtualMachineRestore",
        "metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}"},
        "spec": {
            "target": {"apiGroup": "kubevirt.io", "kind": "VirtualMachine", "name": vm},
            "virtualMachineSnapshotName": "snap1",
        }
        | spec,
    }


def world(strategy: str = "Halted") -> World:
    w = World()
    w.given(w.node_joined("node-1"))
    w.run(w.vm_created("vm1", strategy, memory="1Gi"))
    return w


def snap(w: World, name: str = "snap1") -> ResourceView:
    return w.state.cluster.resources[ResourceKind.SNAPSHOT][f"default/{name}"]


def restore(w: World, name: str = "r1") -> ResourceView:
    return w.state.cluster.resources[ResourceKind.RESTORE][f"default/{name}"]


def conditions(res: ResourceView) -> dict[str, tuple[str, str]]:
    return {c["type"]: (c["status"], c["reason"]) for c in res.status["conditions"]}


def take(w: World, name: str = "snap1", **spec: Any) -> list[Any]:
    return w.run(
        ResourceCreated(meta=w.m(ResourceKind.SNAPSHOT, name), manifest=snap_manifest(name, **spec))
    )


def test_an_offline_snapshot_succeeds_with_the_vm_spec_in_its_content() -> None:
    w = world()
    take(w)
    s = snap(w)
    assert s.status["phase"] == "Succeeded" and s.status["readyToUse"] is True
    assert s.status["sourceUID"] == "uid-vm1" and s.status["creationTime"]
    assert s.status["virtualMachineSnapshotContentName"] == "vmsnapshot-content-uid-snap1"
    assert conditions(s) == {
        "Progressing": ("False", "Operation complete"),
        "Ready": ("True", "Ready"),
    }
    assert "indications" not in s.status  # offline
    content = w.state.cluster.resources[ResourceKind.SNAPSHOT_CONTENT][
        "default/vmsnapshot-content-uid-snap1"
    ]
    vm = content.spec["source"]["virtualMachine"]
    assert vm["spec"] == w.vm().manifest["spec"] and vm["metadata"]["uid"] == "uid-vm1"
    assert content.spec["virtualMachineSnapshotName"] == "snap1"
    assert content.status["readyToUse"] is True
    assert content.manifest["metadata"]["ownerReferences"][0]["uid"] == "uid-snap1"


def test_a_snapshot_in_progress_locks_the_vm_status_then_releases_it() -> None:
    w = world()
    appended = w.when(
        ResourceCreated(meta=w.m(ResourceKind.SNAPSHOT, "snap1"), manifest=snap_manifest())
    )
    for ev in appended:  # the first pass only: InProgress, content being made
        w.fold(ev)
    assert snap(w).status["phase"] == "InProgress"
    assert conditions(snap(w))["Progressing"] == ("True", sn.LOCKED)
    assert render_vm(w.state.cluster, w.vm(), w.now)["status"]["snapshotInProgress"] == "snap1"
    w.settle([])
    for s in list(w.log):
        w.settle(w.react(s))
    assert snap(w).status["phase"] == "Succeeded"
    assert "snapshotInProgress" not in render_vm(w.state.cluster, w.vm(), w.now)["status"]


def test_an_online_snapshot_says_online_and_no_guest_agent() -> None:
    w = world("Always")
    w.start_running()
    take(w)
    s = snap(w)
    assert s.status["phase"] == "Succeeded"
    assert s.status["indications"] == ["Online", "NoGuestAgent"]
    assert [i["indication"] for i in s.status["sourceIndications"]] == ["Online", "NoGuestAgent"]


def test_a_snapshot_of_a_missing_vm_waits_then_fails_at_its_deadline() -> None:
    w = world()
    take(w, vm="ghost", failureDeadline="1m")
    s = snap(w)
    assert s.status["phase"] == "InProgress" and s.status["readyToUse"] is False
    assert conditions(s) == {
        "Progressing": ("False", "Source does not exist"),
        "Ready": ("False", "Not ready"),
    }
    assert not w.state.cluster.resources[ResourceKind.SNAPSHOT_CONTENT]
    w.now += 61
    w.settle(w.tick())
    s = snap(w)
    assert s.status["phase"] == "Failed"
    assert conditions(s) == {
        "Failure": ("True", "snapshot deadline exceeded"),
        "Progressing": ("False", "Operation failed"),
        "Ready": ("False", "Not ready"),
    }
    w.now += 600
    assert w.settle(w.tick()) == []  # final: nothing more


def test_redelivered_events_and_ticks_decide_nothing_new() -> None:
    w = world()
    take(w)
    w.run(ResourceCreated(meta=w.m(ResourceKind.RESTORE, "r1"), manifest=restore_manifest()))
    w.now += 5
    for s in list(w.log):
        assert w.settle(w.react(s)) == []
    assert w.settle(w.tick()) == []


def _change_memory(w: World, memory: str) -> None:
    manifest = vm_manifest("vm1", "Halted", memory=memory)
    w.run(VMUpdated(meta=w.m(Kind.VM, "vm1"), manifest=manifest))


def memory(w: World, name: str = "vm1") -> str:
    vm = w.state.cluster.vms[f"default/{name}"]
    return str(vm.manifest["spec"]["template"]["spec"]["domain"]["resources"]["requests"]["memory"])


def test_a_restore_brings_the_spec_back_and_completes() -> None:
    w = world()
    take(w)
    _change_memory(w, "2Gi")
    assert memory(w) == "2Gi"
    w.run(ResourceCreated(meta=w.m(ResourceKind.RESTORE, "r1"), manifest=restore_manifest()))
    assert memory(w) == "1Gi"
    r = restore(w)
    assert r.status["complete"] is True and r.status["restoreTime"]
    assert conditions(r) == {
        "Progressing": ("False", "Operation complete"),
        "Ready": ("True", "Operation complete"),
    }
    vm = w.vm()
    assert vm.manifest["metadata"]["annotations"][sn.LAST_RESTORE] == "r1-uid-r1"
    assert vm.run_strategy == "Halted" and vm.uid == "uid-vm1"
    assert "restoreInProgress" not in render_vm(w.state.cluster, vm, w.now)["status"]


def test_a_restore_of_a_running_vm_waits_for_it_to_stop() -> None:
    w = world("Always")
    take(w)
    w.start_running()
    w.run(ResourceCreated(meta=w.m(ResourceKind.RESTORE, "r1"), manifest=restore_manifest()))
    r = restore(w)
    assert r.status["complete"] is False
    assert conditions(r) == {
        "Progressing": ("False", "Waiting for target to be ready"),
        "Ready": ("False", "Waiting for target to be ready"),
    }
    assert render_vm(w.state.cluster, w.vm(), w.now)["status"]["restoreInProgress"] == "r1"
    w.now += 301
    w.settle(w.tick())
    assert conditions(restore(w))["Failure"] == (
        "True",
        "Restore target failed to be ready within 5m0s",
    )


def test_fail_immediate_and_stop_target_policies() -> None:
    w = world("Always")
    take(w)
    w.start_running()
    w.run(
        ResourceCreated(
            meta=w.m(ResourceKind.RESTORE, "r1"),
            manifest=restore_manifest(targetReadinessPolicy="FailImmediate"),
        )
    )
    assert conditions(restore(w))["Failure"] == ("True", "Restore target not ready")
    out = w.run(
        ResourceCreated(
            meta=w.m(ResourceKind.RESTORE, "r2"),
            manifest=restore_manifest("r2", targetReadinessPolicy="StopTarget"),
        )
    )
    assert of(out, VMStopRequested) and w.vm().run_strategy == "Halted"


def test_a_restore_to_a_new_name_creates_a_halted_vm() -> None:
    w = world("Always")
    take(w)
    w.run(
        ResourceCreated(meta=w.m(ResourceKind.RESTORE, "r1"), manifest=restore_manifest(vm="copy"))
    )
    copy = w.state.cluster.vms["default/copy"]
    assert copy.run_strategy == "Halted" and copy.uid != "uid-vm1"
    assert memory(w, "copy") == "1Gi"
    assert restore(w).status["complete"] is True


def test_a_restore_onto_another_existing_vm_is_refused() -> None:
    w = world()
    w.run(w.vm_created("other", "Halted"))
    take(w)
    w.run(
        ResourceCreated(meta=w.m(ResourceKind.RESTORE, "r1"), manifest=restore_manifest(vm="other"))
    )
    assert conditions(restore(w))["Ready"] == ("False", sn.EXISTING_TARGET)
    assert restore(w).status["complete"] is False


def test_restores_onto_one_target_go_one_at_a_time() -> None:
    """vmrestore-admitter.go refuses a restore onto a target another unfinished restore is
    restoring; two that got past it (made at once) go in creation order, the later waiting
    with the webhook's words."""
    w = world()
    take(w)
    w.run(w.vm_created("other", "Halted"))
    second = restore_manifest("r2", vm="copy")
    typed = msgspec.convert(second, VirtualMachineRestore)
    _, causes = REGISTRY.resource("vmrestore").admit(w.state.cluster, typed, "uid-r2")  # type: ignore[misc]
    assert causes == []
    w.run(
        ResourceCreated(meta=w.m(ResourceKind.RESTORE, "r1"), manifest=restore_manifest(vm="other"))
    )
    busy = REGISTRY.resource("vmrestore").admit(  # type: ignore[misc]
        w.state.cluster,
        msgspec.convert(restore_manifest("r3", vm="other"), VirtualMachineRestore),
        "u",
    )[1]
    assert [(c.message, c.field) for c in busy] == [
        ('VirtualMachineRestore "r1" in progress', "spec.target")
    ]
    # r1 stays unfinished (its target is another VM); r4, made past the webhook, waits
    w.run(
        ResourceCreated(
            meta=w.m(ResourceKind.RESTORE, "r4"), manifest=restore_manifest("r4", vm="other")
        )
    )
    assert conditions(restore(w, "r4"))["Ready"] == (
        "False",
        'VirtualMachineRestore "r1" in progress',
    )
    w.run(ResourceDeleted(meta=w.m(ResourceKind.RESTORE, "r1")))
    assert conditions(restore(w, "r4"))["Ready"] == ("False", sn.EXISTING_TARGET)


def test_a_restore_from_a_missing_snapshot_says_so() -> None:
    w = world()
    w.run(ResourceCreated(meta=w.m(ResourceKind.RESTORE, "r1"), manifest=restore_manifest()))
    assert conditions(restore(w))["Progressing"] == (
        "False",
        "VMSnapshot default/snap1 does not exist",
    )


def test_durations() -> None:
    assert sn.parse_duration("1h2m3s", 0) == 3723
    assert sn.parse_duration("90s", 0) == 90
    assert sn.parse_duration("nonsense", 7) == 7
    assert sn.parse_duration(None, 300) == 300


def test_deleting_a_snapshot_deletes_its_content_unless_retained() -> None:
    w = world()
    take(w)
    take(w, "kept", deletionPolicy="Retain")
    contents = w.state.cluster.resources[ResourceKind.SNAPSHOT_CONTENT]
    assert len(contents) == 2
    w.run(ResourceDeleted(meta=w.m(ResourceKind.SNAPSHOT, "snap1")))
    w.run(ResourceDeleted(meta=w.m(ResourceKind.SNAPSHOT, "kept")))
    assert list(contents) == ["default/vmsnapshot-content-uid-kept"]
