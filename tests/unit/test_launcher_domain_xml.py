"""VMI → libvirt domain XML, checked by structure and by libvirt's own test driver."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Iterator
from typing import Any

import libvirt
import pytest

from services.launcher.domain_xml import (
    METADATA_NS,
    DomainType,
    build_domain_xml,
    domain_name,
    firmware_uuid,
)
from tests.unit.kubevirt_examples import example_documents


def _example_vmis() -> list[tuple[str, dict[str, Any]]]:
    """Every VMI spec in the examples: the vmi-*.yaml objects and the VM templates."""
    vmis = []
    for filename, doc in example_documents():
        if doc.get("kind") == "VirtualMachineInstance":
            vmis.append((filename, {**doc, "metadata": {**doc["metadata"], "namespace": "ns"}}))
        elif doc.get("kind") == "VirtualMachine":
            template = doc["spec"]["template"]
            meta = {"name": doc["metadata"]["name"], "namespace": "ns", "uid": "u-" + filename}
            vmis.append((filename, {"metadata": meta, "spec": template["spec"]}))
    return vmis


EXAMPLES = _example_vmis()


@pytest.fixture(scope="module")
def conn() -> Iterator[Any]:
    c = libvirt.open("test:///default")
    yield c
    c.close()


def test_examples_include_the_ones_the_launcher_must_handle() -> None:
    names = {filename for filename, _ in EXAMPLES}
    assert {"vmi-ephemeral.yaml", "vmi-fedora.yaml", "vm-cirros.yaml"} <= names


@pytest.mark.parametrize(("filename", "vmi"), EXAMPLES, ids=[f for f, _ in EXAMPLES])
def test_example_xml_has_the_expected_elements(filename: str, vmi: dict[str, Any]) -> None:
    root = ET.fromstring(build_domain_xml(vmi))
    spec = vmi["spec"]["domain"]

    assert root.get("type") == "test"
    assert root.findtext("name") == f"ns_{vmi['metadata']['name']}"
    assert root.findtext("uuid") == firmware_uuid(vmi)
    assert int(root.findtext("memory") or 0) > 0
    assert root.findtext("vcpu") == "1"
    assert root.find("os/type").get("machine") == "q35"  # type: ignore[union-attr]
    assert root.find("features/acpi") is not None
    manufacturer = root.find("sysinfo[@type='smbios']/system/entry[@name='manufacturer']")
    assert manufacturer is not None and manufacturer.text == "virtstream"
    assert root.find(f"metadata/{{{METADATA_NS}}}vmi").get("name") == vmi["metadata"]["name"]  # type: ignore[union-attr]

    disks = root.findall("devices/disk")
    expected_disks = spec.get("devices", {}).get("disks", [])
    assert [d.find("alias").get("name") for d in disks] == [  # type: ignore[union-attr]
        f"ua-{d['name']}" for d in expected_disks
    ]
    for el, disk in zip(disks, expected_disks, strict=True):
        bus = (disk.get("disk") or {}).get("bus", "sata")
        assert el.find("target").get("bus") == bus  # type: ignore[union-attr]
    assert len(root.findall("devices/interface[@type='user']")) == len(
        spec.get("devices", {}).get("interfaces", [])
    )


@pytest.mark.parametrize(("filename", "vmi"), EXAMPLES, ids=[f for f, _ in EXAMPLES])
def test_example_xml_is_accepted_by_libvirt(conn: Any, filename: str, vmi: dict[str, Any]) -> None:
    dom = conn.defineXML(build_domain_xml(vmi))
    try:
        dom.create()
        assert dom.state()[0] == libvirt.VIR_DOMAIN_RUNNING
        assert dom.name() == domain_name(vmi)
        assert dom.UUIDString() == firmware_uuid(vmi)
        dom.destroy()
    finally:
        dom.undefine()


def _vmi(domain: dict[str, Any], **spec: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": "t", "namespace": "ns", "uid": "11111111-2222-3333-4444-555555555555"},
        "spec": {"domain": domain, **spec},
    }


@pytest.mark.parametrize(
    ("memory", "expected"),
    [
        ({"memory": {"guest": "64Mi"}}, 64 * 2**20),
        ({"memory": {"guest": "1Gi"}}, 2**30),
        ({"memory": {"guest": "128M"}}, 128 * 10**6),
        ({"resources": {"requests": {"memory": "256Mi"}}}, 256 * 2**20),
        ({"resources": {"limits": {"memory": "512Mi"}}}, 512 * 2**20),
    ],
)
def test_memory_quantities(memory: dict[str, Any], expected: int) -> None:
    root = ET.fromstring(build_domain_xml(_vmi(memory)))
    assert root.find("memory").get("unit") == "b"  # type: ignore[union-attr]
    assert int(root.findtext("memory") or 0) == expected


def test_no_memory_is_refused_with_kubevirts_message() -> None:
    with pytest.raises(ValueError, match="no memory requested"):
        build_domain_xml(_vmi({}))


def test_cpu_topology_uuid_and_machine_type() -> None:
    uuid = "0d2a2043-41c0-59c3-9b17-025022203668"
    vmi = _vmi(
        {
            "memory": {"guest": "64Mi"},
            "cpu": {"sockets": 2, "cores": 3, "threads": 2},
            "firmware": {"uuid": uuid},
            "machine": {"type": "pc-q35-rhel9.4.0"},
        }
    )
    root = ET.fromstring(build_domain_xml(vmi))
    assert root.findtext("vcpu") == "12"
    topology = root.find("cpu/topology")
    assert topology is not None
    assert (topology.get("sockets"), topology.get("cores"), topology.get("threads")) == (
        "2",
        "3",
        "2",
    )
    assert root.findtext("uuid") == uuid
    # The test driver takes the name as given; upstream QEMU only knows the q35 alias.
    assert root.find("os/type").get("machine") == "pc-q35-rhel9.4.0"  # type: ignore[union-attr]
    qemu = ET.fromstring(build_domain_xml(vmi, domain_type=DomainType.QEMU))
    assert qemu.find("os/type").get("machine") == "q35"  # type: ignore[union-attr]


def test_sockets_default_from_the_cpu_request() -> None:
    vmi = _vmi({"memory": {"guest": "64Mi"}, "resources": {"requests": {"cpu": "1500m"}}})
    assert ET.fromstring(build_domain_xml(vmi)).findtext("vcpu") == "2"


def test_disk_buses_targets_cdrom_and_interfaces(conn: Any) -> None:
    vmi = _vmi(
        {
            "memory": {"guest": "64Mi"},
            "devices": {
                "disks": [
                    {"name": "root", "disk": {"bus": "virtio"}, "bootOrder": 1},
                    {"name": "data", "disk": {"bus": "scsi"}},
                    {"name": "iso", "cdrom": {"bus": "sata", "readonly": True}},
                    {"name": "plain", "disk": {}},
                    {"name": "second", "disk": {"bus": "virtio"}},
                ],
                "interfaces": [
                    {"name": "default", "masquerade": {}, "macAddress": "DE:AD:00:00:BE:AF"},
                    {"name": "other", "bridge": {}, "model": "e1000"},
                ],
            },
        }
    )
    xml = build_domain_xml(vmi, disk_paths={"root": "/images/root.img"})
    root = ET.fromstring(xml)
    targets = {
        d.find("alias").get("name"): (  # type: ignore[union-attr]
            d.get("device"),
            d.find("target").get("dev"),  # type: ignore[union-attr]
            d.find("target").get("bus"),  # type: ignore[union-attr]
        )
        for d in root.findall("devices/disk")
    }
    assert targets == {
        "ua-root": ("disk", "vda", "virtio"),
        "ua-data": ("disk", "sda", "scsi"),
        "ua-iso": ("cdrom", "sdb", "sata"),
        "ua-plain": ("disk", "sdc", "sata"),
        "ua-second": ("disk", "vdb", "virtio"),
    }
    root_disk = root.find("devices/disk/alias[@name='ua-root']/..")
    assert root_disk is not None
    assert root_disk.find("source").get("file") == "/images/root.img"  # type: ignore[union-attr]
    assert root_disk.find("boot").get("order") == "1"  # type: ignore[union-attr]
    iso = root.find("devices/disk[@device='cdrom']")
    assert iso is not None and iso.find("readonly") is not None and iso.find("source") is None

    ifaces = root.findall("devices/interface")
    assert [i.get("type") for i in ifaces] == ["user", "user"]
    assert ifaces[0].find("mac").get("address") == "de:ad:00:00:be:af"  # type: ignore[union-attr]
    assert ifaces[0].find("model").get("type") == "virtio"  # type: ignore[union-attr]
    assert ifaces[1].find("model").get("type") == "e1000"  # type: ignore[union-attr]

    dom = conn.defineXML(xml)
    try:
        dom.create()
        live = ET.fromstring(dom.XMLDesc())
        assert live.find("devices/interface/mac").get("address") == "de:ad:00:00:be:af"  # type: ignore[union-attr]
        dom.destroy()
    finally:
        dom.undefine()


def test_unsupported_bus_is_refused() -> None:
    vmi = _vmi(
        {"memory": {"guest": "64Mi"}, "devices": {"disks": [{"name": "d", "disk": {"bus": "ide"}}]}}
    )
    with pytest.raises(ValueError, match="unsupported disk bus"):
        build_domain_xml(vmi)


def test_qemu_and_kvm_modes_set_type_emulator_and_cpu_mode() -> None:
    vmi = _vmi({"memory": {"guest": "64Mi"}})
    qemu = ET.fromstring(
        build_domain_xml(vmi, domain_type=DomainType.QEMU, emulator="/usr/bin/qemu-system-x86_64")
    )
    assert qemu.get("type") == "qemu"
    assert qemu.findtext("devices/emulator") == "/usr/bin/qemu-system-x86_64"
    kvm = ET.fromstring(build_domain_xml(vmi, domain_type=DomainType.KVM))
    assert kvm.get("type") == "kvm"
    assert kvm.find("cpu").get("mode") == "host-model"  # type: ignore[union-attr]
    assert kvm.find("devices/emulator") is None


def test_firmware_uuid_is_stable_without_one_in_the_spec() -> None:
    vmi = {"metadata": {"name": "a", "namespace": "ns", "uid": "x"}, "spec": {}}
    assert firmware_uuid(vmi) == firmware_uuid(vmi)
    other = {"metadata": {"name": "b", "namespace": "ns", "uid": "x"}, "spec": {}}
    assert firmware_uuid(vmi) != firmware_uuid(other)
    assert domain_name({"metadata": {"name": "a"}}) == "default_a"
