"""`python -m services.handler --node NAME --nats-url URL --run-dir DIR`: one virt-handler.

`--hypervisor qemu --libvirt-uri URI` runs real QEMU guests on that node's libvirtd (an
ops.node_libvirtd.NodeRuntime, started by `virtstream up` or the test fixtures)."""

from __future__ import annotations

if __name__ == "__main__":  # its own process: before nats, litestar and structlog
    from services.runtime import lean

    lean.skip_unused()

import argparse
import sys
from pathlib import Path

from eventstore import connection
from eventstore.settings import StreamSettings
from host import pod_network
from services.handler.node_info import LaunchSettings, NodeConfig, qemu_pid_dir_of
from services.handler.service import Fenced, HandlerConfig, serve
from services.launcher.domain_xml import DEFAULT_DISK_DIR, DomainType
from services.launcher.kvm_probe import domain_type as probe_domain_type
from services.launcher.uris import TEST_URI
from services.runtime import logs, loop, metrics_access, timeouts
from services.runtime.mtls import TlsFiles


def launch_settings(a: argparse.Namespace) -> LaunchSettings:
    if a.hypervisor == "test":
        return LaunchSettings(disk_dir=a.disk_dir)
    if a.libvirt_uri == TEST_URI:
        raise SystemExit("--hypervisor qemu needs --libvirt-uri (the node's libvirtd)")
    # KVM when the guest image boots with it, else TCG (cached per host and image)
    dtype = (
        DomainType(a.domain_type)
        if a.domain_type
        else probe_domain_type(
            a.libvirt_uri, Path(a.image_dir) if a.image_dir else None
        ).domain_type
    )
    return LaunchSettings(
        hypervisor_uri=a.libvirt_uri,
        domain_type=dtype,
        disk_dir=a.disk_dir,
        image_dir=a.image_dir,
        qemu_pid_dir=a.qemu_pid_dir or qemu_pid_dir_of(a.libvirt_uri),
        pod_network_dir=a.pod_network,
        node=a.node,
    )


def pod_cidr(a: argparse.Namespace) -> str:
    """The node's subnet of the cluster's pod network ("": none, or not this node's)."""
    if a.hypervisor == "test" or not a.pod_network:
        return ""
    node = pod_network.load(a.pod_network).nodes.get(a.node)
    return node.cidr if node is not None else ""


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m services.handler", description=__doc__)
    p.add_argument("--node", required=True)
    p.add_argument(
        "--nats-url", default="nats://127.0.0.1:4222", help="one URL or a comma-separated list"
    )
    connection.add_arguments(p)
    p.add_argument("--run-dir", required=True, help="launcher sockets go in <dir>/<node>/")
    p.add_argument("--cpus", type=int, default=None, help="default: libvirt getInfo()")
    p.add_argument("--memory", default=None, help="e.g. 16Gi; default: libvirt getInfo()")
    p.add_argument("--hypervisor", default="test", choices=["test", "qemu"])
    p.add_argument("--libvirt-uri", default=TEST_URI, help="qemu: the node's libvirtd")
    p.add_argument(
        "--domain-type", default=None, choices=["qemu", "kvm"], help="qemu: default: probed"
    )
    p.add_argument("--disk-dir", default=DEFAULT_DISK_DIR, help="the VMs' disks (shared)")
    p.add_argument("--image-dir", default=None, help="containerDisk images by name")
    p.add_argument("--qemu-pid-dir", default=None, help="default: from a NodeRuntime's URI")
    p.add_argument("--pod-network", default=None, help="qemu: the cluster's pod network (its dir)")
    p.add_argument("--no-pod-network", default="", help="qemu: why the cluster has no pod network")
    p.add_argument("--address", default="127.0.0.1")
    p.add_argument(
        "--console-port", type=int, default=0, help="qemu: console/VNC server (0: any free)"
    )
    p.add_argument("--metrics-port", type=int, default=None)
    metrics_access.add_arguments(p)
    p.add_argument(
        "--console-tls-cert",
        type=Path,
        help="qemu: the console server's certificate; with it only a client certificate of "
        "--console-client-ca named kubevirt.io:system:client:virt-handler (the api) is served",
    )
    p.add_argument("--console-tls-key", type=Path, help="the certificate's key")
    p.add_argument("--console-client-ca", type=Path, help="the CA of the api's certificate")
    p.add_argument(
        "--node-timeout",
        type=float,
        default=timeouts.NODE_TIMEOUT,
        help="the controller's node timeout (give both the same): without a heartbeat on "
        "the bus for half of it, this handler stops every VM of its node and exits",
    )
    p.add_argument("--no-fence", action="store_true", help="never stop the VMs off the bus")
    p.add_argument("--heartbeat-interval", type=float, default=0.0, help="default: from it")
    p.add_argument("--stream", default="", help="event stream name (tests use others)")
    p.add_argument("--storage", default="", choices=["", "file", "memory"])
    a = p.parse_args(argv)
    connection.from_arguments(a)
    access = metrics_access.from_arguments(p, a)
    console_files = (a.console_tls_cert, a.console_tls_key, a.console_client_ca)
    if any(console_files) and not all(console_files):
        p.error("--console-tls-cert, --console-tls-key and --console-client-ca go together")
    logs.configure()
    cfg = HandlerConfig(
        node=NodeConfig(
            name=a.node,
            cpus=a.cpus,
            memory=a.memory,
            hypervisor=a.hypervisor,
            address=a.address,
            console_port=a.console_port,
            libvirt_uri=a.libvirt_uri,
            pod_cidr=pod_cidr(a),
            pod_network_message=a.no_pod_network,
        ),
        nats_url=a.nats_url,
        run_dir=a.run_dir,
        metrics_port=a.metrics_port,
        metrics_access=access,
        console_tls=TlsFiles(*console_files) if all(console_files) else None,
        heartbeat_interval=a.heartbeat_interval or timeouts.heartbeat_interval(a.node_timeout),
        fence_timeout=0.0 if a.no_fence else timeouts.fence_timeout(a.node_timeout),
        settings=StreamSettings.from_env(
            **({"name": a.stream, "dlq_name": f"{a.stream}_DLQ"} if a.stream else {}),
            **({"storage": a.storage} if a.storage else {}),
        ),
        launch=launch_settings(a),
    )
    try:
        loop.run(serve(cfg), "virt-handler")
    except Fenced as e:  # a supervisor starts it again, on the log's word
        print(f"virt-handler: {e}", file=sys.stderr)
        raise SystemExit(4) from None


if __name__ == "__main__":
    main()
