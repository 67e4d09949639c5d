"""Instance types and preferences: KubeVirt's VM admission (missing ones, conflicts), the
pure apply, and the controller recording the revision a VM runs with."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import pytest

from core import intents
from core.context import Outcome, RequestContext
from core.errors import ApiError
from events.catalog import (
    Event,
    ResourceCreated,
    ResourceUpdated,
    VMICreated,
    VMRevisionRecorded,
)
from events.envelope import Stored
from events.manifest import yaml_documents
from events.meta import CLUSTER_SCOPE, Kind, ResourceKind
from kinds.registry import REGISTRY
from projections import instancetype as it
from projections.cluster import Cluster
from tests.factories import meta, with_namespaces
from tests.unit.test_controller_world import World

_ids = itertools.count(1)
BUNDLED = Path(__file__).resolve().parents[2] / "kinds" / "bundled"


def ctx() -> RequestContext:
    return RequestContext(
        now=1000.0,
        correlation_id="req-1",
        new_id=lambda: f"{next(_ids):032x}",
        suffix=lambda: "abcde",
    )


def small(cpu: int = 1, memory: str = "2Gi", name: str = "u1.small") -> dict[str, Any]:
    return {
        "apiVersion": "instancetype.kubevirt.io/v1beta1",
        "kind": "VirtualMachineClusterInstancetype",
        "metadata": {"name": name, "uid": f"uid-{name}"},
        "spec": {"cpu": {"guest": cpu}, "memory": {"guest": memory}},
    }


def fedora() -> dict[str, Any]:
    return next(
        d
        for d in yaml_documents((BUNDLED / "preferences.yaml").read_text())
        if d["metadata"]["name"] == "fedora"
    )


def vm_body(domain: dict[str, Any] | None = None, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachine",
        "metadata": {"name": "vm1", "namespace": "default"},
        "spec": {
            "runStrategy": "Halted",
            "instancetype": {"name": "u1.small"},
            **spec,
            "template": {
                "spec": {
                    "domain": domain or {"devices": {}},
                    "volumes": [{"name": "root", "containerDisk": {"image": "quay.io/x/fedora"}}],
                }
            },
        },
    }


def cluster_with(*docs: dict[str, Any]) -> Cluster:
    c = with_namespaces()
    for d in docs:
        kind = (
            ResourceKind.CLUSTER_INSTANCETYPE
            if "Instancetype" in d["kind"]
            else ResourceKind.CLUSTER_PREFERENCE
        )
        ev = ResourceCreated(meta=meta(kind, d["metadata"]["name"], CLUSTER_SCOPE), manifest=d)
        c.apply(Stored(seq=c.last_seq + 1, subject="", time=0.0, event=ev))
    return c


def create_vm(c: Cluster, body: dict[str, Any]) -> Outcome:
    return intents.create(c, REGISTRY.resource("vm"), "default", body, ctx())


def causes(exc: pytest.ExceptionInfo[ApiError]) -> list[tuple[str, str, str]]:
    details = exc.value.status.details
    assert details is not None
    return [(c.type, c.message, c.field) for c in details.causes or []]


def test_a_vm_naming_a_missing_instance_type_is_refused() -> None:
    with pytest.raises(ApiError) as exc:
        create_vm(with_namespaces(), vm_body())
    assert exc.value.status.code == 422
    assert causes(exc) == [
        (
            "FieldValueNotFound",
            "Failure to find instancetype: virtualmachineclusterinstancetypes"
            '.instancetype.kubevirt.io "u1.small" not found',
            "spec.instancetype",
        )
    ]


def test_a_vm_naming_a_missing_preference_is_refused() -> None:
    with pytest.raises(ApiError) as exc:
        create_vm(cluster_with(small()), vm_body(preference={"name": "fedora"}))
    assert causes(exc)[0][1] == (
        "Failure to find preference: virtualmachineclusterpreferences"
        '.instancetype.kubevirt.io "fedora" not found'
    )


def test_a_vm_field_the_instance_type_owns_conflicts() -> None:
    with pytest.raises(ApiError) as exc:
        create_vm(cluster_with(small()), vm_body({"cpu": {"sockets": 2}, "devices": {}}))
    field = "spec.template.spec.domain.cpu.sockets"
    assert causes(exc) == [
        ("FieldValueInvalid", f"VM field(s) {field} conflicts with selected instance type", field)
    ]
    assert "admission webhook" in exc.value.status.message


def test_a_memory_request_conflicts_too() -> None:
    body = vm_body({"resources": {"requests": {"memory": "1Gi"}}, "devices": {}})
    with pytest.raises(ApiError) as exc:
        create_vm(cluster_with(small()), body)
    assert causes(exc)[0][2] == "spec.template.spec.domain.resources.requests.memory"


def test_a_vm_with_instance_type_and_preference_is_admitted_without_cpu_defaults() -> None:
    out = create_vm(cluster_with(small(), fedora()), vm_body(preference={"name": "fedora"}))
    manifest = out.appends[0].event.manifest  # type: ignore[attr-defined]
    domain = manifest["spec"]["template"]["spec"]["domain"]
    assert "cpu" not in domain and "memory" not in domain
    assert manifest["spec"]["instancetype"]["kind"] == "VirtualMachineClusterInstancetype"
    assert manifest["spec"]["preference"]["kind"] == "VirtualMachineClusterPreference"
    assert domain["devices"]["disks"][0]["disk"]["bus"] == "virtio"  # the preference's


def test_the_interface_the_defaults_add_takes_the_preferences_model_at_once() -> None:
    # else the VM's next update adds it: Ansible's kubevirt_vm run again reports a change
    out = create_vm(cluster_with(small(), fedora()), vm_body(preference={"name": "fedora"}))
    manifest = out.appends[0].event.manifest  # type: ignore[attr-defined]
    [iface] = manifest["spec"]["template"]["spec"]["domain"]["devices"]["interfaces"]
    assert iface == {"name": "default", "masquerade": {}, "model": "virtio"}
    again = create_vm(cluster_with(small(), fedora()), manifest)
    assert again.appends[0].event.manifest["spec"] == manifest["spec"]  # type: ignore[attr-defined]


def test_apply_sizes_the_vmi_and_preferences_fill_only_what_is_unset() -> None:
    spec = {"domain": {"devices": {"interfaces": [{"name": "a", "model": "e1000"}]}}}
    pref = {
        "devices": {"preferredInterfaceModel": "virtio"},
        "cpu": {"preferredCPUTopology": "cores"},
    }
    out = it.apply({"cpu": {"guest": 4}, "memory": {"guest": "8Gi"}}, pref, spec)
    assert out["domain"]["cpu"] == {"sockets": 1, "cores": 4, "threads": 1}
    assert out["domain"]["memory"] == {"guest": "8Gi"}
    assert out["domain"]["devices"]["interfaces"][0]["model"] == "e1000"
    assert spec == {"domain": {"devices": {"interfaces": [{"name": "a", "model": "e1000"}]}}}


def test_the_bundled_catalogue_has_the_common_series_and_preferences() -> None:
    types = yaml_documents((BUNDLED / "instancetypes.yaml").read_text())
    names = {d["metadata"]["name"] for d in types}
    assert {"u1.small", "u1.medium", "o1.large", "cx1.medium", "m1.large", "n1.medium"} <= names
    prefs = {
        d["metadata"]["name"] for d in yaml_documents((BUNDLED / "preferences.yaml").read_text())
    }
    assert {"fedora", "ubuntu", "cirros", "alpine"} <= prefs
    for d in types:
        assert REGISTRY.get(d["kind"]) is not None


# ------------------------------------------------------------------ controller
def _world_with_vm() -> tuple[World, Event]:
    w = World()
    with_namespaces(cluster=w.state.cluster)
    w.given(w.node_joined("node-1"))
    for d in (small(), fedora()):
        kind = (
            ResourceKind.CLUSTER_INSTANCETYPE
            if "Instancetype" in d["kind"]
            else ResourceKind.CLUSTER_PREFERENCE
        )
        w.given(ResourceCreated(meta=meta(kind, d["metadata"]["name"], CLUSTER_SCOPE), manifest=d))
    out = create_vm(w.state.cluster, vm_body(preference={"name": "fedora"}))
    created = out.appends[0].event
    created.manifest["spec"]["runStrategy"] = "Always"  # type: ignore[attr-defined]
    return w, created


def test_the_controller_records_the_revision_and_sizes_the_vmi() -> None:
    w, created = _world_with_vm()
    appended = w.run(created)
    recorded = [e for e in appended if isinstance(e, VMRevisionRecorded)]
    assert len(recorded) == 1 and recorded[0].instancetype is not None
    assert recorded[0].instancetype["revisionName"] == "vm1-u1.small-uid-u1.small-1"
    vmi = next(e for e in appended if isinstance(e, VMICreated))
    domain = vmi.manifest["spec"]["domain"]
    assert domain["cpu"] == {"sockets": 1, "cores": 1, "threads": 1}
    assert domain["memory"]["guest"] == "2Gi"
    rendered = REGISTRY.render_object(w.state.cluster, Kind.VM, "default/vm1", 0.0)
    assert rendered is not None
    assert rendered["spec"]["instancetype"]["revisionName"] == "vm1-u1.small-uid-u1.small-1"
    assert rendered["status"]["instancetypeRef"]["controllerRevisionRef"] == {
        "name": "vm1-u1.small-uid-u1.small-1"
    }


def test_a_changed_instance_type_does_not_change_a_vm_that_recorded_its_revision() -> None:
    w, created = _world_with_vm()
    w.run(created)
    bigger = small(cpu=4, memory="8Gi")
    w.given(
        ResourceUpdated(
            meta=meta(ResourceKind.CLUSTER_INSTANCETYPE, "u1.small", CLUSTER_SCOPE), manifest=bigger
        )
    )
    w.state.cluster.vmis.pop("default/vm1")  # the VMI is gone (a restart)
    vm = w.vm()
    w.state.cluster.vms["default/vm1"] = type(vm)(
        **{**{f: getattr(vm, f) for f in vm.__struct_fields__}, "vmi_uid": ""}
    )
    again = [e for e in w.tick() if isinstance(e, VMICreated)]
    assert again and again[0].manifest["spec"]["domain"]["memory"]["guest"] == "2Gi"
