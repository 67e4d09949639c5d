# ruff: noqa: E501  (exact KubeVirt messages are long literals)
from typing import Any

import pytest

from events.manifest import ManifestError, dump, load, yaml_documents
from events.objects import (
    MigrationPolicy,
    Status,
    StatusCause,
    StatusDetails,
    VirtualMachine,
    VirtualMachineInstance,
    VirtualMachineInstanceMigration,
)
from events.quantity import parse_quantity
from kinds.registry import REGISTRY
from tests.unit.kubevirt_examples import example_documents

DOCS = example_documents()
KINDS = {
    "VirtualMachine",
    "VirtualMachineInstance",
    "VirtualMachineInstanceMigration",
    "MigrationPolicy",
}


def test_every_kind_is_covered_by_examples() -> None:
    assert {doc["kind"] for _, doc in DOCS} == KINDS


@pytest.mark.parametrize(("name", "raw"), DOCS, ids=[n for n, _ in DOCS])
def test_example_round_trips_exactly(name: str, raw: dict[str, Any]) -> None:
    obj = REGISTRY.load(raw)
    assert dump(obj, raw) == raw
    assert obj.metadata.name == raw["metadata"]["name"]


def _by_name(name: str) -> dict[str, Any]:
    return next(doc for fname, doc in DOCS if fname == name)


def test_typed_view_captures_vmi_fields() -> None:
    vmi = load(_by_name("vmi-masquerade.yaml"), VirtualMachineInstance)
    assert parse_quantity(vmi.spec.domain.memory.guest) == 1024 * 10**6  # type: ignore[union-attr,arg-type]
    disks = vmi.spec.domain.devices.disks  # type: ignore[union-attr]
    assert [d.name for d in disks or []] == ["containerdisk", "cloudinitdisk"]
    assert disks and disks[0].disk and disks[0].disk.bus == "virtio"
    iface = vmi.spec.domain.devices.interfaces[0]  # type: ignore[union-attr,index]
    assert iface.masquerade == {} and iface.ports and iface.ports[0].port == 80
    volumes = vmi.spec.volumes or []
    assert volumes[0].container_disk is not None
    assert volumes[1].cloud_init_no_cloud and "nginx" in (
        volumes[1].cloud_init_no_cloud.user_data or ""
    )
    assert volumes[1].cloud_init_no_cloud.network_data
    assert vmi.spec.networks and vmi.spec.networks[0].pod is not None
    assert vmi.spec.termination_grace_period_seconds == 0


def test_typed_view_captures_vm_migration_policy_fields() -> None:
    vm = load(_by_name("vm-cirros.yaml"), VirtualMachine)
    assert vm.spec.run_strategy == "Halted"
    assert vm.spec.template.metadata and vm.spec.template.metadata.labels == {
        "kubevirt.io/vm": "vm-cirros"
    }
    assert (
        vm.spec.template.spec.domain.memory and vm.spec.template.spec.domain.memory.guest == "128Mi"
    )
    pvc = load(_by_name("vmi-pvc.yaml"), VirtualMachineInstance).spec.volumes[0]  # type: ignore[index]
    assert pvc.persistent_volume_claim and pvc.persistent_volume_claim.claim_name == "disk-alpine"
    empty = load(_by_name("vmi-nocloud.yaml"), VirtualMachineInstance).spec.volumes[2]  # type: ignore[index]
    assert empty.empty_disk and empty.empty_disk.capacity == "2Gi"
    mig = load(_by_name("migration-job.yaml"), VirtualMachineInstanceMigration)
    assert mig.spec.vmi_name == "vmi-migratable"
    policy = load(_by_name("example-migration-policy.yaml"), MigrationPolicy)
    assert policy.spec.bandwidth_per_migration == "2000Mi"
    assert policy.spec.completion_timeout_per_gib == 123456789
    assert policy.spec.selectors and policy.spec.selectors.namespace_selector == {
        "namespace-key": "namespace-value"
    }


def test_unknown_fields_survive_at_any_depth_and_typed_values_win() -> None:
    raw: dict[str, Any] = {
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachineInstance",
        "metadata": {"name": "x", "somethingNew": {"a": 1}},
        "spec": {
            "domain": {
                "devices": {"disks": [{"name": "d", "disk": {"bus": "virtio", "ioThread": 7}}]},
                "launchSecurity": {"sev": {}},
            },
            "volumes": [{"name": "d", "containerDisk": {"image": "i"}}],
            "readinessProbe": {"tcpSocket": {"port": 22}},
        },
    }
    vmi = load(raw, VirtualMachineInstance)
    vmi.spec.domain.devices.disks[0].disk.bus = "sata"  # type: ignore[union-attr,index]
    out = dump(vmi, raw)
    assert out["metadata"]["somethingNew"] == {"a": 1}
    assert out["spec"]["domain"]["launchSecurity"] == {"sev": {}}
    assert out["spec"]["readinessProbe"] == {"tcpSocket": {"port": 22}}
    assert out["spec"]["domain"]["devices"]["disks"][0]["disk"] == {"bus": "sata", "ioThread": 7}
    assert raw["spec"]["domain"]["devices"]["disks"][0]["disk"]["bus"] == "virtio"  # not mutated


def test_lists_of_different_length_take_the_typed_value() -> None:
    raw = {
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachineInstance",
        "metadata": {"name": "x"},
        "spec": {"domain": {}, "volumes": [{"name": "a", "x": 1}]},
    }
    vmi = load(raw, VirtualMachineInstance)
    vmi.spec.volumes = []
    assert dump(vmi, raw)["spec"]["volumes"] == []


def test_load_is_strict_about_types() -> None:
    raw = {"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachine", "metadata": {"name": 5}}
    with pytest.raises(ManifestError, match=r"metadata\.name"):
        REGISTRY.load(raw)


def test_the_registry_types_documents_by_group_and_kind() -> None:
    assert (
        REGISTRY.object_type({"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachine"})
        is VirtualMachine
    )
    assert REGISTRY.object_type({"apiVersion": "v1", "kind": "Status"}) is Status
    with pytest.raises(ManifestError):
        REGISTRY.object_type({"apiVersion": "apps/v1", "kind": "Deployment"})


def test_yaml_documents_skips_empty_and_keeps_timestamps_as_strings() -> None:
    text = "---\n---\napiVersion: v1\nkind: Node\nmetadata:\n  name: n\n  creationTimestamp: 2024-01-02T03:04:05Z\n---\n"
    docs = yaml_documents(text)
    assert len(docs) == 1
    assert docs[0]["metadata"]["creationTimestamp"] == "2024-01-02T03:04:05Z"
    with pytest.raises(ManifestError):
        yaml_documents("- a\n- b\n")


def test_status_cause_uses_kubernetes_json_key_reason() -> None:
    status = Status(
        message="m",
        reason="Invalid",
        code=422,
        details=StatusDetails(
            causes=[StatusCause(type="FieldValueInvalid", message="x", field="f")]
        ),
    )
    out = dump(status)
    assert out["kind"] == "Status" and out["apiVersion"] == "v1" and out["status"] == "Failure"
    assert out["details"]["causes"] == [
        {"reason": "FieldValueInvalid", "message": "x", "field": "f"}
    ]
