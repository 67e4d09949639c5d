# ruff: noqa: E501  (exact KubeVirt messages are long literals)
from typing import Any

import pytest

from core.admission import (
    default_vm,
    default_vmi,
    default_vmi_spec,
    invalid_status,
    validate_hostname,
    validate_migration,
    validate_name,
    validate_vm,
    validate_vmi,
    validate_vmi_spec,
)
from events.manifest import dump, load
from events.objects import (
    Condition,
    VirtualMachine,
    VirtualMachineInstance,
    VirtualMachineInstanceMigration,
    VirtualMachineInstanceStatus,
)
from kinds.registry import REGISTRY
from tests.unit.kubevirt_examples import example_documents

DOCS = example_documents()


@pytest.mark.parametrize(("name", "raw"), DOCS, ids=[n for n, _ in DOCS])
def test_every_example_passes_after_defaulting(name: str, raw: dict[str, Any]) -> None:
    obj = REGISTRY.load(raw)
    if isinstance(obj, VirtualMachine):
        assert validate_vm(default_vm(obj, "uuid-1")) == []
        assert validate_vm(obj) == []  # KubeVirt accepts VM templates before defaulting too
    elif isinstance(obj, VirtualMachineInstance):
        assert validate_vmi(default_vmi(obj, "uuid-1")) == []
    elif isinstance(obj, VirtualMachineInstanceMigration):
        assert validate_migration(obj) == []


def vmi(**spec: Any) -> VirtualMachineInstance:
    base: dict[str, Any] = {
        "domain": {
            "devices": {"disks": [{"name": "root", "disk": {"bus": "virtio"}}]},
            "memory": {"guest": "128Mi"},
        },
        "volumes": [{"name": "root", "containerDisk": {"image": "img"}}],
    }
    base.update(spec)
    return load(
        {
            "apiVersion": "kubevirt.io/v1",
            "kind": "VirtualMachineInstance",
            "metadata": {"name": "t"},
            "spec": base,
        },
        VirtualMachineInstance,
    )


def causes_of(obj: VirtualMachineInstance) -> list[tuple[str, str, str]]:
    return [(c.type, c.message, c.field) for c in validate_vmi_spec(obj.spec)]


# ------------------------------------------------------------------ defaults


def test_defaults_applied() -> None:
    spec = vmi(
        domain={"resources": {"requests": {"memory": "64Mi", "cpu": "1500m"}}},
        volumes=[{"name": "cd", "containerDisk": {"image": "i"}}],
    ).spec
    spec.domain.devices = None
    out = default_vmi_spec(spec, "fw-uuid")
    d = out.domain
    assert d.machine and d.machine.type == "q35"
    assert d.cpu and (d.cpu.sockets, d.cpu.cores, d.cpu.threads, d.cpu.model) == (
        2,
        1,
        1,
        "host-model",
    )
    assert d.memory and d.memory.guest == "64Mi"
    assert d.devices and d.devices.disks and d.devices.disks[0].name == "cd"
    assert d.devices.disks[0].disk and d.devices.disks[0].disk.bus == "sata"
    assert d.devices.interfaces and d.devices.interfaces[0].name == "default"
    assert d.devices.interfaces[0].masquerade == {} and d.devices.interfaces[0].model is None
    assert out.networks and out.networks[0].name == "default" and out.networks[0].pod is not None
    assert d.firmware and d.firmware.uuid == "fw-uuid"
    assert out.termination_grace_period_seconds == 30
    assert spec.domain.machine is None  # pure: input untouched


def test_cpu_limit_wins_and_memory_from_limit() -> None:
    spec = vmi(
        domain={"resources": {"limits": {"cpu": "3", "memory": "1Gi"}, "requests": {"cpu": "1"}}}
    ).spec
    out = default_vmi_spec(spec, "u")
    assert out.domain.cpu and out.domain.cpu.sockets == 3
    assert out.domain.memory and out.domain.memory.guest == "1Gi"


def test_cdrom_defaults_and_explicit_values_kept() -> None:
    spec = vmi(
        domain={
            "memory": {"guest": "1Gi"},
            "cpu": {"cores": 2},
            "machine": {"type": "pc-q35-rhel9"},
            "devices": {
                "disks": [{"name": "root", "cdrom": {}}],
                "interfaces": [{"name": "n", "masquerade": {}, "model": "e1000"}],
            },
        },
        networks=[{"name": "n", "pod": {}}],
        terminationGracePeriodSeconds=0,
    ).spec
    out = default_vmi_spec(spec, "u")
    cdrom = out.domain.devices.disks[0].cdrom  # type: ignore[union-attr,index]
    assert cdrom and cdrom.bus == "sata" and cdrom.readonly is True
    assert out.domain.cpu and (out.domain.cpu.sockets, out.domain.cpu.cores) == (1, 2)
    assert out.domain.machine and out.domain.machine.type == "pc-q35-rhel9"
    assert out.domain.devices.interfaces[0].model == "e1000"  # type: ignore[union-attr,index]
    assert out.termination_grace_period_seconds == 0


def test_no_default_network_when_autoattach_disabled() -> None:
    spec = vmi().spec
    spec.domain.devices.autoattach_pod_interface = False  # type: ignore[union-attr]
    out = default_vmi_spec(spec, "u")
    assert not out.networks and not out.domain.devices.interfaces  # type: ignore[union-attr]


def test_defaulted_example_keeps_unknown_fields() -> None:
    raw = next(doc for name, doc in DOCS if name == "vmi-fedora.yaml")
    out = dump(default_vmi(REGISTRY.load(raw), "u"), raw)
    assert out["spec"]["domain"]["devices"]["rng"] == {}
    assert out["spec"]["domain"]["firmware"]["uuid"] == "u"


# ------------------------------------------------------------------ validation rules

M = "spec.domain"
RULES: list[tuple[str, dict[str, Any], tuple[str, str, str]]] = [
    (
        "memory < 1M",
        {"domain": {"resources": {"requests": {"memory": "512Ki"}}}, "volumes": []},
        (
            "FieldValueInvalid",
            f"{M}.resources.requests.memory '512Ki': must be greater than or equal to 1M.",
            f"{M}.resources.requests.memory",
        ),
    ),
    (
        "request > limit",
        {
            "domain": {"resources": {"requests": {"memory": "2Gi"}, "limits": {"memory": "1Gi"}}},
            "volumes": [],
        },
        (
            "FieldValueInvalid",
            f"{M}.resources.requests.memory '2Gi' is greater than {M}.resources.limits.memory '1Gi'",
            f"{M}.resources.requests.memory",
        ),
    ),
    (
        "guest > limit",
        {
            "domain": {"memory": {"guest": "2Gi"}, "resources": {"limits": {"memory": "1Gi"}}},
            "volumes": [],
        },
        (
            "FieldValueInvalid",
            f"{M}.memory.guest '2Gi' must be equal to or less than the memory limit "
            f"{M}.resources.limits.memory '1Gi'",
            f"{M}.memory.guest",
        ),
    ),
    (
        "cpu request > limit",
        {
            "domain": {
                "memory": {"guest": "1Gi"},
                "resources": {"requests": {"cpu": "2"}, "limits": {"cpu": "1"}},
            },
            "volumes": [],
        },
        (
            "FieldValueInvalid",
            f"{M}.resources.requests.cpu '2' is greater than {M}.resources.limits.cpu '1'",
            f"{M}.resources.requests.cpu",
        ),
    ),
    (
        "disk without volume",
        {"volumes": []},
        (
            "FieldValueInvalid",
            f"{M}.devices.disks[0].Name 'root' not found.",
            f"{M}.devices.disks[0].name",
        ),
    ),
    (
        "duplicate disk",
        {
            "domain": {
                "memory": {"guest": "1Gi"},
                "devices": {"disks": [{"name": "root"}, {"name": "root"}]},
            }
        },
        (
            "FieldValueInvalid",
            f"{M}.devices.disks[1] and {M}.devices.disks[0] must not have the same Name.",
            f"{M}.devices.disks[1].name",
        ),
    ),
    (
        "duplicate volume",
        {
            "volumes": [
                {"name": "root", "containerDisk": {"image": "i"}},
                {"name": "root", "containerDisk": {"image": "i"}},
            ]
        },
        (
            "FieldValueInvalid",
            "spec.volumes[1] and spec.volumes[0] must not have the same Name.",
            "spec.volumes[1].name",
        ),
    ),
    (
        "two sources",
        {
            "volumes": [
                {"name": "root", "containerDisk": {"image": "i"}, "emptyDisk": {"capacity": "1Gi"}}
            ]
        },
        (
            "FieldValueInvalid",
            "spec.volumes[0] must have exactly one source type set",
            "spec.volumes[0]",
        ),
    ),
    (
        "no source",
        {"volumes": [{"name": "root"}]},
        (
            "FieldValueInvalid",
            "spec.volumes[0] must have exactly one source type set",
            "spec.volumes[0]",
        ),
    ),
    (
        "volume without disk",
        {
            "volumes": [
                {"name": "root", "containerDisk": {"image": "i"}},
                {"name": "extra", "containerDisk": {"image": "i"}},
            ]
        },
        (
            "FieldValueInvalid",
            "spec.domain.volumes[1].name 'extra' not found.",
            "spec.domain.volumes[1].name",
        ),
    ),
    (
        "ide",
        {
            "domain": {
                "memory": {"guest": "1Gi"},
                "devices": {"disks": [{"name": "root", "disk": {"bus": "ide"}}]},
            }
        },
        ("FieldValueInvalid", "IDE bus is not supported", f"{M}.devices.disks[0].disk.bus"),
    ),
    (
        "virtio cdrom",
        {
            "domain": {
                "memory": {"guest": "1Gi"},
                "devices": {"disks": [{"name": "root", "cdrom": {"bus": "virtio"}}]},
            }
        },
        (
            "FieldValueInvalid",
            "Bus type virtio is invalid for CD-ROM device",
            f"{M}.devices.disks[0].cdrom.bus",
        ),
    ),
    (
        "unknown bus",
        {
            "domain": {
                "memory": {"guest": "1Gi"},
                "devices": {"disks": [{"name": "root", "disk": {"bus": "nvme"}}]},
            }
        },
        (
            "FieldValueInvalid",
            f"{M}.devices.disks[0] is set with an unrecognized bus nvme, must be one of: "
            "[virtio scsi sata usb]",
            f"{M}.devices.disks[0].disk.bus",
        ),
    ),
    (
        "boot order 0",
        {
            "domain": {
                "memory": {"guest": "1Gi"},
                "devices": {"disks": [{"name": "root", "bootOrder": 0}]},
            }
        },
        (
            "FieldValueInvalid",
            f"{M}.devices.disks[0] must have a boot order > 0, if supplied",
            f"{M}.devices.disks[0].bootOrder",
        ),
    ),
    (
        "boot order dup",
        {
            "domain": {
                "memory": {"guest": "1Gi"},
                "devices": {
                    "disks": [{"name": "root", "bootOrder": 1}],
                    "interfaces": [{"name": "n", "masquerade": {}, "bootOrder": 1}],
                },
            },
            "networks": [{"name": "n", "pod": {}}],
        },
        (
            "FieldValueInvalid",
            f"Boot order for {M}.devices.interfaces[0].bootOrder already set for a different device.",
            f"{M}.devices.interfaces[0].bootOrder",
        ),
    ),
]
IFACE = f"{M}.devices.interfaces[0]"


def _iface(iface: dict[str, Any], networks: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    return {
        "domain": {
            "memory": {"guest": "1Gi"},
            "devices": {"disks": [{"name": "root"}], "interfaces": [iface]},
        },
        "networks": [{"name": "n", "pod": {}}] if networks is None else networks,
    }


RULES += [
    (
        "iface without network",
        _iface({"name": "x", "bridge": {}}),
        ("FieldValueInvalid", f"{IFACE}.name 'x' not found.", f"{IFACE}.name"),
    ),
    (
        "network without iface",
        _iface(
            {"name": "n", "bridge": {}},
            [{"name": "n", "pod": {}}, {"name": "m", "multus": {"networkName": "a"}}],
        ),
        ("FieldValueRequired", "spec.networks[1].name 'm' not found.", "spec.networks[1].name"),
    ),
    (
        "two pod networks",
        _iface({"name": "n", "bridge": {}}, [{"name": "n", "pod": {}}, {"name": "m", "pod": {}}]),
        (
            "FieldValueDuplicate",
            "more than one interface is connected to a pod network in spec.interfaces",
            "spec.interfaces",
        ),
    ),
    (
        "bad mac",
        _iface({"name": "n", "bridge": {}, "macAddress": "de:ad:00:00:be"}),
        (
            "FieldValueInvalid",
            f"interface {IFACE}.name has malformed MAC address (de:ad:00:00:be).",
            f"{IFACE}.macAddress",
        ),
    ),
    (
        "bad model",
        _iface({"name": "n", "bridge": {}, "model": "vmxnet3"}),
        (
            "FieldValueNotSupported",
            f"interface {IFACE}.name uses model vmxnet3 that is not supported.",
            f"{IFACE}.model",
        ),
    ),
    (
        "port 0",
        _iface({"name": "n", "masquerade": {}, "ports": [{"port": 0}]}),
        ("FieldValueRequired", "Port field is mandatory.", f"{IFACE}.ports[0]"),
    ),
    (
        "port too big",
        _iface({"name": "n", "masquerade": {}, "ports": [{"port": 65536}]}),
        ("FieldValueInvalid", "Port field must be in range 0 < x < 65536.", f"{IFACE}.ports[0]"),
    ),
    (
        "hostname",
        {"hostname": "Bad_Host"},
        (
            "FieldValueInvalid",
            "spec.hostname does not conform to the kubernetes DNS_LABEL rules : a lowercase RFC 1123 "
            "label must consist of lower case alphanumeric characters or '-', and must start and end with an "
            "alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is "
            "'[a-z0-9]([-a-z0-9]*[a-z0-9])?')",
            "spec.hostname",
        ),
    ),
    (
        "eviction",
        {"evictionStrategy": "Evaporate"},
        (
            "FieldValueInvalid",
            "spec.evictionStrategy is set with an unrecognized option: Evaporate",
            "spec.evictionStrategy",
        ),
    ),
]


@pytest.mark.parametrize(("rule", "spec", "expected"), RULES, ids=[r[0] for r in RULES])
def test_rule_fails_with_kubevirt_message(
    rule: str, spec: dict[str, Any], expected: tuple[str, str, str]
) -> None:
    assert expected in causes_of(vmi(**spec))


def test_two_interfaces_on_one_network() -> None:
    spec = _iface({"name": "n", "bridge": {}})
    spec["domain"]["devices"]["interfaces"].append({"name": "n", "bridge": {}})
    causes = causes_of(vmi(**spec))
    assert (
        "FieldValueDuplicate",
        "Only one interface can be connected to one specific network",
        f"{M}.devices.interfaces[1].name",
    ) in causes


def test_valid_vmi_has_no_causes() -> None:
    assert causes_of(vmi()) == []


def test_hostname_too_long_and_name() -> None:
    assert "must be no more than 63 characters" in validate_hostname("a" * 64)[0].message
    assert validate_name("Bad_Name")[0].field == "metadata.name"
    assert validate_name(None, "gen-") == []
    assert validate_name(None)[0].message == "name or generateName is required"
    assert validate_name("ok.name-1") == []


# ------------------------------------------------------------------ VM


def _vm(**spec: Any) -> VirtualMachine:
    raw = next(doc for name, doc in DOCS if name == "vm-cirros.yaml")
    vm = load(raw, VirtualMachine)
    vm.spec.run_strategy = spec.get("runStrategy")
    vm.spec.running = spec.get("running")
    return vm


def test_vm_run_strategy_rules() -> None:
    assert [(c.message, c.field) for c in validate_vm(_vm())] == [
        ("RunStrategy must be specified", "spec.running")
    ]
    both = validate_vm(_vm(running=True, runStrategy="Always"))
    assert [(c.message, c.field) for c in both] == [
        (
            "Running and RunStrategy are mutually exclusive. Note that Running is deprecated, "
            "please use RunStrategy instead",
            "spec.running",
        )
    ]
    bad = validate_vm(_vm(runStrategy="Sometimes"))
    assert [(c.message, c.field) for c in bad] == [
        ("Invalid RunStrategy (Sometimes)", "spec.runStrategy")
    ]
    assert validate_vm(_vm(running=False)) == []
    for strategy in ("Always", "RerunOnFailure", "Manual", "Halted", "Once"):
        assert validate_vm(_vm(runStrategy=strategy)) == []


def test_vm_template_fields_are_prefixed() -> None:
    vm = _vm(runStrategy="Always")
    vm.spec.template.spec.hostname = "NOPE"
    assert validate_vm(vm)[0].field == "spec.template.spec.hostname"


# ------------------------------------------------------------------ migration


def _mig(vmi_name: str | None = "v") -> VirtualMachineInstanceMigration:
    return load(
        {
            "apiVersion": "kubevirt.io/v1",
            "kind": "VirtualMachineInstanceMigration",
            "metadata": {"name": "m", "namespace": "ns"},
            "spec": {"vmiName": vmi_name} if vmi_name else {},
        },
        VirtualMachineInstanceMigration,
    )


def test_migration_rules() -> None:
    assert validate_migration(_mig(None))[0].field == "spec.vmiName"
    assert (
        validate_migration(_mig(), lambda ns, n: None)[0].message == 'the VMI "ns/v" does not exist'
    )
    done = vmi()
    done.status = VirtualMachineInstanceStatus(phase="Succeeded")
    assert (
        validate_migration(_mig(), lambda ns, n: done)[0].message
        == "Cannot migrate VMI in finalized state."
    )
    stuck = vmi()
    stuck.status = VirtualMachineInstanceStatus(
        phase="Running",
        conditions=[
            Condition(
                type="LiveMigratable",
                status="False",
                reason="DisksNotLiveMigratable",
                message="pvc is RWO",
            )
        ],
    )
    assert validate_migration(_mig(), lambda ns, n: stuck)[0].message == (
        "Cannot migrate VMI, Reason: DisksNotLiveMigratable, Message: pvc is RWO"
    )
    running = vmi()
    running.status = VirtualMachineInstanceStatus(phase="Running")
    assert validate_migration(_mig(), lambda ns, n: running) == []
    assert validate_migration(_mig(), lambda ns, n: running, lambda ns, n: "other")[0].message == (
        "in-flight migration detected. Active migration job (other) is currently already in "
        "progress for VMI v."
    )


# ------------------------------------------------------------------ Status


def test_invalid_status_body() -> None:
    causes = validate_vm(_vm(runStrategy="Sometimes"))
    body = dump(invalid_status("VirtualMachine", "vm-cirros", causes))
    assert body == {
        "apiVersion": "v1",
        "kind": "Status",
        "status": "Failure",
        "reason": "Invalid",
        "code": 422,
        "message": 'admission webhook "virtualmachine-validator.kubevirt.io" denied the request: '
        "Invalid RunStrategy (Sometimes)",
        "details": {
            "name": "vm-cirros",
            "group": "kubevirt.io",
            "kind": "VirtualMachine",
            "causes": [
                {
                    "reason": "FieldValueInvalid",
                    "message": "Invalid RunStrategy (Sometimes)",
                    "field": "spec.runStrategy",
                }
            ],
        },
    }


def test_invalid_status_caps_causes_at_ten() -> None:
    causes = validate_vmi_spec(vmi(volumes=[{"name": f"v{i}"} for i in range(12)]).spec)
    status = invalid_status("VirtualMachineInstance", "t", causes)
    assert status.details and status.details.causes and len(status.details.causes) == 10
    assert status.message.endswith(f", and {len(causes) - 10} more validation errors")
    assert status.message.startswith(
        'admission webhook "virtualmachineinstances-create-validator.kubevirt.io" denied the request: '
    )
