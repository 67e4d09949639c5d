"""Storage on plain data: the bundled classes; a shared (Immediate) claim binds at once
with its volume; a local (WaitForFirstConsumer) claim binds where its first VMI is
scheduled and pins later VMIs there; a missing claim keeps the VMI Pending with
KubeVirt's message; a claim in use keeps its protection finalizer until its VMI ended,
then it and its volume go; RWO claims are not live-migratable, RWX ones are; a VM's
dataVolumeTemplates make DataVolumes whose claims are filled by an import on a node,
and its VMI waits for them; the admission rules."""

from __future__ import annotations

import copy
from typing import Any

from events.catalog import (
    Event,
    ImportFinished,
    ImportProgressed,
    ImportRequested,
    MetadataChanged,
    PodScheduled,
    ResourceCreated,
    ResourceDeleted,
    Unschedulable,
    VolumeReclaimed,
    VolumeReclaimRequested,
)
from events.envelope import Stored
from events.meta import CLUSTER_SCOPE, Aggregate, Kind, ResourceKind
from events.objects import DataVolume, ObjectMeta, PersistentVolumeClaim
from kinds import storage as storage_kind
from projections import claims, kube_events, storage
from projections.migratability import live_migratable
from projections.views import ResourceView
from services.handler import reclaim
from tests.factories import meta, vm_manifest
from tests.unit.test_controller_world import World, of

RWO, RWX = ["ReadWriteOnce"], ["ReadWriteMany"]


def claim_manifest(name: str, modes: list[str], klass: str, size: str = "2Gi") -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {
            "name": name,
            "namespace": "default",
            "uid": f"uid-{name}",
            "finalizers": [storage.PVC_PROTECTION],
        },
        "spec": {
            "accessModes": modes,
            "resources": {"requests": {"storage": size}},
            "storageClassName": klass,
            "volumeMode": "Filesystem",
        },
    }


def world(*nodes: str) -> World:
    w = World()
    for node in nodes or ("node-1",):
        w.given(w.node_joined(node))
    for body in storage_kind.CLASSES:
        name = body["metadata"]["name"]
        m = copy.deepcopy(body)
        m["metadata"]["uid"] = f"uid-sc-{name}"
        at = meta(ResourceKind.STORAGE_CLASS, name, CLUSTER_SCOPE)
        w.given(ResourceCreated(meta=at, manifest=m))
    return w


def make_claim(w: World, name: str, modes: list[str], klass: str) -> list[Event]:
    return w.run(
        ResourceCreated(
            meta=w.m(ResourceKind.PVC, name), manifest=claim_manifest(name, modes, klass)
        )
    )


def claim(w: World, name: str) -> ResourceView:
    return w.state.cluster.resources[ResourceKind.PVC][f"default/{name}"]


def with_claims(*claims: str) -> dict[str, Any]:
    volumes = [
        {"name": f"v{i}", "persistentVolumeClaim": {"claimName": c}} for i, c in enumerate(claims)
    ]
    return {"volumes": volumes}


def test_the_bundled_classes_a_default_local_one_and_a_shared_one() -> None:
    w = world()
    default = storage.default_class(w.state.cluster)
    assert default is not None and default.name == storage.LOCAL
    assert storage.binding_mode(default) == storage.WFFC
    shared = storage.find_class(w.state.cluster, storage.SHARED)
    assert shared is not None and storage.is_shared(shared)
    assert storage.binding_mode(shared) == storage.IMMEDIATE
    assert all(c["allowVolumeExpansion"] and c["reclaimPolicy"] for c in storage_kind.CLASSES)


def test_a_shared_claim_binds_at_once_with_its_volume() -> None:
    w = world()
    make_claim(w, "data", RWX, storage.SHARED)
    c = claim(w, "data")
    assert c.status == {
        "phase": "Bound",
        "accessModes": RWX,
        "capacity": {"storage": "2Gi"},
    }
    assert c.spec["volumeName"] == "pvc-uid-data"
    pv = w.state.cluster.resources[ResourceKind.PV]["pvc-uid-data"]
    assert pv.spec["claimRef"]["name"] == "data" and pv.spec["capacity"] == {"storage": "2Gi"}
    assert "hostPath" in pv.spec and "nodeAffinity" not in pv.spec
    assert pv.spec["persistentVolumeReclaimPolicy"] == "Delete"


def test_a_local_claim_waits_for_its_first_consumer_and_pins_later_ones() -> None:
    w = world("node-1", "node-2")
    make_claim(w, "data", RWO, storage.LOCAL)
    assert claim(w, "data").status == {"phase": "Pending"}
    # node-1 holds more memory, so the first VMI lands on node-2
    w.run(w.vmi_created("busy", memory="8Gi"))
    busy = w.vmi("busy")
    assert busy is not None
    first = "node-2" if busy.node == "node-1" else "node-1"
    w.run(w.vmi_created("a", spec=with_claims("data")))
    a = w.vmi("a")
    assert a is not None and a.node == first
    c = claim(w, "data")
    assert c.status["phase"] == "Bound"
    assert storage.claim_node(c) == first
    pv = w.state.cluster.resources[ResourceKind.PV]["pvc-uid-data"]
    terms = pv.spec["nodeAffinity"]["required"]["nodeSelectorTerms"]
    assert terms[0]["matchExpressions"][0]["values"] == [first]
    # a later VMI on the claim goes where the disk is, whatever the load says
    w.run(w.vmi_created("b", memory="4Gi", spec=with_claims("data")))
    b = w.vmi("b")
    assert b is not None and b.node == first


def test_a_missing_claim_keeps_the_vmi_pending_with_kubevirts_message() -> None:
    w = world()
    out = w.run(w.vmi_created("a", spec=with_claims("nope")))
    [unschedulable] = of(out, Unschedulable)
    assert unschedulable.message == "PVC default/nope does not exist, waiting for it to appear"
    assert not of(out, PodScheduled)
    assert storage.printable(unschedulable.message) == "ErrorPvcNotFound"  # the VM's status
    out = make_claim(w, "nope", RWO, storage.LOCAL)
    assert of(out, PodScheduled)


def test_a_claim_in_use_keeps_its_finalizer_until_its_vmi_ended() -> None:
    w = world()
    make_claim(w, "data", RWO, storage.LOCAL)
    w.run(w.vmi_created("a", spec=with_claims("data")))
    w.start_running("a")
    fins = {"finalizers": [storage.PVC_PROTECTION]}
    deleting = MetadataChanged(meta=w.m(ResourceKind.PVC, "data"), metadata=fins, deletion=True)
    out = w.run(deleting)
    assert not of(out, ResourceDeleted)
    assert storage.deleting(claim(w, "data"))
    out = w.stop_guest("a")
    assert "default/data" not in w.state.cluster.resources[ResourceKind.PVC]
    # reclaim policy Delete: the node holding the disk deletes it, then the PV goes
    [asked] = of(out, VolumeReclaimRequested)
    assert (asked.meta.node, asked.namespace, asked.claim) == ("node-1", "default", "data")
    assert "pvc-uid-data" in w.state.cluster.resources[ResourceKind.PV]
    pv_meta = meta(ResourceKind.PV, "pvc-uid-data", CLUSTER_SCOPE)
    out = w.run(VolumeReclaimed(meta=pv_meta))
    assert "pvc-uid-data" not in w.state.cluster.resources[ResourceKind.PV]
    assert of(out, ResourceDeleted)


def test_a_volume_whose_disk_cannot_be_deleted_fails_and_says_why() -> None:
    """Kubernetes' deleter: the PV stays, phase Failed, a VolumeFailedDelete Event."""
    w = world()
    make_claim(w, "data", RWO, storage.LOCAL)
    w.run(w.vmi_created("a", spec=with_claims("data")))
    w.start_running("a")
    w.run(ResourceDeleted(meta=w.m(ResourceKind.PVC, "data")))
    pv_meta = meta(ResourceKind.PV, "pvc-uid-data", CLUSTER_SCOPE)
    failed = VolumeReclaimed(meta=pv_meta, error="unable to delete /x: Permission denied")
    w.run(failed)
    pv = w.state.cluster.resources[ResourceKind.PV]["pvc-uid-data"]
    assert pv.status == {"phase": "Failed", "message": "unable to delete /x: Permission denied"}
    found = kube_events.occurrences(w.log[-2], w.state.cluster)
    assert [(o.type, o.reason, o.involved.kind) for o in found] == [
        ("Warning", "VolumeFailedDelete", "PersistentVolume")
    ]


def test_the_handler_deletes_a_disk_once_per_request_and_answers_it() -> None:
    asked: set[str] = set()
    pv = Aggregate(kind=ResourceKind.PV, namespace=CLUSTER_SCOPE, name="pvc-u")
    request = VolumeReclaimRequested(
        meta=meta(ResourceKind.PV, "pvc-u", CLUSTER_SCOPE, node="node-1", event_id="c/1"),
        namespace="default",
        claim="data",
    )
    stored = Stored(seq=7, subject="", time=0.0, event=request)
    first = reclaim.plan(asked, stored)
    assert [type(o).__name__ for o in first] == ["DeleteDisk", "Note"]
    reclaim.observe(asked, first[1].observation)  # type: ignore[union-attr]
    assert reclaim.plan(asked, stored) == []  # decided again: asked once
    delete = first[0]
    assert isinstance(delete, reclaim.DeleteDisk) and delete.claim == "data"
    done = reclaim.DiskDeleted(pv, delete.cause)
    answer = reclaim.answer(done, "node-1", "virt-handler-node-1", 5.0)
    assert answer.error == "" and answer.meta.node == "node-1"
    assert answer.meta.causation_id == "c/1" and answer.meta.causation_seq == 7
    reclaim.observe(asked, done)
    assert asked == set()


def test_rwo_claims_are_not_live_migratable_rwx_ones_are() -> None:
    w = world()
    make_claim(w, "rwo", RWO, storage.LOCAL)
    make_claim(w, "rwx", RWX, storage.SHARED)
    c = w.state.cluster
    ok, reason, message = live_migratable(
        {"metadata": {"namespace": "default"}, "spec": with_claims("rwo")}, c
    )
    assert (ok, reason) == (False, "DisksNotLiveMigratable")
    assert message == (
        "cannot migrate VMI: PVC rwo is not shared, live migration requires that all PVCs "
        "must be shared (using ReadWriteMany access mode)"
    )
    assert live_migratable({"metadata": {"namespace": "default"}, "spec": with_claims("rwx")}, c)[0]


def dv_vm(strategy: str = "Always") -> dict[str, Any]:
    m = vm_manifest("vm1", strategy)
    m["spec"]["dataVolumeTemplates"] = [
        {
            "metadata": {"name": "vm1-root"},
            "spec": {
                "storage": {"resources": {"requests": {"storage": "3Gi"}}},
                "source": {"http": {"url": "http://127.0.0.1:1/disk.qcow2"}},
            },
        }
    ]
    m["spec"]["template"]["spec"]["volumes"] = [
        {"name": "root", "dataVolume": {"name": "vm1-root"}}
    ]
    return m


def test_a_vms_data_volume_is_imported_before_its_vmi_is_scheduled() -> None:
    w = world()
    from events.catalog import VMCreated

    out = w.run(VMCreated(meta=w.m(Kind.VM, "vm1"), manifest=dv_vm()))
    cluster = w.state.cluster
    dv = cluster.resources[ResourceKind.DATA_VOLUME]["default/vm1-root"]
    assert dv.manifest["metadata"]["ownerReferences"][0]["uid"] == "uid-vm1"
    c = claim(w, "vm1-root")
    assert c.manifest["metadata"]["ownerReferences"][0]["kind"] == "DataVolume"
    notes = storage.annotations_of(c)
    assert notes["cdi.kubevirt.io/storage.import.endpoint"] == "http://127.0.0.1:1/disk.qcow2"
    assert c.status["phase"] == "Bound" and storage.claim_node(c) == "node-1"
    [request] = of(out, ImportRequested)
    assert request.meta.node == "node-1" and request.size == "3Gi"
    assert dv.status["phase"] == "ImportScheduled"
    assert not of(out, PodScheduled)  # the VMI waits for its disk
    vmi = w.vmi()
    assert vmi is not None and "DataVolume default/vm1-root is not ready" in vmi.unschedulable
    assert storage.printable(vmi.unschedulable) == "Provisioning"
    at = w.m(ResourceKind.DATA_VOLUME, "vm1-root", "node-1")
    w.run(ImportProgressed(meta=at, progress="45.20%"))
    dv = cluster.resources[ResourceKind.DATA_VOLUME]["default/vm1-root"]
    assert (dv.status["phase"], dv.status["progress"]) == ("ImportInProgress", "45.20%")
    notes = storage.annotations_of(claim(w, "vm1-root"))
    assert notes["cdi.kubevirt.io/storage.pod.phase"] == "Running"
    out = w.run(ImportFinished(meta=w.m(ResourceKind.DATA_VOLUME, "vm1-root", "node-1")))
    dv = cluster.resources[ResourceKind.DATA_VOLUME]["default/vm1-root"]
    assert dv.status["phase"] == "Succeeded" and dv.status["progress"] == "100.0%"
    conditions = {c["type"]: (c["status"], c["reason"]) for c in dv.status["conditions"]}
    assert conditions == {
        "Bound": ("True", "Bound"),
        "Ready": ("True", ""),
        "Running": ("False", "Completed"),
    }
    notes = storage.annotations_of(claim(w, "vm1-root"))
    assert notes["cdi.kubevirt.io/storage.pod.phase"] == "Succeeded"
    assert notes["cdi.kubevirt.io/storage.condition.running.reason"] == "Completed"
    [scheduled] = of(out, PodScheduled)
    assert scheduled.node == "node-1"
    # the pod's copy of the VMI carries the claim's size (the launcher's disk)
    assert claims.sizes_of(scheduled.manifest) == {"vm1-root": "3Gi"}


def test_a_tick_after_it_all_settled_decides_only_duplicates() -> None:
    w = world()
    make_claim(w, "data", RWX, storage.SHARED)
    make_claim(w, "local", RWO, storage.LOCAL)
    from events.catalog import VMCreated

    w.run(VMCreated(meta=w.m(Kind.VM, "vm1"), manifest=dv_vm()))
    assert all(e.meta.event_id in w.ids for e in w.tick())


# ------------------------------------------------------------------ admission
def typed_claim(**spec: Any) -> PersistentVolumeClaim:
    return PersistentVolumeClaim(metadata=ObjectMeta(name="c", namespace="default"), spec=spec)


def test_a_claim_is_defaulted_and_protected() -> None:
    w = world()
    typed, causes = storage_kind._admit_claim(
        w.state.cluster,
        typed_claim(accessModes=RWO, resources={"requests": {"storage": "1Gi"}}),
        "uid-new",
    )
    assert causes == []
    assert typed.spec["storageClassName"] == storage.LOCAL
    assert typed.spec["volumeMode"] == "Filesystem"
    assert typed.metadata.finalizers == [storage.PVC_PROTECTION]


def test_a_claim_without_size_or_modes_and_rwx_on_local_are_refused() -> None:
    w = world()
    _, causes = storage_kind._admit_claim(w.state.cluster, typed_claim(), "u")
    assert {c.field for c in causes} == {"spec.accessModes", "spec.resources[storage]"}
    _, causes = storage_kind._admit_claim(
        w.state.cluster,
        typed_claim(accessModes=RWX, resources={"requests": {"storage": "1Gi"}}),
        "u",
    )
    assert [c.field for c in causes] == ["spec.accessModes"]


def test_a_data_volume_needs_a_source() -> None:
    typed = DataVolume(metadata=ObjectMeta(name="d"), spec={"storage": {}})
    _, causes = storage_kind._admit_dv(world().state.cluster, typed, "u")
    assert causes[0].message == (
        "Data volume should have either Source or SourceRef, or be externally populated"
    )


def test_a_data_volume_from_a_data_source_clones_its_claim() -> None:
    w = world()
    make_claim(w, "golden", RWX, storage.SHARED)
    ds = {
        "apiVersion": "cdi.kubevirt.io/v1beta1",
        "kind": "DataSource",
        "metadata": {"name": "fedora", "namespace": "default", "uid": "uid-ds"},
        "spec": {"source": {"pvc": {"namespace": "default", "name": "golden"}}},
    }
    w.run(ResourceCreated(meta=w.m(ResourceKind.DATA_SOURCE, "fedora"), manifest=ds))
    source = w.state.cluster.resources[ResourceKind.DATA_SOURCE]["default/fedora"]
    [ready] = source.status["conditions"]
    assert (ready["type"], ready["status"], ready["reason"]) == ("Ready", "True", "Ready")
    dv = {
        "apiVersion": "cdi.kubevirt.io/v1beta1",
        "kind": "DataVolume",
        "metadata": {"name": "from-ds", "namespace": "default", "uid": "uid-dv"},
        "spec": {
            "sourceRef": {"kind": "DataSource", "name": "fedora"},
            "storage": {"resources": {"requests": {"storage": "2Gi"}}},
        },
    }
    out = w.run(ResourceCreated(meta=w.m(ResourceKind.DATA_VOLUME, "from-ds"), manifest=dv))
    [request] = of(out, ImportRequested)
    assert request.source == {"pvc": {"namespace": "default", "name": "golden"}}
    notes = storage.annotations_of(claim(w, "from-ds"))
    assert notes["k8s.io/CloneRequest"] == "default/golden"


def test_a_bound_claim_grows_and_never_shrinks() -> None:
    from events.catalog import ResourceUpdated

    w = world()
    make_claim(w, "data", RWX, storage.SHARED)
    bigger = copy.deepcopy(claim(w, "data").manifest)
    bigger["spec"]["resources"]["requests"]["storage"] = "5Gi"
    w.run(ResourceUpdated(meta=w.m(ResourceKind.PVC, "data"), manifest=bigger))
    assert claim(w, "data").status["capacity"] == {"storage": "5Gi"}
    smaller = PersistentVolumeClaim(
        metadata=ObjectMeta(name="data", namespace="default"),
        spec={**bigger["spec"], "resources": {"requests": {"storage": "1Gi"}}},
    )
    _, causes = storage_kind._admit_claim(w.state.cluster, smaller, "uid-data")
    assert [c.message for c in causes] == ["Forbidden: field can not be less than previous value"]
    changed = PersistentVolumeClaim(
        metadata=ObjectMeta(name="data", namespace="default"),
        spec={**bigger["spec"], "accessModes": RWO},
    )
    _, causes = storage_kind._admit_claim(w.state.cluster, changed, "uid-data")
    assert causes[0].message.startswith("Forbidden: spec is immutable after creation")


def test_a_vmi_waiting_for_a_claim_being_deleted_does_not_hold_it() -> None:
    w = world()
    make_claim(w, "data", RWX, storage.SHARED)
    fins = {"finalizers": [storage.PVC_PROTECTION]}
    claim_view = claim(w, "data")
    w.given(MetadataChanged(meta=w.m(ResourceKind.PVC, "data"), metadata=fins, deletion=True))
    assert claim_view.uid == claim(w, "data").uid
    out = w.run(w.vmi_created("a", spec=with_claims("data")))
    assert not of(out, PodScheduled)
    assert "default/data" not in w.state.cluster.resources[ResourceKind.PVC]


def test_core_kinds_are_served_in_v1_not_slash_v1() -> None:
    """A kind of the core group renders `apiVersion: v1`, as the API server's."""
    from kinds.registry import REGISTRY

    w = world()
    body = claim_manifest("c", ["ReadWriteOnce"], "local")
    w.run(ResourceCreated(meta=w.m(ResourceKind.PVC, "c"), manifest=body))
    spec = REGISTRY.resource("persistentvolumeclaims")
    assert spec.render(w.state.cluster, claim(w, "c"), 0.0)["apiVersion"] == "v1"
    sc = REGISTRY.resource("storageclasses")
    local = w.state.cluster.resources[ResourceKind.STORAGE_CLASS]["local"]
    assert sc.render(w.state.cluster, local, 0.0)["apiVersion"] == "storage.k8s.io/v1"
