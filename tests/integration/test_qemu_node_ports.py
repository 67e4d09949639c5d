"""A guest reached through a NodePort Service in qemu mode (TCG), one `virtstream up
--hypervisor qemu --nodes 1`: `virtstream expose vmi NAME --port 22 --type NodePort`, the
Service's Endpoints list the guest's address, and `ssh -p NODEPORT
root@127.0.0.1` (the local OpenSSH client, with the key cloud-init gave root) runs a command
in the guest; the launcher pod's `kubectl logs` are the launcher's log and, with
`-c guest-console-log`, the guest's serial console, as the `kubernetes` client reads them.

Skipped without the qemu packages or root."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client, config

from ops import guest_images
from tests.integration.polling import until
from tests.integration.qemu_support import qemu_marks
from tests.integration.qemu_up import BOOT_TIMEOUT, VMIS, Cluster
from tests.integration.test_qemu_pod_network import guest

pytestmark = qemu_marks

KUBECTL = shutil.which("kubectl", path=str(Path(sys.executable).parent)) or "kubectl"


@pytest.fixture(scope="module")
def key() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="vs-key-") as d:
        path = Path(d) / "id"
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(path)], check=True)
        yield path


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    guest_images.ensure_images()
    with tempfile.TemporaryDirectory(prefix="vs-np-") as d:
        c = Cluster(Path(d), nodes=1)
        try:
            c.start()
            yield c
        finally:
            c.stop()


def kubectl(cluster: Cluster, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "KUBECONFIG": str(cluster.data_dir / "kubeconfig")}
    return subprocess.run([KUBECTL, *args], env=env, capture_output=True, text=True, timeout=60)


def test_ssh_over_a_node_port_reaches_the_guest_and_kubectl_logs_its_launcher(
    cluster: Cluster, key: Path
) -> None:
    assert cluster.http.post(VMIS, json=guest("np-guest", key)).is_success
    cluster.phase("np-guest", "Running")
    cluster.console_shows("np-guest", r"^np-guest:~# ")
    done = cluster.cli(
        "expose", "vmi", "np-guest", "--port", "22", "--name", "np-ssh", "--type", "NodePort"
    )
    assert done.returncode == 0, done.stderr
    svc = json.loads(kubectl(cluster, "get", "svc", "np-ssh", "-o", "json").stdout)
    node_port = svc["spec"]["ports"][0]["nodePort"]

    def endpoint() -> str | None:
        ep = json.loads(kubectl(cluster, "get", "endpoints", "np-ssh", "-o", "json").stdout)
        subsets = ep.get("subsets") or [{}]
        return next((a["ip"] for a in subsets[0].get("addresses") or []), None)

    # the pod network's address (10.244.N.M), or QEMU's user-mode one where the host cannot
    # make a pod network
    address = str(until(endpoint, timeout=BOOT_TIMEOUT, what="the endpoint"))
    assert address.startswith(("10.244.", "10.0.2."))

    def ssh() -> subprocess.CompletedProcess[str] | None:
        done = subprocess.run(
            ["ssh", "-p", str(node_port), "-i", str(key), "-o", "BatchMode=yes",
             "-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null",
             "-o", "ConnectTimeout=20", "root@127.0.0.1", "echo $(hostname) $(id -un)"],
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        return done if done.returncode == 0 else None

    answered = until(ssh, timeout=BOOT_TIMEOUT, what="ssh over the node port")
    assert answered.stdout.strip() == "np-guest root"

    pod = json.loads(
        kubectl(cluster, "get", "pods", "-l", "vm.kubevirt.io/name=np-guest", "-o", "json").stdout
    )["items"][0]
    name = pod["metadata"]["name"]
    assert pod["status"]["podIP"] == address
    console = kubectl(cluster, "logs", name, "-c", "guest-console-log")
    assert console.returncode == 0, console.stderr
    assert "np-guest:~# " in console.stdout
    launcher = kubectl(cluster, "logs", name, "--tail", "5")
    assert launcher.returncode == 0, launcher.stderr
    assert 0 < len(launcher.stdout.splitlines()) <= 5
    api: Any = client.CoreV1Api(config.new_client_from_config(str(cluster.data_dir / "kubeconfig")))
    text = api.read_namespaced_pod_log(name, "default", container="guest-console-log")
    assert "np-guest:~# " in text
    wrong = kubectl(cluster, "logs", name, "-c", "nope")
    assert wrong.returncode == 1
    assert f"container nope is not valid for pod {name}" in wrong.stderr
    kubectl(cluster, "delete", "svc", "np-ssh")
    cluster.delete_vmi("np-guest")
