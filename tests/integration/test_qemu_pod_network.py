"""The pod network in qemu mode (TCG), one `virtstream up --hypervisor qemu --nodes 2` for
the module: each VMI gets an address of its node's subnet (a bridge per node in the
cluster's network namespace, DHCP from the address its PodScheduled allocated), shown in
status.interfaces and the IP column of kubectl and `virtstream get vmi -o wide`; two guests
reach each other; `virtstream ssh` runs a command; an ssh session opened before a live
migration still answers after it, with the same address; the interface's `ports` bound
what port-forward reaches; stopping the cluster removes its namespace and DHCP servers.

Skipped without the qemu packages or root."""

from __future__ import annotations

import json
import os
import queue
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from host import pod_network
from ops import guest_images
from tests.conftest import REPO
from tests.integration.polling import until
from tests.integration.qemu_support import qemu_marks
from tests.integration.qemu_up import BOOT_TIMEOUT, VMIS, VMS, Cluster
from tests.integration.test_qemu_guests import example

pytestmark = qemu_marks

KUBECTL = shutil.which("kubectl", path=str(Path(sys.executable).parent)) or "kubectl"
MIGRATIONS = "/apis/kubevirt.io/v1/namespaces/default/virtualmachineinstancemigrations"


@pytest.fixture(scope="module")
def key() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="vs-key-") as d:
        path = Path(d) / "id"
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(path)], check=True)
        yield path


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    guest_images.ensure_images()
    with tempfile.TemporaryDirectory(prefix="vs-pn-") as d:
        c = Cluster(Path(d), nodes=2)
        netns = pod_network.netns_name(Path(d))
        try:
            c.start()
            yield c
        finally:
            c.stop()
        # the cluster's namespace (its bridges and taps) and DHCP servers are gone with it
        assert not Path("/run/netns", netns).exists()
        assert not (Path(d) / "podnet").exists()


def guest(name: str, key: Path, ports: list[int] | None = None) -> dict[str, Any]:
    vmi = example("vmi-nocloud.yaml")
    vmi["metadata"]["name"] = name
    for volume in vmi["spec"]["volumes"]:
        if "cloudInitNoCloud" in volume:
            volume["cloudInitNoCloud"]["userData"] = (
                f"#cloud-config\nhostname: {name}\n"
                f"ssh_authorized_keys:\n  - {key.with_suffix('.pub').read_text().strip()}\n"
            )
    iface: dict[str, Any] = {"name": "default", "masquerade": {}}
    if ports:
        iface["ports"] = [{"port": p} for p in ports]
    vmi["spec"]["domain"]["devices"]["interfaces"] = [iface]
    vmi["spec"]["networks"] = [{"name": "default", "pod": {}}]
    return vmi


def address(cluster: Cluster, name: str) -> str:
    """The VMI's IPv4 address once status.interfaces shows one (from the guest agent; its
    IPv6 link-local address comes first, before the DHCP lease)."""

    def seen() -> str | None:
        ifaces = cluster.vmi(name)["status"].get("interfaces") or []
        addresses = (str(a) for i in ifaces for a in i.get("ipAddresses") or ())
        return next((a for a in addresses if ":" not in a), None)

    return str(until(seen, timeout=BOOT_TIMEOUT, what=f"{name}'s address"))


def ssh_args(key: Path, name: str, *command: str) -> list[str]:
    return [
        "ssh", f"root@vmi/{name}", "-i", str(key), "--known-hosts", str(key.parent / "kh"),
        "-t", "-o StrictHostKeyChecking=accept-new", "-t", "-o BatchMode=yes",
        "-t", "-o ServerAliveInterval=0", *command,
    ]  # fmt: skip


class Session:
    """An ssh session through the api: lines in on stdin, the guest's answers out."""

    def __init__(self, cluster: Cluster, key: Path, name: str) -> None:
        env = {**os.environ, "VIRTSTREAM_SERVER": f"http://127.0.0.1:{cluster.port}"}
        script = 'while read line; do echo "got $line on $(hostname)"; done'
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "cli.main", *ssh_args(key, name, "-c", script)],
            cwd=REPO, env=env, text=True, bufsize=1,
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        )  # fmt: skip
        self.lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(line.rstrip("\n"))

    def ask(self, word: str, timeout: float = 60.0) -> str:
        assert self.proc.stdin is not None
        self.proc.stdin.write(word + "\n")
        self.proc.stdin.flush()
        try:
            return self.lines.get(timeout=timeout)
        except queue.Empty:
            err = (
                self.proc.stderr.read() if self.proc.poll() is not None and self.proc.stderr else ""
            )
            raise AssertionError(
                f"no answer to {word!r} (exit {self.proc.poll()}): {err}"
            ) from None

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(timeout=10)


def test_addresses_ssh_and_a_session_that_survives_a_live_migration(
    cluster: Cluster, key: Path
) -> None:
    for name in ("pn-a", "pn-b"):
        assert cluster.http.post(
            VMIS, json=guest(name, key, ports=[22] if name == "pn-b" else None)
        ).is_success
    for name in ("pn-a", "pn-b"):
        cluster.phase(name, "Running")
    ip = {name: address(cluster, name) for name in ("pn-a", "pn-b")}
    node = {name: cluster.vmi(name)["status"]["nodeName"] for name in ip}
    assert sorted(node.values()) == ["node-1", "node-2"]  # spread: one guest per node
    for name, addr in ip.items():  # an address of its node's subnet (node-N: 10.244.N.0/24)
        assert addr.startswith(f"10.244.{node[name].removeprefix('node-')}."), (name, addr)
    assert ip["pn-a"] != ip["pn-b"]
    iface = cluster.vmi("pn-a")["status"]["interfaces"][0]
    assert iface["name"] == "default" and iface["interfaceName"] == "eth0"
    assert iface["infoSource"] == "domain, guest-agent" and ip["pn-a"] in iface["ipAddresses"]

    # the IP column, as kubectl and `virtstream get vmi -o wide` print it
    env = {**os.environ, "KUBECONFIG": str(cluster.data_dir / "kubeconfig")}
    done = subprocess.run(
        [KUBECTL, "get", "vmi", "pn-a"], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert ip["pn-a"] in done.stdout.splitlines()[1].split(), done.stdout
    wide = cluster.cli("get", "vmi", "pn-b", "-o", "wide")
    assert wide.returncode == 0, wide.stderr
    assert ip["pn-b"] in wide.stdout.splitlines()[1].split(), wide.stdout

    # `virtstream ssh` runs a command: the guest holds its address and reaches the other
    done = cluster.cli(
        *ssh_args(key, "pn-a", "-c", f"ip -4 -o addr show eth0; ping -c 1 -W 10 {ip['pn-b']}")
    )
    assert done.returncode == 0, done.stderr
    assert f"inet {ip['pn-a']}/24" in done.stdout
    assert "1 packets received" in done.stdout, done.stdout

    # the interface's ports bound what port-forward reaches (pn-b lets in 22 only)
    refused = cluster.cli("port-forward", "vmi/pn-b", "0:80")
    assert refused.returncode == 1
    assert "port 80 of the guest is not among its interface's ports (22)" in refused.stderr

    # an ssh session opened before a live migration answers after it
    session = Session(cluster, key, "pn-a")
    try:
        assert session.ask("before") == "got before on pn-a"
        source = node["pn-a"]
        migration = {
            "apiVersion": "kubevirt.io/v1",
            "kind": "VirtualMachineInstanceMigration",
            "metadata": {"name": "pn-a-away"},
            "spec": {"vmiName": "pn-a"},
        }
        assert cluster.http.post(MIGRATIONS, json=migration).is_success
        until(
            lambda: (
                cluster.http.get(f"{MIGRATIONS}/pn-a-away").json().get("status", {}).get("phase")
                == "Succeeded"
            ),
            timeout=BOOT_TIMEOUT,
            what="the migration",
        )
        moved = cluster.vmi("pn-a")["status"]["nodeName"]
        assert moved != source
        time.sleep(1)  # the source's QEMU is gone: what answers now is the target's guest
        assert session.ask("after") == "got after on pn-a"
        assert session.proc.poll() is None
    finally:
        session.close()
    # the address moved with the guest: the same, now on the target's bridge
    assert address(cluster, "pn-a") == ip["pn-a"]
    net = pod_network.load(cluster.data_dir / "podnet")
    routes = subprocess.run(
        ["ip", "-n", net.netns, "-j", "route", "show", f"{ip['pn-a']}/32"],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    assert [r["dev"] for r in json.loads(routes)] == [net.nodes[moved].bridge]
    for name in ("pn-a", "pn-b"):
        cluster.delete_vmi(name)


NADS = "/apis/k8s.cni.cncf.io/v1/namespaces/default/network-attachment-definitions"
BLUE = {
    "cniVersion": "0.3.1", "name": "blue", "type": "bridge", "bridge": "blue",
    "ipam": {"type": "host-local", "ranges": [[{
        "subnet": "10.200.0.0/24", "rangeStart": "10.200.0.10", "rangeEnd": "10.200.0.20",
    }]]},
}  # fmt: skip


def test_a_secondary_network_is_a_second_nic_on_its_bridge(cluster: Cluster, key: Path) -> None:
    """A `multus` network naming a `bridge` definition with `host-local` IPAM: the guest's
    second NIC is on that network's bridge in the cluster's namespace, with the address the
    scheduler allocated from the definition's range (by DHCP, no default route through it),
    shown in status.interfaces under the interface's name, and reachable from the
    namespace; deleting the VMI gives the address back."""
    nad = {
        "apiVersion": "k8s.cni.cncf.io/v1", "kind": "NetworkAttachmentDefinition",
        "metadata": {"name": "blue"}, "spec": {"config": json.dumps(BLUE)},
    }  # fmt: skip
    assert cluster.http.post(NADS, json=nad).is_success
    vmi = guest("pn-multus", key)
    vmi["spec"]["domain"]["devices"]["interfaces"].append({"name": "blue", "bridge": {}})
    vmi["spec"]["networks"].append({"name": "blue", "multus": {"networkName": "blue"}})
    assert cluster.http.post(VMIS, json=vmi).is_success
    cluster.phase("pn-multus", "Running")

    def blue() -> dict[str, Any] | None:
        for iface in cluster.vmi("pn-multus")["status"].get("interfaces") or []:
            if iface["name"] == "blue" and any("." in a for a in iface.get("ipAddresses") or ()):
                return dict(iface)
        return None

    iface = until(blue, timeout=BOOT_TIMEOUT, what="the second NIC's address")
    assert iface["interfaceName"] == "eth1" and iface["ipAddress"] == "10.200.0.10", iface
    net = pod_network.load(cluster.data_dir / "podnet")
    with pod_network.connect_in(net.netns, "10.200.0.10", 22, timeout=30) as sock:
        sock.setblocking(True)
        sock.settimeout(30)
        assert sock.recv(64).startswith(b"SSH-")  # the guest's SSH server, on that NIC
    routes = cluster.cli(*ssh_args(key, "pn-multus", "-c", "ip route"))
    assert routes.returncode == 0, routes.stderr
    defaults = [r for r in routes.stdout.splitlines() if r.startswith("default")]
    assert len(defaults) == 1 and "dev eth0" in defaults[0], routes.stdout

    cluster.delete_vmi("pn-multus")
    hosts = net.hosts_dir(pod_network.attachment_bridge("default/blue"))
    until(lambda: not list(hosts.iterdir()), what="the address given back")


def test_the_readmes_ssh_lines_run_as_printed(cluster: Cluster, tmp_path: Path) -> None:
    """The README's key, VM and ssh lines in a shell with the CLI on PATH, in a directory
    and a HOME of their own (so no known host yet, and no terminal to ask on): the VM
    carries the key, and the shell in its guest answers the lines sent to it."""
    readme = (REPO / "README.md").read_text()
    block = readme[readme.index("A VM that carries your") :]
    block = block[block.index("```sh\n") + 6 :]
    install, keygen, create, ssh = (
        line.split("  #")[0].strip() for line in block[: block.index("```")].splitlines()
    )
    env = {
        **os.environ,
        "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}",
        "VIRTSTREAM_SERVER": cluster.server,
        "HOME": str(tmp_path),
    }
    for line in (install, keygen, create):
        done = subprocess.run(
            ["bash", "-c", line], cwd=tmp_path, env=env, capture_output=True, text=True,
            timeout=120,
        )  # fmt: skip
        assert done.returncode == 0, (line, done.stderr)
    assert done.stdout.strip() == "virtualmachine.kubevirt.io/vm-ssh created"
    cluster.phase("vm-ssh", "Running")

    def shell() -> str | None:
        done = subprocess.run(
            ["bash", "-c", ssh], cwd=tmp_path, env=env, input="echo $(id -un) in $(hostname)\n",
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        return done.stdout if done.returncode == 0 and "root in" in done.stdout else None

    answered = until(shell, timeout=BOOT_TIMEOUT, what="a shell in vm-ssh", every=2)
    assert answered.strip() == "root in vm-ssh", answered
    known_hosts = tmp_path / ".ssh" / "kubevirt_known_hosts"
    known = known_hosts.read_text().splitlines()
    assert len(known) == 1 and " ssh-ed25519 " in known[0]  # the guest's key, accepted once
    forget = subprocess.run(  # what the README says to do after a restart
        ["ssh-keygen", "-R", "vmi/vm-ssh.default", "-f", str(known_hosts)],
        capture_output=True, text=True,
    )  # fmt: skip
    assert forget.returncode == 0 and "found: line 1" in forget.stdout, forget.stdout
    assert cluster.http.delete(f"{VMS}/vm-ssh").is_success
