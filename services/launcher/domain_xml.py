"""VirtualMachineInstance (KubeVirt JSON shape, as a plain dict) → libvirt domain XML.

Only what the launcher can act on is translated; everything else in the spec is ignored
here (the API keeps and reports it). The same XML serves the `test` driver and QEMU; the
differences (domain type, emulator, machine alias) are parameters.
"""

from __future__ import annotations

import enum
import math
import uuid
import xml.etree.ElementTree as ET
from collections.abc import Collection, Mapping
from typing import Any

from events.catalog import Attachment
from events.quantity import parse_cpu_millis, parse_quantity
from projections.disk_targets import device_and_bus, prefix_of, target_name
from services.launcher.images import KernelBoot

METADATA_NS = "urn:virtstream:launcher:1"
SMBIOS_MANUFACTURER = "virtstream"
DEFAULT_DISK_DIR = "/var/lib/virtstream/disks"
DEFAULT_MACHINE = "q35"
GUEST_AGENT_CHANNEL = "org.qemu.guest_agent.0"

ET.register_namespace("virtstream", METADATA_NS)


class DomainType(enum.StrEnum):
    TEST = "test"
    QEMU = "qemu"
    KVM = "kvm"


def domain_name(vmi: Mapping[str, Any]) -> str:
    meta = vmi.get("metadata") or {}
    return f"{meta.get('namespace') or 'default'}_{meta['name']}"


def firmware_uuid(vmi: Mapping[str, Any]) -> str:
    """spec.domain.firmware.uuid, else derived stably from the VMI's identity.

    The API defaults the firmware uuid; deriving it (rather than random) keeps a launcher
    that is re-run for the same VMI presenting the same machine to the guest.
    """
    spec_uuid = _get(vmi, "spec", "domain", "firmware", "uuid")
    if spec_uuid:
        return str(uuid.UUID(str(spec_uuid)))
    meta = vmi.get("metadata") or {}
    identity = f"kubevirt.io/{domain_name(vmi)}/{meta.get('uid', '')}"
    return str(uuid.uuid5(uuid.NAMESPACE_URL, identity))


def guest_memory_bytes(vmi: Mapping[str, Any]) -> int:
    domain = _get(vmi, "spec", "domain") or {}
    for value in (
        _get(domain, "memory", "guest"),
        _get(domain, "resources", "requests", "memory"),
        _get(domain, "resources", "limits", "memory"),
    ):
        if value is not None:
            return parse_quantity(value)
    raise ValueError(
        "no memory requested, at least one of 'spec.domain.memory.guest', "
        "'spec.domain.memory.hugepages.pageSize' or 'spec.domain.resources.requests.memory' "
        "must be set"
    )


def cpu_topology(vmi: Mapping[str, Any]) -> tuple[int, int, int]:
    """(sockets, cores, threads); sockets fall back to the CPU limit/request as in admission."""
    domain = _get(vmi, "spec", "domain") or {}
    cpu = domain.get("cpu") or {}
    sockets = cpu.get("sockets")
    if sockets is None:
        requested = _get(domain, "resources", "limits", "cpu") or _get(
            domain, "resources", "requests", "cpu"
        )
        sockets = max(1, math.ceil(parse_cpu_millis(requested) / 1000)) if requested else 1
    return int(sockets), int(cpu.get("cores") or 1), int(cpu.get("threads") or 1)


def build_domain_xml(
    vmi: Mapping[str, Any],
    *,
    domain_type: DomainType = DomainType.TEST,
    emulator: str | None = None,
    disk_dir: str = DEFAULT_DISK_DIR,
    disk_paths: Mapping[str, str] | None = None,
    omit_disks: Collection[str] = (),
    kernel_boot: KernelBoot | None = None,
    console_log: str | None = None,
    pod_address: str = "",
    attachments: Collection[Attachment] = (),
) -> str:
    """The libvirt domain XML for a VMI.

    disk_paths maps disk names to host image paths (prepared by whoever provides storage;
    `.qcow2` files are qcow2, others raw); a disk without one points at
    `<disk_dir>/<domain>/<disk>.img`, which only the `test` driver accepts without the file
    existing. Disks in omit_disks are left out (storage could not provide them).
    `emulator` is only written when given (QEMU mode on a host where libvirt's default
    binary is not the one to use). `kernel_boot` (spec.domain.firmware.kernelBoot, resolved
    by storage) boots that kernel and initrd directly. `console_log`: the serial console
    (a pty, for interactive use) also writes everything the guest prints to this file.
    `pod_address`: the VMI's address on its node's pod network (its scheduling event's);
    the pod network's interface is then a tap (`host/pod_network.py`) and the address is
    kept in the metadata, so it travels with a live migration. `attachments`: its
    addresses on secondary networks; each of their interfaces is a tap as well, and they
    are kept in the metadata in the same way.
    """
    name = domain_name(vmi)
    meta = vmi.get("metadata") or {}
    domain_spec = _get(vmi, "spec", "domain") or {}

    root = ET.Element("domain", type=str(domain_type))
    ET.SubElement(root, "name").text = name
    ET.SubElement(root, "uuid").text = firmware_uuid(vmi)
    attached = [a for a in attachments if a.address]
    _add_metadata(root, meta, pod_address, pod_ports(vmi) if pod_address else None, attached)

    memory = str(guest_memory_bytes(vmi))
    ET.SubElement(root, "memory", unit="b").text = memory
    ET.SubElement(root, "currentMemory", unit="b").text = memory

    sockets, cores, threads = cpu_topology(vmi)
    ET.SubElement(root, "vcpu", placement="static").text = str(sockets * cores * threads)

    _add_sysinfo(root, vmi, meta)
    _add_os(root, domain_type, _get(domain_spec, "machine", "type") or DEFAULT_MACHINE, kernel_boot)
    features = ET.SubElement(root, "features")
    # ACPI is what makes graceful shutdown (virDomainShutdown) reach the guest.
    ET.SubElement(features, "acpi")
    ET.SubElement(features, "apic")

    cpu = ET.SubElement(root, "cpu")
    if domain_type is DomainType.KVM:
        cpu.set("mode", "host-model")
    ET.SubElement(
        cpu, "topology", sockets=str(sockets), dies="1", cores=str(cores), threads=str(threads)
    )

    ET.SubElement(root, "clock", offset="utc")
    ET.SubElement(root, "on_poweroff").text = "destroy"
    # A guest reboot stays inside the domain: KubeVirt keeps the VMI across guest reboots.
    ET.SubElement(root, "on_reboot").text = "restart"
    ET.SubElement(root, "on_crash").text = "destroy"

    devices = ET.SubElement(root, "devices")
    if emulator:
        ET.SubElement(devices, "emulator").text = emulator
    devices_spec = domain_spec.get("devices") or {}
    disks = [d for d in devices_spec.get("disks") or [] if d["name"] not in omit_disks]
    _add_disks(devices, disks, name, disk_dir, disk_paths or {})
    if domain_type is not DomainType.TEST:
        # as KubeVirt's domains: a virtio-scsi controller, where hot-plugged volumes go, and
        # the guest agent's virtio-serial channel (libvirt picks the socket's path)
        ET.SubElement(devices, "controller", type="scsi", index="0", model="virtio-scsi")
        channel = ET.SubElement(devices, "channel", type="unix")
        ET.SubElement(channel, "source", mode="bind")
        ET.SubElement(channel, "target", type="virtio", name=GUEST_AGENT_CHANNEL)
    taps = {a.network for a in attached}
    if pod_address and (pod := pod_interface(vmi)):
        taps.add(pod)
    _add_interfaces(devices, devices_spec.get("interfaces") or [], taps)
    serial = ET.SubElement(devices, "serial", type="pty")
    if console_log:
        # QEMU writes the log itself (stdio_handler "file"); a new boot starts it afresh.
        ET.SubElement(serial, "log", file=console_log, append="off")
    ET.SubElement(serial, "target", port="0")
    console = ET.SubElement(devices, "console", type="pty")
    ET.SubElement(console, "target", type="serial", port="0")
    if domain_type is not DomainType.TEST and devices_spec.get("autoattachGraphicsDevice", True):
        _add_graphics(devices)
    for panic in devices_spec.get("panicDevices") or []:
        # KubeVirt's panicDevices: a guest's panic reaches the host (on_crash destroys it)
        ET.SubElement(devices, "panic", model=str((panic or {}).get("model") or "isa"))

    ET.indent(root)
    return ET.tostring(root, encoding="unicode")


def _add_graphics(devices: ET.Element) -> None:
    """KubeVirt's default graphics device: a VGA card and a VNC server. The port is
    libvirt's pick on loopback (each node's libvirtd picks a free one, so a migrated guest
    gets a port of its own on the target); the handler reads it from the live XML."""
    vnc = ET.SubElement(devices, "graphics", type="vnc", autoport="yes", listen="127.0.0.1")
    ET.SubElement(vnc, "listen", type="address", address="127.0.0.1")
    video = ET.SubElement(devices, "video")
    ET.SubElement(video, "model", type="vga", vram="16384", heads="1")


def _get(obj: Mapping[str, Any] | None, *path: str) -> Any:
    for key in path:
        if not isinstance(obj, Mapping):
            return None
        obj = obj.get(key)
    return obj


def _add_metadata(
    root: ET.Element,
    meta: Mapping[str, Any],
    pod_address: str = "",
    ports: tuple[int, ...] | None = None,
    attachments: Collection[Attachment] = (),
) -> None:
    # Lets a re-attaching handler (or a human with virsh) tie a domain back to its VMI.
    metadata = ET.SubElement(root, "metadata")
    vmi = ET.SubElement(
        metadata,
        f"{{{METADATA_NS}}}vmi",
        uid=str(meta.get("uid", "")),
        namespace=str(meta.get("namespace") or "default"),
        name=str(meta.get("name", "")),
    )
    if pod_address:
        vmi.set("podAddress", pod_address)
    if ports is not None:
        vmi.set("podPorts", ",".join(map(str, ports)))
    for a in attachments:
        ET.SubElement(
            vmi,
            f"{{{METADATA_NS}}}attachment",
            network=a.network,
            definition=a.definition,
            address=a.address,
            subnet=a.subnet,
            gateway=a.gateway,
        )


def attachments_of(domain_xml: str) -> tuple[Attachment, ...]:
    """The VMI's secondary network addresses kept in a domain's metadata."""
    el = ET.fromstring(domain_xml).find(f"./metadata/{{{METADATA_NS}}}vmi")
    found = el.iterfind(f"{{{METADATA_NS}}}attachment") if el is not None else ()
    return tuple(
        Attachment(
            network=a.get("network", ""),
            definition=a.get("definition", ""),
            address=a.get("address", ""),
            subnet=a.get("subnet", ""),
            gateway=a.get("gateway", ""),
        )
        for a in found
    )


def pod_address_of(domain_xml: str) -> str:
    """The VMI's pod network address kept in a domain's metadata ("" without one)."""
    el = ET.fromstring(domain_xml).find(f"./metadata/{{{METADATA_NS}}}vmi")
    return el.get("podAddress", "") if el is not None else ""


def pod_ports_of(domain_xml: str) -> tuple[int, ...] | None:
    """The TCP ports the pod network's interface lets in (None: all), from the metadata."""
    el = ET.fromstring(domain_xml).find(f"./metadata/{{{METADATA_NS}}}vmi")
    if el is None or el.get("podPorts") is None:
        return None
    return tuple(int(p) for p in el.get("podPorts", "").split(",") if p)


def pod_ports(vmi: Mapping[str, Any]) -> tuple[int, ...] | None:
    """KubeVirt's `interfaces[].ports` of the pod network's interface: with a list, only
    those ports (TCP unless said otherwise) reach the guest; without one, all do."""
    name = pod_interface(vmi)
    for iface in _get(vmi, "spec", "domain", "devices", "interfaces") or []:
        if iface.get("name") == name and iface.get("ports"):
            return tuple(
                int(p["port"])
                for p in iface["ports"]
                if str(p.get("protocol") or "TCP").upper() == "TCP"
            )
    return None


def pod_interface(vmi: Mapping[str, Any]) -> str | None:
    """The name of the interface bound to the pod network (KubeVirt's `networks[].pod`)."""
    spec = vmi.get("spec") or {}
    networks = [n for n in spec.get("networks") or [] if isinstance(n, Mapping)]
    pods = {n.get("name") for n in networks if "pod" in n}
    for iface in _get(spec, "domain", "devices", "interfaces") or []:
        if iface.get("name") in pods:
            return str(iface["name"])
    return None


def _add_sysinfo(root: ET.Element, vmi: Mapping[str, Any], meta: Mapping[str, Any]) -> None:
    sysinfo = ET.SubElement(root, "sysinfo", type="smbios")
    system = ET.SubElement(sysinfo, "system")
    firmware = _get(vmi, "spec", "domain", "firmware") or {}
    entries = {
        "manufacturer": SMBIOS_MANUFACTURER,
        "product": "None",
        "family": SMBIOS_MANUFACTURER,
        "serial": firmware.get("serial") or meta.get("uid") or "",
        "uuid": firmware_uuid(vmi),
    }
    for key, value in entries.items():
        if value:
            ET.SubElement(system, "entry", name=key).text = str(value)


def _add_os(
    root: ET.Element, domain_type: DomainType, machine: str, kernel_boot: KernelBoot | None
) -> None:
    os_el = ET.SubElement(root, "os")
    if domain_type is not DomainType.TEST and machine.startswith("pc-q35-rhel"):
        # RHEL machine types exist only in RHEL's QEMU; upstream QEMU knows the alias.
        machine = "q35"
    ET.SubElement(os_el, "type", arch="x86_64", machine=machine).text = "hvm"
    if kernel_boot is not None:
        ET.SubElement(os_el, "kernel").text = str(kernel_boot.kernel)
        if kernel_boot.initrd is not None:
            ET.SubElement(os_el, "initrd").text = str(kernel_boot.initrd)
        if kernel_boot.cmdline:
            ET.SubElement(os_el, "cmdline").text = kernel_boot.cmdline
    ET.SubElement(os_el, "smbios", mode="sysinfo")


def _disk_element(disk: Mapping[str, Any], path: str | None, target: str) -> ET.Element:
    name = disk["name"]
    device, bus = device_and_bus(disk)
    el = ET.Element("disk", type="file", device=device)
    fmt = "qcow2" if path is not None and path.endswith(".qcow2") else "raw"
    ET.SubElement(el, "driver", name="qemu", type=fmt, cache="none")
    if path is not None:
        ET.SubElement(el, "source", file=path)
    ET.SubElement(el, "target", dev=target, bus=bus)
    if device == "cdrom" or (disk.get("disk") or {}).get("readonly"):
        ET.SubElement(el, "readonly")
    ET.SubElement(el, "alias", name=f"ua-{name}")
    if disk.get("bootOrder"):
        ET.SubElement(el, "boot", order=str(int(disk["bootOrder"])))
    if disk.get("serial"):
        ET.SubElement(el, "serial").text = str(disk["serial"])
    return el


def _add_disks(
    devices: ET.Element,
    disks: list[Mapping[str, Any]],
    dom_name: str,
    disk_dir: str,
    disk_paths: Mapping[str, str],
) -> None:
    counters: dict[str, int] = {}
    for disk in disks:
        name = disk["name"]
        device, bus = device_and_bus(disk)
        prefix = prefix_of(bus, name)
        index = counters.get(prefix, 0)
        counters[prefix] = index + 1
        path = disk_paths.get(name)
        if path is None and device != "cdrom":  # an empty CD-ROM tray is valid, a disk is not
            path = f"{disk_dir}/{dom_name}/{name}.img"
        devices.append(_disk_element(disk, path, target_name(prefix, index)))


def hotplug_disk_xml(disk: Mapping[str, Any], path: str, live_xml: str) -> tuple[str, str]:
    """(the disk's XML, its target) to attach `disk` to the running domain whose live XML
    is `live_xml`: the first target of its bus that no disk uses."""
    _, bus = device_and_bus(disk)
    prefix = prefix_of(bus, disk["name"])
    used = {t.get("dev") for t in ET.fromstring(live_xml).iterfind("./devices/disk/target")}
    index = 0
    while target_name(prefix, index) in used:
        index += 1
    target = target_name(prefix, index)
    return ET.tostring(_disk_element(disk, path, target), encoding="unicode"), target


def disk_xml_of(live_xml: str, target: str) -> str | None:
    """The live domain's disk element with this target (what a detach names)."""
    for el in ET.fromstring(live_xml).iterfind("./devices/disk"):
        found = el.find("target")
        if found is not None and found.get("dev") == target:
            return ET.tostring(el, encoding="unicode")
    return None


def _add_interfaces(
    devices: ET.Element, interfaces: list[Mapping[str, Any]], taps: Collection[str]
) -> None:
    # The pod network's interface, and each on a secondary network with an address, is a
    # tap libvirt makes (`vnetN`) and the launcher puts on its bridge; without a pod
    # network (test mode, a host that cannot make one) and for other networks, QEMU's
    # user-mode networking, which needs no privileges.
    for iface in interfaces:
        kind = "ethernet" if iface["name"] in taps else "user"
        el = ET.SubElement(devices, "interface", type=kind)
        if iface.get("macAddress"):
            ET.SubElement(el, "mac", address=str(iface["macAddress"]).lower().replace("-", ":"))
        ET.SubElement(el, "model", type=str(iface.get("model") or "virtio"))
        ET.SubElement(el, "alias", name=f"ua-{iface['name']}")
        if iface.get("bootOrder"):
            ET.SubElement(el, "boot", order=str(int(iface["bootOrder"])))
