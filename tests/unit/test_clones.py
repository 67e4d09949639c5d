"""The clone controller on plain data: a clone of a VM goes through a snapshot and a
restore to a Halted target with KubeVirt's identity stripped (MACs, SMBIOS serial,
firmware uuid) and its label and annotation filters applied; a clone of a snapshot
restores it; a missing source fails; the clone's snapshot and restore are cleaned up;
redelivery decides nothing new."""

from __future__ import annotations

import json
from typing import Any

from events.catalog import ResourceCreated, ResourceDeleted, VMCreated, VMDeleted
from events.meta import Kind, ResourceKind
from events.objects import ObjectMeta, VirtualMachineClone
from kinds import clone as clone_kind
from projections.cluster import Cluster
from projections.views import ResourceView
from services.controller import clone as cl
from services.controller import snapshot as sn
from tests.factories import vm_manifest
from tests.unit.test_controller_world import World
from tests.unit.test_snapshots import snap_manifest


def clone_manifest(name: str = "c1", source: str = "vm1", **spec: Any) -> dict[str, Any]:
    kind = spec.pop("source_kind", "VirtualMachine")
    group = "kubevirt.io" if kind == "VirtualMachine" else "snapshot.kubevirt.io"
    return {
        "apiVersion": "clone.kubevirt.io/v1beta1",
        "kind": "VirtualMachineClone",
        "metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}"},
        "spec": {"source": {"apiGroup": group, "kind": kind, "name": source}} | spec,
    }


def source_vm(w: World) -> None:
    m = vm_manifest("vm1", "Halted")
    m["metadata"]["labels"] = {"app": "web", "someKey/x": "1", "keep/me": "2"}
    m["metadata"]["annotations"] = {"anotherKey/a": "1", "drop": "2"}
    m["spec"]["template"]["metadata"] = {
        "labels": {"kubevirt.io/vm": "vm1", "someKey/y": "3"},
        "annotations": {"ovn.kubernetes.io/ip": "10.0.0.5", "mine": "4"},
    }
    tspec = m["spec"]["template"]["spec"]
    tspec["domain"]["devices"]["interfaces"] = [
        {"name": "default", "masquerade": {}, "macAddress": "02:00:00:00:00:01"},
        {"name": "second", "bridge": {}, "macAddress": "02:00:00:00:00:02"},
    ]
    tspec["domain"]["firmware"] = {"uuid": "5d307ca9-b3ef-428c-8861-06e72d69f223", "serial": "s1"}
    tspec["networks"] = [{"name": "default", "pod": {}}, {"name": "second", "multus": {}}]
    w.run(VMCreated(meta=w.m(Kind.VM, "vm1"), manifest=m))


def world() -> World:
    w = World()
    w.given(w.node_joined("node-1"))
    source_vm(w)
    return w


def make(w: World, name: str = "c1", **kw: Any) -> list[Any]:
    return w.run(
        ResourceCreated(meta=w.m(ResourceKind.CLONE, name), manifest=clone_manifest(name, **kw))
    )


def the_clone(w: World, name: str = "c1") -> ResourceView:
    return w.state.cluster.resources[ResourceKind.CLONE][f"default/{name}"]


def conditions(res: ResourceView) -> dict[str, tuple[str, str]]:
    return {c["type"]: (c["status"], c["reason"]) for c in res.status["conditions"]}


def test_a_clone_of_a_vm_snapshots_restores_and_strips_its_identity() -> None:
    w = world()
    make(
        w,
        target={"apiGroup": "kubevirt.io", "kind": "VirtualMachine", "name": "copy"},
        labelFilters=["*", "!someKey/*"],
        annotationFilters=["anotherKey/*"],
        template={
            "labelFilters": ["*", "!someKey/*"],
            "annotationFilters": ["!ovn.kubernetes.io/*", "*"],
        },
        newMacAddresses={"default": "02:11:22:33:44:55"},
        newSMBiosSerial="new-serial",
    )
    c = the_clone(w)
    assert c.status["phase"] == "Succeeded"
    assert c.status["targetName"] == "copy"
    assert "snapshotName" not in c.status and "restoreName" not in c.status
    assert conditions(c) == {"Progressing": ("False", "Ready"), "Ready": ("True", "Ready")}
    target = w.state.cluster.vms["default/copy"]
    assert target.run_strategy == "Halted" and target.uid != "uid-vm1"
    meta = target.manifest["metadata"]
    assert meta["labels"] == {"app": "web", "keep/me": "2"}
    assert meta["annotations"]["anotherKey/a"] == "1" and "drop" not in meta["annotations"]
    tmeta = target.manifest["spec"]["template"]["metadata"]
    assert tmeta["labels"] == {"kubevirt.io/vm": "vm1"}
    assert tmeta["annotations"] == {"mine": "4"}
    domain = target.manifest["spec"]["template"]["spec"]["domain"]
    macs = [i["macAddress"] for i in domain["devices"]["interfaces"]]
    assert macs == ["02:11:22:33:44:55", ""]  # given, else blank: the host picks one
    assert domain["firmware"]["serial"] == "new-serial"
    uuid = domain["firmware"]["uuid"]
    assert uuid and uuid != "5d307ca9-b3ef-428c-8861-06e72d69f223"
    # the clone's snapshot and restore are gone, and with the snapshot its content
    for kind in (ResourceKind.SNAPSHOT, ResourceKind.RESTORE, ResourceKind.SNAPSHOT_CONTENT):
        assert w.state.cluster.resources[kind] == {}, kind


def test_the_phases_in_order_and_the_names_kubevirt_gives() -> None:
    w = world()
    phases = []
    appended = make(w)
    for ev in appended:
        if ev.meta.aggregate.kind == ResourceKind.CLONE and hasattr(ev, "status"):
            phases.append(ev.status["phase"])
    assert phases == ["SnapshotInProgress", "RestoreInProgress", "Succeeded"]
    created = {
        ev.meta.aggregate.kind: ev.manifest for ev in appended if isinstance(ev, ResourceCreated)
    }
    c = the_clone(w)
    suffix = cl.suffix(c)
    snap = created[ResourceKind.SNAPSHOT]
    assert snap["metadata"]["name"] == f"clone-c1-snapshot-vm1-{suffix}"
    assert snap["metadata"]["ownerReferences"][0]["uid"] == "uid-c1"
    restore = created[ResourceKind.RESTORE]
    assert restore["metadata"]["name"] == f"clone-c1-restore-vm1-{suffix}"
    # no target named: KubeVirt's generated name
    assert restore["spec"]["target"]["name"] == f"vm1-clone-{suffix}"
    assert c.status["targetName"] == f"vm1-clone-{suffix}"
    assert f"default/vm1-clone-{suffix}" in w.state.cluster.vms
    deleted = [ev.meta.aggregate.kind for ev in appended if isinstance(ev, ResourceDeleted)]
    assert ResourceKind.SNAPSHOT in deleted and ResourceKind.RESTORE in deleted


def test_a_clone_of_a_snapshot_restores_it_and_keeps_the_snapshot() -> None:
    w = world()
    w.run(ResourceCreated(meta=w.m(ResourceKind.SNAPSHOT, "gold"), manifest=snap_manifest("gold")))
    make(w, source="gold", source_kind="VirtualMachineSnapshot")
    c = the_clone(w)
    assert c.status["phase"] == "Succeeded"
    assert "default/gold" in w.state.cluster.resources[ResourceKind.SNAPSHOT]
    assert w.state.cluster.resources[ResourceKind.RESTORE] == {}
    assert f"default/vm1-clone-{cl.suffix(c)}" in w.state.cluster.vms


def test_a_clone_of_a_missing_source_fails() -> None:
    w = world()
    make(w, source="nope")
    c = the_clone(w)
    assert c.status["phase"] == "Failed"
    # KubeVirt's updateStatus: Failed, then "Still processing" where the status differs
    assert conditions(c) == {
        "Progressing": ("True", "Still processing"),
        "Ready": ("False", "Failed"),
    }
    assert w.state.cluster.resources[ResourceKind.SNAPSHOT] == {}


def test_redelivery_and_ticks_decide_nothing_new() -> None:
    w = world()
    make(w)
    before = len(w.log)
    for s in list(w.log):
        w.settle(w.react(s))
    w.now += 5
    w.settle(w.tick())
    assert len(w.log) == before


def test_a_succeeded_clone_whose_target_is_gone_is_deleted() -> None:
    w = world()
    make(w, target={"apiGroup": "kubevirt.io", "kind": "VirtualMachine", "name": "copy"})
    w.run(VMDeleted(meta=w.m(Kind.VM, "copy")))
    w.now += 60
    w.settle(w.tick())
    assert "default/c1" not in w.state.cluster.resources[ResourceKind.CLONE]


def test_filters() -> None:
    labels = {"a/1": "", "someKey/x": "", "b": ""}
    assert cl.removed_keys(labels, None) == []
    assert cl.removed_keys(labels, ["*", "!someKey/*"]) == ["someKey/x"]
    assert sorted(cl.removed_keys(labels, ["a/*"])) == ["b", "someKey/x"]
    assert cl.removed_keys(labels, []) == list(labels)


def test_patches_escape_keys_and_end_with_the_clones_own() -> None:
    vm = vm_manifest("vm1")
    vm["metadata"]["labels"] = {"x/y": "1"}
    out = cl.patches(
        vm, {"labelFilters": ["!x/*"], "patches": ['{"op":"add","path":"/a","value":1}']}
    )
    assert json.loads(out[0]) == {"op": "remove", "path": "/metadata/labels/x~1y"}
    assert out[-1] == '{"op":"add","path":"/a","value":1}'


def test_a_restore_patch_that_does_not_apply_says_so() -> None:
    try:
        sn.apply_patches({"a": {}}, ['{"op":"remove","path":"/nope"}'])
    except sn.PatchError as e:
        assert "/nope" in str(e)
    else:
        raise AssertionError("no error")


def admit(spec: dict[str, Any]) -> list[str]:
    typed = VirtualMachineClone(metadata=ObjectMeta(name="c"), spec=spec)
    admit_fn = clone_kind.SPEC.admit
    assert admit_fn is not None
    _, causes = admit_fn(Cluster(), typed, "u")
    return [c.message for c in causes]


def test_the_admitter_words_as_kubevirt() -> None:
    vm = {"apiGroup": "kubevirt.io", "kind": "VirtualMachine", "name": "vm1"}
    assert admit({"source": vm}) == []
    assert admit({"source": vm, "target": vm}) == [
        "Target name cannot be equal to source name when both are VirtualMachines"
    ]
    assert admit({"source": vm, "labelFilters": ["some/*/key", "key!", "!"]}) == [
        "spec.labels filter some/*/key is invalid: cannot contain a wildcard character (*); "
        "FilterRules: WildcardChar can be only at the end of the filter",
        "spec.labels filter key! is invalid: cannot contain a negation character (!); "
        "FilterRules: NegationChar can be only used at the beginning of the filter",
        "a negation character is not a valid filter",
    ]
    assert admit({"source": vm, "newMacAddresses": {"interfaceName": "00-11-22"}}) == [
        "interface interfaceName has malformed MAC address (00-11-22)."
    ]
    assert admit({"source": {**vm, "kind": "VirtualMachineInstance"}}) == [
        "Source kind is not supported"
    ]


def kube_events(w: World) -> list[tuple[str, str, str]]:
    """The Kubernetes Events the api derives from the world's log."""
    api = Cluster(kube_events=True)
    for s in w.log:
        api.apply(s)
    assert api.kube_events is not None
    records = sorted(api.kube_events.table.values(), key=lambda r: r.created_seq)
    return [(r.involved.kind, r.reason, r.message) for r in records]


def test_a_clone_records_each_step_as_kubevirt_does() -> None:
    w = world()
    make(w, target={"apiGroup": "kubevirt.io", "kind": "VirtualMachine", "name": "copy"})
    s = cl.suffix(the_clone(w))
    snap, restore = f"clone-c1-snapshot-vm1-{s}", f"clone-c1-restore-vm1-{s}"
    clone_events = [e[1:] for e in kube_events(w) if e[0] == "VirtualMachineClone"]
    assert clone_events == [
        ("SnapshotCreated", f"created snapshot {snap} for clone c1"),
        ("SnapshotReady", f"snapshot {snap} for clone c1 is ready to use"),
        ("RestoreCreated", f"created restore {restore} for clone c1"),
        ("RestoreReady", f"restore {restore} for clone c1 is ready to use"),
        ("TargetVMCreated", "created target VM copy for clone c1"),
        ("PVCBound", "all PVC for clone c1 are bound"),
    ]


def test_a_failed_clone_says_why() -> None:
    w = world()
    make(w, source="nope")
    assert [e for e in kube_events(w) if e[0] == "VirtualMachineClone"] == [
        (
            "VirtualMachineClone",
            "SourceDoesNotExist",
            "VirtualMachine nope does not exist in namespace default",
        )
    ]


def test_prefix_target_name_is_accepted_and_names_the_restored_volumes() -> None:
    """KubeVirt's clone API (staging/src/kubevirt.io/api/clone/v1beta1/types.go:
    RandomizeNames and PrefixTargetName; ToVolumeRestorePolicy) and its restore's names
    (pkg/storage/snapshot/restore.go: restoreVolumeName, openshift's naming.GetName)."""
    vm = {"apiGroup": "kubevirt.io", "kind": "VirtualMachine", "name": "vm1"}
    assert admit({"source": vm, "volumeNamePolicy": "PrefixTargetName"}) == []
    assert admit({"source": vm, "volumeNamePolicy": "RandomizeNames"}) == []
    assert admit({"source": vm, "volumeNamePolicy": "Sideways"}) == [
        'VolumeNamePolicy "Sideways" is not supported'
    ]
    w = world()
    target = {"apiGroup": "kubevirt.io", "kind": "VirtualMachine", "name": "copy"}
    appended = make(w, target=target, volumeNamePolicy="PrefixTargetName")
    restore = next(
        ev.manifest
        for ev in appended
        if isinstance(ev, ResourceCreated) and ev.meta.aggregate.kind == ResourceKind.RESTORE
    )
    assert restore["spec"]["volumeRestorePolicy"] == "PrefixTargetName"
    assert "volumeRestorePolicy" not in next(
        ev.manifest
        for ev in make(world())
        if isinstance(ev, ResourceCreated) and ev.meta.aggregate.kind == ResourceKind.RESTORE
    )

    def restore_view(**spec: Any) -> ResourceView:
        manifest = {"metadata": {"name": "r1"}, "spec": {"target": {"name": "copy"}} | spec}
        return ResourceView(
            manifest_json=json.dumps(manifest).encode(), namespace="default", name="r1",
            uid="u1", created_at=0.0, version=1, resource_version=1,
        )  # fmt: skip

    assert sn._restore_claim(restore_view(), "disk0") == "restore-u1-disk0"
    prefixed = restore_view(volumeRestorePolicy="PrefixTargetName")
    assert sn._restore_claim(prefixed, "disk0") == "copy-disk0"
    # too long for a DNS-1035 label: the base cut, FNV-1a of the base between
    assert sn.prefixed_name("a", "b", 63) == "a-b"
    assert sn._fnv32a("a") == "e40c292c"
    long = sn.prefixed_name("a" * 60, "disk", 63)
    assert long == "a" * 49 + "-" + sn._fnv32a("a" * 60) + "-disk" and len(long) == 63
