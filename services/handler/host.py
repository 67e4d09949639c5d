"""What the handler probes of its node's host (capacity from libvirt, labels from the
machine) and does on it (destroys the domains no launcher owns). The I/O beside the pure
`node_info.py`."""

from __future__ import annotations

import contextlib
import platform
import socket
import uuid
from pathlib import Path

from events.catalog import KUBERNETES_VERSION, NodeSystemInfo, Resources
from events.quantity import parse_quantity
from services.handler.node_info import NodeConfig
from services.launcher.uris import TEST_URI


def host_capacity(uri: str = TEST_URI) -> tuple[int, int]:
    """(cpus, memory bytes) from libvirt's getInfo() (the test driver: 16 CPUs, 3 GiB)."""
    import libvirt

    conn = libvirt.open(uri)
    try:
        info = conn.getInfo()
    finally:
        conn.close()
    return int(info[2]), int(info[1]) * 1024 * 1024


def capacity(cfg: NodeConfig) -> Resources:
    cpus, memory = cfg.cpus, parse_quantity(cfg.memory) if cfg.memory else None
    if cpus is None or memory is None:
        host_cpus, host_memory = host_capacity(cfg.libvirt_uri)
        cpus = host_cpus if cpus is None else cpus
        memory = host_memory if memory is None else memory
    return Resources(cpu_millis=cpus * 1000, memory_bytes=int(memory))


def _arch() -> str:
    return {"x86_64": "amd64", "aarch64": "arm64"}.get(platform.machine(), platform.machine())


def _os_image(path: Path = Path("/etc/os-release")) -> str:
    """os-release's PRETTY_NAME, as the kubelet reports its OS image."""
    with contextlib.suppress(OSError):
        for line in path.read_text().splitlines():
            key, _, value = line.partition("=")
            if key == "PRETTY_NAME":
                return value.strip().strip('"')
    return "Linux"


def _libvirt_version(uri: str) -> str:
    import libvirt

    try:
        conn = libvirt.open(uri)
    except libvirt.libvirtError:
        return ""
    try:
        n = conn.getLibVersion()
    finally:
        conn.close()
    return f"{n // 1_000_000}.{n // 1000 % 1000}.{n % 1000}"


def _read(path: str) -> str:
    with contextlib.suppress(OSError):
        return Path(path).read_text().strip()
    return ""


def _system_uuid(machine_id: str, node: str) -> str:
    """A node's SMBIOS-like UUID: several nodes may share one host (and its DMI UUID, which
    only root reads), so each is derived from the host's machine id and the node's name."""
    return str(uuid.uuid5(uuid.NAMESPACE_OID, f"virtstream/{machine_id}/{node}"))


def system_info(cfg: NodeConfig) -> NodeSystemInfo:
    """What `kubectl get nodes -o wide` shows of a node: the guests' runtime is libvirt."""
    version = _libvirt_version(cfg.libvirt_uri)
    machine_id = _read("/etc/machine-id") or _read("/var/lib/dbus/machine-id")
    return NodeSystemInfo(
        machine_id=machine_id,
        system_uuid=_system_uuid(machine_id, cfg.name),
        boot_id=_read("/proc/sys/kernel/random/boot_id"),
        kubelet_version=KUBERNETES_VERSION,
        os_image=_os_image(),
        kernel_version=platform.release(),
        container_runtime_version=f"libvirt://{version}" if version else "",
        architecture=_arch(),
        operating_system="linux",
    )


def labels(cfg: NodeConfig) -> dict[str, str]:
    return {
        "kubernetes.io/hostname": cfg.name,
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": _arch(),
        "kubevirt.io/schedulable": "true",
        "virtstream.io/host": socket.gethostname(),
    }


def destroy_unowned_domains(uri: str, owned: set[str]) -> list[str]:
    """Destroy and undefine the domains on `uri` whose names are not in `owned`; returns
    their names. Disks are left alone: the disk dir is shared by the nodes, and a VMI of
    that name may run elsewhere."""
    import libvirt

    conn = libvirt.open(uri)
    gone = []
    try:
        for dom in conn.listAllDomains():
            name = dom.name()
            if name in owned:
                continue
            with contextlib.suppress(libvirt.libvirtError):
                if dom.isActive():
                    dom.destroy()
            with contextlib.suppress(libvirt.libvirtError):
                dom.undefine()
            gone.append(name)
    finally:
        conn.close()
    return gone
