"""The cluster's pod network (qemu mode): a network namespace of its own holding a Linux
bridge per node, each with its node's subnet, a DHCP server (dnsmasq) that hands each
guest the address its scheduling event allocated, and a tap per guest.

Every "node" of `virtstream up` is a process on one host, so the namespace is what keeps
clusters side by side apart: its name comes from the data dir, the names inside it (`br1`,
`br2`, ..., `vt<pod uid>`) cannot meet another cluster's or the host's, and removing it
removes everything in it. The host's own interfaces and routes are never touched.

A guest's tap is made by its node's libvirtd (`<interface type="ethernet">`, libvirt's
`vnetN` on the host); its launcher moves it into the namespace under its pod's name and
onto its node's bridge, and routes the guest's address (a /32, more specific than any
node's subnet) to that bridge. After a live migration the target's launcher does the same
on its node: the route follows the guest, whose address, gateway (answered by every bridge:
Linux replies to ARP for any of its addresses) and TCP connections stay as they were.

Layout of `<data dir>/podnet/`: `network.json` (PodNetwork), per node `<node>.hosts/`
(dnsmasq's `--dhcp-hostsdir`: one `MAC,IP` file per pod, read on change), `<node>.pid`,
`<node>.leases`, `<node>.log`.
"""

from __future__ import annotations

import contextlib
import ctypes
import fcntl
import hashlib
import ipaddress
import os
import shutil
import signal
import socket
import subprocess
from pathlib import Path

import msgspec

#: node i (1-based) gets 10.244.i.0/24, as Kubernetes' default pod CIDR hands out /24s
POD_CIDR_PREFIX = "10.244"
FILE = "network.json"
_CLONE_NEWNET = 0x40000000


class PodNetworkUnavailable(Exception):
    """The host cannot make the pod network (no privilege, no dnsmasq, ...): one line why."""


class NodeNetwork(msgspec.Struct, frozen=True, kw_only=True):
    bridge: str
    cidr: str  # "10.244.1.0/24"
    gateway: str  # the bridge's address, the guests' default route and DHCP server


class PodNetwork(msgspec.Struct, frozen=True, kw_only=True):
    netns: str
    dir: str
    nodes: dict[str, NodeNetwork]

    def hosts_dir(self, node: str) -> Path:
        return Path(self.dir) / f"{node}.hosts"


def netns_name(data_dir: Path) -> str:
    digest = hashlib.sha256(str(data_dir.resolve()).encode()).hexdigest()[:12]
    return f"virtstream-{digest}"


def tap_name(node: str, vmi_uid: str) -> str:
    """The guest's tap in the namespace (15 characters at most; one per node, so the
    source's and the target's of a migration differ)."""
    return "vt" + hashlib.sha256(f"{node}/{vmi_uid}".encode()).hexdigest()[:12]


def load(directory: str | Path) -> PodNetwork:
    return msgspec.json.decode((Path(directory) / FILE).read_bytes(), type=PodNetwork)


def ensure(data_dir: Path, nodes: list[str]) -> PodNetwork:
    """This data dir's pod network: the one a previous `up --keep-vms` left, when it has
    these nodes and still runs (its guests keep their addresses), else a new one."""
    with contextlib.suppress(OSError, msgspec.DecodeError):
        net = load(data_dir / "podnet")
        alive = all(_dhcp_alive(net, node) for node in net.nodes)
        if list(net.nodes) == nodes and Path("/run/netns", net.netns).exists() and alive:
            return net
    return create(data_dir, nodes)


def _dhcp_alive(net: PodNetwork, name: str) -> bool:
    try:
        os.kill(int((Path(net.dir) / f"{name}.pid").read_text().strip()), 0)
    except (OSError, ValueError):
        return False
    return True


def _ip(*args: str, netns: str | None = None) -> None:
    cmd = ["ip", *(("-n", netns) if netns else ()), *args]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=10)
    if done.returncode != 0:
        raise PodNetworkUnavailable(f"{' '.join(cmd)}: {done.stderr.strip() or done.returncode}")


def create(data_dir: Path, nodes: list[str]) -> PodNetwork:
    """The namespace, a bridge and a DHCP server per node (any earlier one of this data dir
    is removed first). Raises PodNetworkUnavailable with the reason."""
    dnsmasq = shutil.which("dnsmasq") or shutil.which("dnsmasq", path="/usr/sbin")
    if dnsmasq is None:
        raise PodNetworkUnavailable("dnsmasq is not installed (apt-get install dnsmasq-base)")
    if shutil.which("ip") is None:
        raise PodNetworkUnavailable("iproute2's ip is not installed")
    destroy(data_dir)
    directory = data_dir / "podnet"
    directory.mkdir(parents=True, exist_ok=True)
    netns = netns_name(data_dir)
    net = PodNetwork(
        netns=netns,
        dir=str(directory),
        nodes={
            node: NodeNetwork(
                bridge=f"br{i}",
                cidr=f"{POD_CIDR_PREFIX}.{i}.0/24",
                gateway=f"{POD_CIDR_PREFIX}.{i}.1",
            )
            for i, node in enumerate(nodes, start=1)
        },
    )
    try:
        _ip("netns", "add", netns)
        _ip("link", "set", "lo", "up", netns=netns)
        # routing between the nodes' subnets (this namespace's own setting, not the host's)
        _sysctl(netns, "net.ipv4.ip_forward=1")
        for node, n in net.nodes.items():
            _ip("link", "add", n.bridge, "type", "bridge", "forward_delay", "0", netns=netns)
            _ip("addr", "add", f"{n.gateway}/24", "dev", n.bridge, netns=netns)
            _ip("link", "set", n.bridge, "up", netns=netns)
            _start_dhcp(dnsmasq, net, node, n, router=True)
    except (PodNetworkUnavailable, OSError, subprocess.SubprocessError) as e:
        destroy(data_dir)
        raise PodNetworkUnavailable(str(e)) from None
    (directory / FILE).write_bytes(msgspec.json.encode(net))
    return net


def _sysctl(netns: str, setting: str) -> None:
    cmd = ["ip", "netns", "exec", netns, "sysctl", "-qw", setting]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=10)
    if done.returncode != 0:
        raise PodNetworkUnavailable(f"sysctl {setting} in {netns}: {done.stderr.strip()}")


def _start_dhcp(dnsmasq: str, net: PodNetwork, name: str, n: NodeNetwork, router: bool) -> None:
    """The DHCP server of a bridge, its files named `name` (a node's, or a secondary
    network's bridge); `router`: it offers its bridge as the guests' default route."""
    hosts = net.hosts_dir(name)
    hosts.mkdir(parents=True, exist_ok=True)
    base = Path(net.dir) / name
    subnet = ipaddress.ip_network(n.cidr, strict=False)
    cmd = [
        "ip", "netns", "exec", net.netns, dnsmasq,
        "--conf-file=/dev/null", "--port=0", "--no-resolv", "--no-hosts",
        f"--interface={n.bridge}", "--bind-interfaces", "--except-interface=lo",
        # only the pods the log gave an address get one (static: no dynamic pool)
        f"--dhcp-range={subnet.network_address},static,{subnet.netmask},infinite",
        *(() if router else ("--dhcp-option=3",)),  # option 3 empty: no default route
        f"--dhcp-hostsdir={hosts}", f"--dhcp-leasefile={base}.leases",
        "--dhcp-authoritative", f"--pid-file={base}.pid", f"--log-facility={base}.log",
        "--log-dhcp", "--user=root", "--group=root",
    ]  # fmt: skip
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=10)
    if done.returncode != 0:
        raise PodNetworkUnavailable(f"dnsmasq on {n.bridge}: {done.stderr.strip()}")


def destroy(data_dir: Path) -> None:
    """Stop the DHCP servers and remove the namespace (its bridges and taps go with it)."""
    directory = data_dir / "podnet"
    for pidfile in directory.glob("*.pid") if directory.is_dir() else ():
        with contextlib.suppress(ValueError, OSError):
            os.kill(int(pidfile.read_text().strip()), signal.SIGTERM)
        pidfile.unlink(missing_ok=True)
    netns = netns_name(data_dir)
    if Path("/run/netns", netns).exists():
        subprocess.run(["ip", "netns", "del", netns], capture_output=True, timeout=10)
    if directory.is_dir():
        shutil.rmtree(directory, ignore_errors=True)


# ---------------------------------------------------------------- a guest's tap and route
def plug(
    net: PodNetwork,
    node: str,
    host_tap: str,
    vmi_uid: str,
    mac: str,
    address: str,
    routed: bool = True,
) -> str:
    """Give the guest with `mac` its `address` (DHCP) and put its tap `host_tap` on the
    node's bridge (once); `routed`: the address is routed to that bridge. Returns the
    tap's name in the namespace."""
    n = net.nodes[node]
    name = tap_name(node, vmi_uid)
    (net.hosts_dir(node) / name).write_text(f"{mac},{address}\n")
    if not _in_netns(net.netns, name):
        _ip("link", "set", host_tap, "netns", net.netns, "name", name)
        _ip("link", "set", name, "master", n.bridge, "up", netns=net.netns)
    if routed:
        _ip("route", "replace", f"{address}/32", "dev", n.bridge, netns=net.netns)
    return name


def attachment_bridge(definition: str) -> str:
    """The bridge of a secondary network (a definition's "namespace/name") in the
    namespace: one for the cluster, as every node's guests share one L2 segment."""
    return "vb" + hashlib.sha256(definition.encode()).hexdigest()[:12]


def attach(
    net: PodNetwork,
    node: str,
    host_tap: str,
    vmi_uid: str,
    mac: str,
    *,
    network: str,
    definition: str,
    address: str,
    subnet: str,
    gateway: str,
) -> str:
    """Put the guest's tap `host_tap` (its interface on the VMI's `network`) on the bridge
    of `definition`, made (with its DHCP server, the `gateway` address of `subnet`, no
    default route) by whichever guest needs it first, and give the NIC with `mac` its
    `address`. Returns the tap's name in the namespace."""
    bridge = attachment_bridge(definition)
    prefix = ipaddress.ip_network(subnet, strict=False).prefixlen
    n = NodeNetwork(bridge=bridge, cidr=subnet, gateway=gateway)
    with open(Path(net.dir) / f"{bridge}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # launchers of one cluster, each its own process
        if not _in_netns(net.netns, bridge):
            _ip("link", "add", bridge, "type", "bridge", "forward_delay", "0", netns=net.netns)
            _ip("addr", "add", f"{gateway}/{prefix}", "dev", bridge, netns=net.netns)
            _ip("link", "set", bridge, "up", netns=net.netns)
        if not _dhcp_alive(net, bridge):
            dnsmasq = shutil.which("dnsmasq") or shutil.which("dnsmasq", path="/usr/sbin")
            if dnsmasq is None:
                raise PodNetworkUnavailable("dnsmasq is not installed")
            _start_dhcp(dnsmasq, net, bridge, n, router=False)
    name = tap_name(node, f"{vmi_uid}/{network}")
    (net.hosts_dir(bridge) / name).write_text(f"{mac},{address}\n")
    if not _in_netns(net.netns, name):
        _ip("link", "set", host_tap, "netns", net.netns, "name", name)
        _ip("link", "set", name, "master", bridge, "up", netns=net.netns)
    return name


def detach(net: PodNetwork, node: str, vmi_uid: str, network: str, definition: str) -> None:
    """Forget the guest's address on a secondary network (as `unplug` on the pod's)."""
    bridge = attachment_bridge(definition)
    _forget(net, bridge, bridge, tap_name(node, f"{vmi_uid}/{network}"))


def _in_netns(netns: str, name: str) -> bool:
    cmd = ["ip", "-n", netns, "link", "show", "dev", name]
    return subprocess.run(cmd, capture_output=True, timeout=10).returncode == 0


def unplug(net: PodNetwork, node: str, vmi_uid: str) -> None:
    """Forget the guest's DHCP host entry and release its lease, so that the address can be
    given to another guest (the tap goes with its QEMU)."""
    _forget(net, node, net.nodes[node].bridge, tap_name(node, vmi_uid))


def _forget(net: PodNetwork, name: str, bridge: str, tap: str) -> None:
    """Remove the DHCP host entry `tap` of the server `name` on `bridge`, and its lease."""
    entry = net.hosts_dir(name) / tap
    try:
        mac, address = entry.read_text().strip().split(",", 1)
    except (OSError, ValueError):
        return
    entry.unlink(missing_ok=True)
    # dnsmasq keeps a removed file's entries until SIGHUP (which reads the dir afresh):
    # without it the address stays bound to this MAC and the next guest given it gets none
    with contextlib.suppress(OSError, ValueError):
        os.kill(int((Path(net.dir) / f"{name}.pid").read_text().strip()), signal.SIGHUP)
    release = shutil.which("dhcp_release") or shutil.which("dhcp_release", path="/usr/bin")
    if release is not None:
        cmd = ["ip", "netns", "exec", net.netns, release, bridge, address, mac]
        subprocess.run(cmd, capture_output=True, timeout=10)


# ------------------------------------------------------------- connections into the namespace
def _libc_setns(fd: int) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.setns(fd, _CLONE_NEWNET) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))


def socket_in(netns: str) -> socket.socket:
    """A TCP socket of the namespace `netns` (blocking call: it switches the calling
    thread's network namespace and back, so run it on a thread of its own)."""
    with open(f"/run/netns/{netns}") as target, open("/proc/thread-self/ns/net") as own:
        _libc_setns(target.fileno())
        try:
            return socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        finally:
            _libc_setns(own.fileno())


def connect_in(netns: str, address: str, port: int, timeout: float = 5.0) -> socket.socket:
    """A connected, non-blocking socket to `address:port` inside `netns` (blocking call)."""
    sock = socket_in(netns)
    sock.settimeout(timeout)
    try:
        sock.connect((address, port))
    except OSError:
        sock.close()
        raise
    sock.setblocking(False)
    return sock
