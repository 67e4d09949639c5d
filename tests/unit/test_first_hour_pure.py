"""The pure parts of a newcomer's first hour: unknown-field paths, an update that changes
nothing, kubectl's quantities, the verbs' kinds from the registry, references."""

from __future__ import annotations

import pytest

from cli import verbs
from core import intents
from events.meta import CLUSTER_SCOPE, Aggregate, Kind
from events.objects import VirtualMachine
from events.unknown_fields import unknown_fields
from kinds import vm
from kinds.columns import binary_quantity
from kinds.registry import REGISTRY
from projections.replay import RefError
from tests.factories import vm_manifest, with_namespaces
from tests.unit.test_api_intents import ctx, fold


def test_unknown_fields_are_paths_in_document_order() -> None:
    doc = {
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachine",
        "metadata": {"name": "x", "labels": {"any": "key"}, "frob": 1},
        "spec": {
            "frobnicate": True,
            "template": {"spec": {
                "domain": {"devices": {"disks": [{"name": "a"}, {"name": "b", "x": 2}]}},
                "volumes": [{"name": "a", "containerDisk": {"image": "i", "y": 3}}],
            }},
        },
    }  # fmt: skip
    assert unknown_fields(doc, VirtualMachine) == [
        "metadata.frob",
        "spec.frobnicate",
        "spec.template.spec.domain.devices.disks[1].x",
        "spec.template.spec.volumes[0].containerDisk.y",
    ]
    assert unknown_fields({"spec": {"runStrategy": "Always"}}, VirtualMachine) == []


# Every field of KubeVirt's VMI spec, domain and devices (kubevirt.io/v1): a manifest that
# uses any of them is not warned about, and kubectl's strict validation (fed by the same
# schema through /openapi) does not refuse it.
KUBEVIRT_SPEC_FIELDS = [
    "priorityClassName",
    "domain",
    "nodeSelector",
    "affinity",
    "schedulerName",
    "serviceAccountName",
    "tolerations",
    "topologySpreadConstraints",
    "evictionStrategy",
    "startStrategy",
    "terminationGracePeriodSeconds",
    "volumes",
    "livenessProbe",
    "readinessProbe",
    "hostname",
    "subdomain",
    "networks",
    "dnsPolicy",
    "dnsConfig",
    "accessCredentials",
    "architecture",
    "resourceClaims",
    "utilityVolumes",
]
KUBEVIRT_DOMAIN_FIELDS = [
    "resources",
    "cpu",
    "memory",
    "machine",
    "firmware",
    "clock",
    "features",
    "devices",
    "ioThreadsPolicy",
    "ioThreads",
    "chassis",
    "launchSecurity",
    "rebootPolicy",
]
KUBEVIRT_DEVICES_FIELDS = [
    "useVirtioTransitional",
    "disableHotplug",
    "disks",
    "watchdog",
    "interfaces",
    "inputs",
    "autoattachPodInterface",
    "autoattachGraphicsDevice",
    "autoattachSerialConsole",
    "logSerialConsole",
    "autoattachMemBalloon",
    "autoattachInputDevice",
    "autoattachVSOCK",
    "rng",
    "blockMultiQueue",
    "networkInterfaceMultiqueue",
    "gpus",
    "downwardMetrics",
    "panicDevices",
    "filesystems",
    "hostDevices",
    "clientPassthrough",
    "sound",
    "tpm",
    "video",
]
KUBEVIRT_DISK_FIELDS = [
    "name",
    "disk",
    "lun",
    "cdrom",
    "bootOrder",
    "serial",
    "dedicatedIOThread",
    "cache",
    "io",
    "tag",
    "blockSize",
    "shareable",
    "errorPolicy",
    "changedBlockTracking",
]


def test_every_kubevirt_spec_field_is_known() -> None:
    def spec_with(names: list[str]) -> dict[str, object]:
        return {name: None for name in names}

    devices = spec_with(KUBEVIRT_DEVICES_FIELDS)
    devices["disks"] = [spec_with(KUBEVIRT_DISK_FIELDS)]
    domain = {**spec_with(KUBEVIRT_DOMAIN_FIELDS), "devices": devices}
    spec = {**spec_with(KUBEVIRT_SPEC_FIELDS), "domain": domain}
    doc = {"spec": {"instancetype": {}, "preference": {}, "template": {"spec": spec}}}
    assert unknown_fields(doc, VirtualMachine) == []


def test_an_update_that_changes_nothing_appends_nothing() -> None:
    c = with_namespaces()
    raw = vm_manifest("vm1", "Halted", memory="64Mi")
    raw["metadata"].pop("uid")  # as a user writes it
    fold(c, intents.create(c, vm.SPEC, "default", raw, ctx()).appends[0].event)
    same = intents.update(c, vm.SPEC, "default", "vm1", raw, ctx(), updatable=())
    assert same.appends == () and same.code == 200
    changed = {**raw, "spec": {**raw["spec"], "runStrategy": "Manual"}}
    out = intents.update(c, vm.SPEC, "default", "vm1", changed, ctx(), updatable=())
    assert len(out.appends) == 1
    fold(c, out.appends[0].event)
    assert c.vms["default/vm1"].generation == 2


def test_memory_as_kubectl_prints_it() -> None:
    assert binary_quantity(1703936 * 1024) == "1664Mi"
    assert binary_quantity(2 << 30) == "2Gi"
    assert binary_quantity(0) == "0"
    assert binary_quantity(1000) == "1000"


def test_verbs_take_their_kinds_from_the_registry() -> None:
    assert [s.kind for s in verbs.kinds_for("start")] == ["VirtualMachine"]
    assert [s.kind for s in verbs.kinds_for("pause")] == [
        "VirtualMachineInstance",
        "VirtualMachine",
    ]
    assert [s.kind for s in verbs.kinds_for("drain")] == ["Node"]
    assert verbs.target("pause", "x", None).says("scheduled to pause") == (
        "VMI x was scheduled to pause"
    )
    for first, second in (("vm", "x"), ("vms/x", None), ("virtualmachine", "x")):
        t = verbs.target("pause", first, second)
        assert (t.spec.kind, t.name) == ("VirtualMachine", "x")
    with pytest.raises(ValueError, match="start acts on vm: write start NAME"):
        verbs.target("start", "vmi", "x")


def test_references_accept_the_default_namespace_and_print_as_written() -> None:
    assert REGISTRY.parse_ref("vm/x", namespace="default") == Aggregate(
        kind=Kind.VM, namespace="default", name="x"
    )
    node = REGISTRY.parse_ref("node/node-1")
    assert node == Aggregate(kind=Kind.NODE, namespace=CLUSTER_SCOPE, name="node-1")
    assert REGISTRY.ref_text(node) == "node/node-1"
    assert REGISTRY.ref_text(REGISTRY.parse_ref("vmis/ns/x")) == "vmi/ns/x"
    with pytest.raises(RefError, match="names no kind"):
        REGISTRY.parse_ref("vm-cirros", namespace="default")
    assert REGISTRY.cli_names == (
        "vms",
        "vmis",
        "vmims",
        "nodes",
        "migrationpolicies",
        "vminstancetypes",
        "vmclusterinstancetypes",
        "vmprefs",
        "vmcps",
        "vmirs",
        "vmpools",
        "vmsnapshots",
        "vmsnapshotcontents",
        "vmrestores",
        "ns",
        "vmclones",
        "vmexports",
        "secrets",
        "storageclasses",
        "persistentvolumes",
        "persistentvolumeclaims",
        "dvs",
        "das",
        "dics",
        "vmipresets",
        "services",
        "network-attachment-definitions",
        "configmaps",
    )


def test_create_vm_ssh_keys_are_virtctls_cloud_config() -> None:
    """`create vm --ssh-key KEY` (repeatable): virtctl's NoCloud volume `cloudinitdisk`
    whose cloud-config authorizes the keys (the guest's default user's: root's here)."""
    from cli.create_vm import vm_manifest as create_vm

    doc = create_vm("k", containerdisks=["src:img"], ssh_keys=["ssh-ed25519 AAA a", "ssh-rsa B b"])
    volumes = doc["spec"]["template"]["spec"]["volumes"]
    assert [v["name"] for v in volumes] == ["k-containerdisk-0", "cloudinitdisk"]
    assert volumes[1]["cloudInitNoCloud"]["userData"] == (
        "#cloud-config\nssh_authorized_keys:\n  - ssh-ed25519 AAA a\n  - ssh-rsa B b"
    )
    assert "volumes" not in create_vm("none")["spec"]["template"]["spec"]
