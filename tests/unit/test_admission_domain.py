# ruff: noqa: E501  (exact KubeVirt messages are long literals)
"""Firmware, start strategy, reserved labels, subdomain, boot order: KubeVirt's
messages and fields, for VMIs (spec.…) and VM templates (spec.template.spec.…)."""

import re
from typing import Any

import pytest

from core.admission import default_vmi, validate_vm, validate_vmi
from events.manifest import load
from events.objects import VirtualMachine, VirtualMachineInstance

Cause = tuple[str, str, str]


def _domain(**extra: Any) -> dict[str, Any]:
    domain: dict[str, Any] = {
        "devices": {"disks": [{"name": "root", "disk": {"bus": "virtio"}}]},
        "memory": {"guest": "128Mi"},
    }
    domain.update(extra)
    return domain


def _spec(domain: dict[str, Any] | None = None, **spec: Any) -> dict[str, Any]:
    return {
        "domain": domain or _domain(),
        "volumes": [{"name": "root", "containerDisk": {"image": "img"}}],
        **spec,
    }


def vmi_causes(spec: dict[str, Any], labels: dict[str, str] | None = None) -> list[Cause]:
    meta: dict[str, Any] = {"name": "t", **({"labels": labels} if labels else {})}
    raw = {"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance", "metadata": meta}
    obj = default_vmi(load({**raw, "spec": spec}, VirtualMachineInstance), "uuid-1")
    return [(c.type, c.message, c.field) for c in validate_vmi(obj)]


def vm_causes(spec: dict[str, Any], labels: dict[str, str] | None = None) -> list[Cause]:
    template: dict[str, Any] = {
        "spec": spec,
        **({"metadata": {"labels": labels}} if labels else {}),
    }
    raw = {
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachine",
        "metadata": {"name": "t"},
        "spec": {"runStrategy": "Halted", "template": template},
    }
    return [(c.type, c.message, c.field) for c in validate_vm(load(raw, VirtualMachine))]


def both(spec: dict[str, Any], vmi_cause: Cause) -> None:
    """The VMI gets the cause under spec., the VM's template under spec.template.spec."""
    assert vmi_causes(spec) == [vmi_cause]
    vm_cause = tuple(
        re.sub(r"\bspec(?=[.\[])", "spec.template.spec", p, count=1) for p in vmi_cause
    )
    assert vm_causes(spec) == [vm_cause]


EFI_AND_BIOS = (
    "FieldValueInvalid",
    "spec.domain.firmware.bootloader has both EFI and BIOS configured, but they are mutually exclusive.",
    "spec.domain.firmware.bootloader",
)
SECURE_BOOT = (
    "FieldValueInvalid",
    "spec.domain has EFI SecureBoot enabled. SecureBoot requires SMM, which is currently disabled.",
    "spec.domain",
)


def test_efi_and_bios_are_mutually_exclusive() -> None:
    firmware = {"bootloader": {"efi": {"secureBoot": False}, "bios": {}}}
    both(_spec(_domain(firmware=firmware)), EFI_AND_BIOS)
    assert vmi_causes(_spec(_domain(firmware={"bootloader": {"bios": {}}}))) == []


@pytest.mark.parametrize(
    ("efi", "features", "refused"),
    [
        ({}, None, True),  # secureBoot defaults to on
        ({"secureBoot": True}, {"smm": {"enabled": False}}, True),
        ({"secureBoot": True}, {"acpi": {}}, True),
        ({}, {"smm": {}}, False),  # smm present, enabled unset: on
        ({"secureBoot": True}, {"smm": {"enabled": True}}, False),
        ({"secureBoot": False}, None, False),
    ],
)
def test_secure_boot_requires_smm(
    efi: dict[str, Any], features: dict[str, Any] | None, refused: bool
) -> None:
    domain = _domain(firmware={"bootloader": {"efi": efi}})
    if features is not None:
        domain["features"] = features
    if refused:
        both(_spec(domain), SECURE_BOOT)
    else:
        assert vmi_causes(_spec(domain)) == []


def test_start_strategy_is_paused_or_unset() -> None:
    assert vmi_causes(_spec(startStrategy="Paused")) == []
    assert vm_causes(_spec(startStrategy="Paused")) == []
    both(
        _spec(startStrategy="Later"),
        (
            "FieldValueInvalid",
            "spec.startStrategy is set with an unrecognized option: Later",
            "spec.startStrategy",
        ),
    )


RESERVED = "creation of the following reserved kubevirt.io/ labels on a VMI object is prohibited"


@pytest.mark.parametrize(
    "label",
    [
        "kubevirt.io/created-by",
        "kubevirt.io/migrationJobUID",
        "kubevirt.io/nodeName",
        "kubevirt.io/migrationTargetNodeName",
        "kubevirt.io/schedulable",
        "kubevirt.io/install-strategy",
    ],
)
def test_reserved_labels_are_refused(label: str) -> None:
    assert vmi_causes(_spec(), {label: "x", "app": "a"}) == [
        ("FieldValueNotSupported", RESERVED, "metadata.labels")
    ]
    assert vm_causes(_spec(), {label: "x"}) == [
        ("FieldValueNotSupported", RESERVED, "spec.template.metadata.labels")
    ]


def test_other_kubevirt_labels_are_accepted() -> None:
    # kubevirt.io/vm and kubevirt.io/domain are what the examples and users set
    labels = {"kubevirt.io/vm": "v", "kubevirt.io/domain": "d", "kubevirt.io/size": "small"}
    assert vmi_causes(_spec(), labels) == []
    assert vm_causes(_spec(), labels) == []


def test_subdomain_must_be_a_dns_subdomain() -> None:
    both(
        _spec(subdomain="Bad_Sub"),
        (
            "FieldValueInvalid",
            "spec.subdomain does not conform to the kubernetes DNS_SUBDOMAIN rules : a lowercase RFC 1123 "
            "subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and "
            "end with an alphanumeric character (e.g. 'example.com', regex used for validation is "
            "'[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')",
            "spec.subdomain",
        ),
    )
    assert vmi_causes(_spec(subdomain="my-sub.example")) == []


def test_boot_orders_are_unique_across_disks_and_interfaces() -> None:
    devices = {
        "disks": [{"name": "root", "disk": {"bus": "virtio"}, "bootOrder": 1}],
        "interfaces": [{"name": "default", "masquerade": {}, "bootOrder": 1}],
    }
    networks = [{"name": "default", "pod": {}}]
    both(
        _spec(_domain(devices=devices), networks=networks),
        (
            "FieldValueInvalid",
            "Boot order for spec.domain.devices.interfaces[0].bootOrder already set for a different device.",
            "spec.domain.devices.interfaces[0].bootOrder",
        ),
    )
    devices["interfaces"][0]["bootOrder"] = 2
    assert vmi_causes(_spec(_domain(devices=devices), networks=networks)) == []


def test_interface_boot_order_zero_is_worded_as_kubevirt_words_it() -> None:
    devices = {
        "disks": [{"name": "root", "disk": {"bus": "virtio"}}],
        "interfaces": [{"name": "default", "masquerade": {}, "bootOrder": 0}],
    }
    both(
        _spec(_domain(devices=devices), networks=[{"name": "default", "pod": {}}]),
        (
            "FieldValueInvalid",
            "spec[0] must have a boot order > 0, if supplied",
            "spec[0].bootOrder",
        ),
    )


def test_a_repeated_disk_boot_order_zero_is_also_a_duplicate() -> None:
    disks = [
        {"name": "root", "disk": {"bus": "virtio"}, "bootOrder": 0},
        {"name": "data", "disk": {"bus": "virtio"}, "bootOrder": 0},
    ]
    spec = _spec(_domain(devices={"disks": disks}))
    spec["volumes"].append({"name": "data", "emptyDisk": {"capacity": "1Gi"}})
    disk = "spec.domain.devices.disks"
    assert vmi_causes(spec) == [
        (
            "FieldValueInvalid",
            f"{disk}[0] must have a boot order > 0, if supplied",
            f"{disk}[0].bootOrder",
        ),
        (
            "FieldValueInvalid",
            f"{disk}[1] must have a boot order > 0, if supplied",
            f"{disk}[1].bootOrder",
        ),
        (
            "FieldValueInvalid",
            f"Boot order for {disk}[1].bootOrder already set for a different device.",
            f"{disk}[1].bootOrder",
        ),
    ]
