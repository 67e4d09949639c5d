"""The node a handler registers (NodeJoined from its configuration and what was probed of
its host) and how it runs its launchers (hypervisor URI, domain type, disk/image/pidfile
dirs). Pure: the probing of the host is `host.py`."""

from __future__ import annotations

from pathlib import Path

import msgspec

from events.catalog import NodeJoined, NodeSystemInfo, Resources
from events.envelope import output_meta
from events.meta import CLUSTER_SCOPE, Aggregate, Kind
from services.launcher.domain_xml import DEFAULT_DISK_DIR, DomainType
from services.launcher.uris import TEST_URI


class NodeConfig(msgspec.Struct, frozen=True, kw_only=True):
    name: str
    cpus: int | None = None
    memory: str | None = None  # a Kubernetes quantity, e.g. "16Gi"
    hypervisor: str = "test"
    address: str = "127.0.0.1"
    #: the console server's port (bound by the handler before it joins; 0: none)
    console_port: int = 0
    #: where capacity comes from (the node's libvirtd in qemu mode)
    libvirt_uri: str = TEST_URI
    #: the node's subnet on the cluster's pod network ("": none, user-mode networking)
    pod_cidr: str = ""
    pod_network_message: str = ""  # why it has none (the host could not make one)


class LaunchSettings(msgspec.Struct, frozen=True, kw_only=True):
    """What every launcher of this node gets (the zygote's spawn_launcher arguments)."""

    hypervisor_uri: str = TEST_URI
    domain_type: DomainType = DomainType.TEST
    #: shared by all nodes of one machine: migration then copies memory only
    disk_dir: str = DEFAULT_DISK_DIR
    image_dir: str | None = None
    qemu_pid_dir: str | None = None
    #: the cluster's pod network (host/pod_network.py's dir) and this node's name in it
    pod_network_dir: str | None = None
    node: str = ""

    def spawn_kwargs(self) -> dict[str, object]:
        return {
            "hypervisor_uri": self.hypervisor_uri,
            "domain_type": self.domain_type,
            "disk_dir": self.disk_dir,
            "image_dir": self.image_dir,
            "qemu_pid_dir": self.qemu_pid_dir,
            "pod_network_dir": self.pod_network_dir,
            "node": self.node,
        }


def qemu_pid_dir_of(uri: str) -> str | None:
    """A NodeRuntime's QEMU pidfile dir from its URI (`...?socket=<node dir>/sock/
    libvirt-sock` → `<node dir>/run/qemu`); None for other URIs."""
    _, _, sock = uri.partition("socket=")
    path = Path(sock.split("&", 1)[0]) if sock else None
    if path is None or path.parent.name != "sock":
        return None
    return str(path.parent.parent / "run" / "qemu")


def joined_event(
    cfg: NodeConfig,
    cap: Resources,
    node_labels: dict[str, str],
    now: float,
    info: NodeSystemInfo | None = None,
) -> NodeJoined:
    """NodeJoined from what was probed (pure): its id repeats while the node stays the
    same, so a restart within the duplicate window registers nothing new."""
    service = f"virt-handler-{cfg.name}"
    basis = f"{cap.cpu_millis}/{cap.memory_bytes}/{cfg.address}/{cfg.hypervisor}"
    if cfg.console_port:
        basis += f"/{cfg.console_port}"
    if cfg.pod_cidr or cfg.pod_network_message:
        basis += f"/{cfg.pod_cidr}/{cfg.pod_network_message}"
    agg = Aggregate(kind=Kind.NODE, namespace=CLUSTER_SCOPE, name=cfg.name)
    return NodeJoined(
        meta=output_meta(service, cfg.name, agg, f"NodeJoined/{basis}", now, None, cfg.name),
        node=cfg.name,
        capacity=cap,
        labels=node_labels,
        address=cfg.address,
        hypervisor=cfg.hypervisor,
        console_port=cfg.console_port,
        info=info or NodeSystemInfo(),
        pod_cidr=cfg.pod_cidr,
        pod_network_message=cfg.pod_network_message,
    )
