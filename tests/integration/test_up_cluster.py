"""`virtstream up` end to end: nats + api + controller + 2 handlers as supervised
subprocesses; a VM through its life over the KubeVirt REST API; a killed handler is
restarted; Ctrl-C shuts the VMs down and stops everything; `--demo` tours a VM, keeps the
cluster up in its own data dir and stops in words."""

from __future__ import annotations

import functools
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from cli.up import live_launchers
from ops.nats_server import free_port
from ops.supervisor import importable
from tests.integration.polling import until, up_client
from tests.integration.qemu_support import skip_reason as qemu_skip_reason

REPO = Path(__file__).resolve().parents[2]
VMS = "/apis/kubevirt.io/v1/namespaces/default/virtualmachines"
VMIS = "/apis/kubevirt.io/v1/namespaces/default/virtualmachineinstances"
SUB = "/apis/subresources.kubevirt.io/v1/namespaces/default/virtualmachines"

pytestmark = pytest.mark.skipif(
    not (importable("services.api") and importable("services.controller")),
    reason="api and controller are needed",
)


def _up(data_dir: Path, port: int, *extra: str, nats_port: int = 0) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "cli.main", "up", "--data-dir", str(data_dir), "--port",
         str(port), "--nats-port", str(nats_port or free_port()), *extra],
        cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        env={**os.environ, "COLUMNS": "120"},
    )  # fmt: skip


def _vmi(http: httpx.Client, name: str) -> dict[str, Any] | None:
    r = http.get(f"{VMIS}/{name}")
    return None if r.status_code == 404 else r.json()


def _kubectl_rows(data_dir: Path, *args: str) -> list[list[str]] | None:
    kubectl = Path(sys.executable).parent / "kubectl"
    env = {**os.environ, "KUBECONFIG": str(data_dir / "kubeconfig"), "HOME": str(data_dir)}
    done = subprocess.run([kubectl, *args], env=env, capture_output=True, timeout=30)
    rows = [line.split() for line in done.stdout.decode().splitlines()]
    return rows if done.returncode == 0 and len(rows) > 1 else None


def _handler_pid(data_dir: Path, node: str) -> int | None:
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmd = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if (
            b"services.handler" in cmd
            and node.encode() in cmd
            and str(data_dir).encode() in b" ".join(cmd)
        ):
            return int(proc.name)
    return None


@pytest.fixture
def data_dir() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="vs-up-") as d:
        yield Path(d)
        for pid in live_launchers(Path(d) / "run"):
            os.kill(pid, signal.SIGKILL)


def test_up_vm_lifecycle_restart_and_ctrl_c(data_dir: Path) -> None:
    port, nats_port = free_port(), free_port()
    up = _up(data_dir, port, "--nodes", "2", nats_port=nats_port)
    try:
        with up_client(port, timeout=5) as http:
            until(lambda: http.get(VMS).is_success)
            vm = {
                "apiVersion": "kubevirt.io/v1", "kind": "VirtualMachine",
                "metadata": {"name": "vm1", "namespace": "default"},
                "spec": {"runStrategy": "Always", "template": {"spec": {
                    "domain": {"memory": {"guest": "64Mi"}, "devices": {}},
                    "terminationGracePeriodSeconds": 0}}},
            }  # fmt: skip
            created = http.post(VMS, json=vm)
            assert created.is_success
            first = until(
                lambda: (v := _vmi(http, "vm1")) and v["status"].get("phase") == "Running" and v
            )
            uid1 = first["metadata"]["uid"]

            # what the create caused, by the id its response carried: the api's event, the
            # controller's and the handler's reactions, up to the domain running
            cid = created.headers["x-correlation-id"]
            done = subprocess.run(
                [sys.executable, "-m", "cli.main", "events", "--correlation", cid, "-o", "json",
                 "--nats-url", f"nats://127.0.0.1:{nats_port}"],
                cwd=REPO, capture_output=True, text=True, timeout=60,
            )  # fmt: skip
            assert done.returncode == 0, done.stderr
            caused = [json.loads(line) for line in done.stdout.splitlines() if line.strip()]
            assert {e["correlationId"] for e in caused} == {cid}
            assert [e["seq"] for e in caused] == sorted(e["seq"] for e in caused)
            types = [e["type"] for e in caused]
            assert types[0] == "VMCreated"
            assert {"VMICreated", "PodScheduled", "DomainStarted"} <= set(types), types

            # the kubeconfig `up` writes: kubectl with no flags sees the VM as on KubeVirt
            rows = until(
                lambda: (
                    (r := _kubectl_rows(data_dir, "get", "vms")) and r[1][2:3] == ["Running"] and r
                )
            )
            assert rows[0] == ["NAME", "AGE", "STATUS", "READY"]
            assert rows[1][0] == "vm1" and rows[1][2:] == ["Running", "True"]

            # a handler that dies is restarted by the supervisor; the VM keeps running
            node = first["status"]["nodeName"]
            pid = _handler_pid(data_dir, node)
            assert pid is not None
            os.kill(pid, signal.SIGKILL)
            until(lambda: (p := _handler_pid(data_dir, node)) and p != pid)
            assert _vmi(http, "vm1")["status"]["phase"] == "Running"  # type: ignore[index]

            assert http.put(f"{SUB}/vm1/restart", json={}).is_success
            second = until(
                lambda: (
                    (v := _vmi(http, "vm1"))
                    and v["metadata"]["uid"] != uid1
                    and v["status"].get("phase") == "Running"
                    and v
                )
            )
            assert second["metadata"]["uid"] != uid1

            assert http.put(f"{SUB}/vm1/stop", json={}).is_success
            until(lambda: _vmi(http, "vm1") is None)
            until(
                lambda: http.get(f"{VMS}/vm1").json()["status"].get("printableStatus") == "Stopped"
            )
            assert not live_launchers(data_dir / "run")

            assert http.put(f"{SUB}/vm1/start", json={}).is_success
            until(lambda: (v := _vmi(http, "vm1")) and v["status"].get("phase") == "Running")
        up.send_signal(signal.SIGINT)
        out, _ = up.communicate(timeout=60)
        assert up.returncode == 0, out.decode()
        assert b"restarted" in out
        assert not live_launchers(data_dir / "run")  # Ctrl-C shut the VM down
    finally:
        if up.poll() is None:
            up.kill()
            up.wait()


class Output:
    """A process's output, read by a thread so that the test can wait for a line."""

    def __init__(self, proc: subprocess.Popen[bytes]) -> None:
        self.proc = proc
        self.lines: list[str] = []
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for raw in self.proc.stdout:
            self.lines.append(raw.decode(errors="replace"))

    @property
    def text(self) -> str:
        return "".join(self.lines)

    def wait_for(self, text: str, timeout: float = 90.0) -> None:
        until(lambda: text in self.text or self.proc.poll() is not None, timeout, text)
        assert text in self.text, self.text

    def stop(self) -> int:
        self.proc.send_signal(signal.SIGINT)
        code = self.proc.wait(timeout=60)
        self.thread.join(timeout=5)
        return code


def _up_in(cwd: Path, port: int, *extra: str) -> Output:
    """`virtstream up` started in `cwd` with its default data dir."""
    return Output(
        subprocess.Popen(
            [sys.executable, "-m", "cli.main", "up", "--port", str(port),
             "--nats-port", str(free_port()), *extra],
            cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            env={**os.environ, "COLUMNS": "120", "PYTHONPATH": str(REPO)},
        )
    )  # fmt: skip


def test_up_demo_stays_up_in_its_own_data_dir(data_dir: Path) -> None:
    port = free_port()
    demo = _up_in(data_dir, port, "--demo", "--nodes", "2")
    try:
        demo.wait_for("The cluster keeps running")
        assert "demo passed" in demo.text and "VMI Running" in demo.text
        assert "decisions recorded reproduced, 0 differ" in demo.text  # the tour's what-if
        assert "$ virtstream start vm-cirros" in demo.text  # the narration
        assert re.search(r"vm-cirros\s+Paused\s+Running\s+node-\d", demo.text)  # the live table
        assert (data_dir / ".virtstream-demo").is_dir() and not (data_dir / ".virtstream").exists()
        logs = [p.name for p in (data_dir / ".virtstream-demo" / "logs").iterdir()]
        assert "handler-node-1.log" in logs and not [n for n in logs if " " in n]
        # still up for the README's commands: its first, an apply of the toured file, finds
        # nothing to change; a running VM is stopped on Ctrl-C, in words
        applied = subprocess.run(
            [sys.executable, "-m", "cli.main", "--server", f"https://127.0.0.1:{port}",
             "apply", "-f", "examples/kubevirt/vm-cirros.yaml"],
            cwd=REPO, capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert applied.stdout.strip() == "virtualmachine.kubevirt.io/vm-cirros unchanged", (
            applied.stderr
        )
        with up_client(port, timeout=5) as http:
            assert http.put(f"{SUB}/vm-cirros/start", json={}).is_success
            until(lambda: (v := _vmi(http, "vm-cirros")) and v["status"].get("phase") == "Running")
    finally:
        code = demo.stop()
    tail = demo.text.split("Ctrl-C stops the cluster")[-1]
    assert code == 0, demo.text
    assert "stopping VM default/vm-cirros" in tail
    assert not re.search(r": \d{3}\b", tail), tail  # no raw status codes
    assert not live_launchers(data_dir / ".virtstream-demo" / "run")

    # a plain `up` in the same place does not pick up the demo's objects
    plain = _up_in(data_dir, port)
    try:
        plain.wait_for("Ctrl-C stops the cluster")
        with up_client(port, timeout=5) as http:
            until(lambda: http.get(VMS).is_success)
            assert http.get(VMS).json()["items"] == []
    finally:
        assert plain.stop() == 0, plain.text
    assert "resuming" not in plain.text
    # the demo's data dir named again is resumed, and says so
    again = _up_in(data_dir, port, "--data-dir", ".virtstream-demo")
    try:
        again.wait_for("Ctrl-C stops the cluster")
        with up_client(port, timeout=5) as http:
            until(lambda: http.get(f"{VMS}/vm-cirros").is_success)
    finally:
        assert again.stop() == 0, again.text
    assert "resuming the cluster stored in" in again.text and ".virtstream-demo" in again.text


@pytest.mark.timeout(300)  # two `up`s one after the other
def test_a_node_the_next_up_does_not_run_is_not_ready_once_its_timeout_passed(
    data_dir: Path,
) -> None:
    """`up --nodes 2` (VMs kept), then `up --nodes 1` on the same data: node-2's handler is
    not coming back, so node-2 is NotReady as soon as the node timeout has passed since
    its last heartbeat (not a full timeout after the new controller starts), and its VMI
    fails with NodeUnresponsive (KubeVirt's rule: its VM restarts it elsewhere)."""
    timeout = "10"
    port = free_port()
    first = _up(data_dir, port, "--nodes", "2", "--keep-vms", "--node-timeout", timeout)
    try:
        with up_client(port, timeout=5) as http:
            until(lambda: len(http.get("/api/v1/nodes").json()["items"]) == 2, 60, "the nodes")
            vm = {
                "apiVersion": "kubevirt.io/v1", "kind": "VirtualMachine",
                "metadata": {"name": "on2", "namespace": "default"},
                "spec": {"runStrategy": "Always", "template": {"spec": {
                    "nodeSelector": {"kubernetes.io/hostname": "node-2"},
                    "domain": {"memory": {"guest": "64Mi"}, "devices": {}},
                    "terminationGracePeriodSeconds": 0}}},
            }  # fmt: skip
            assert http.post(VMS, json=vm).is_success
            running = until(
                lambda: (v := _vmi(http, "on2")) and v["status"].get("phase") == "Running" and v
            )
            assert running["status"]["nodeName"] == "node-2"
    finally:
        first.send_signal(signal.SIGINT)
        first.communicate(timeout=90)
    restarted_at = time.time()
    nats_port = free_port()
    second = _up(data_dir, port, "--nodes", "1", "--node-timeout", timeout, nats_port=nats_port)
    try:
        with up_client(port, timeout=5) as http:

            def node2_not_ready() -> dict[str, Any] | None:
                node = http.get("/api/v1/nodes/node-2").json()
                ready = next(c for c in node["status"]["conditions"] if c["type"] == "Ready")
                return node if ready["status"] == "False" else None

            until(node2_not_ready, 60, "node-2 NotReady")

        def events(kind: str) -> list[dict[str, Any]]:
            done = subprocess.run(
                [sys.executable, "-m", "cli.main", "events", "-t", kind, "-o", "json",
                 "--nats-url", f"nats://127.0.0.1:{nats_port}"],
                cwd=REPO, capture_output=True, text=True, timeout=60, check=True,
            )  # fmt: skip
            return [json.loads(line) for line in done.stdout.splitlines() if line.strip()]

        (gone,) = events("NodeUnresponsive")
        # timed from node-2's last heartbeat in the first run, not from the restart
        assert gone["data"]["lastHeartbeat"] < restarted_at
        # KubeVirt's rule: its VMI fails (and its VM, runStrategy Always, makes a new one)
        failed = until(
            lambda: [
                e
                for e in events("VMIFailed")
                if e["aggregate"]["uid"] == running["metadata"]["uid"]
            ],
            30,
            "its VMI failed",
        )
        assert failed[0]["data"]["reason"] == "NodeUnresponsive"
    finally:
        second.send_signal(signal.SIGINT)
        second.communicate(timeout=90)


@pytest.mark.timeout(300)  # two `up`s one after the other
def test_a_resumed_cluster_with_fewer_nodes_places_nothing_on_the_node_it_left(
    data_dir: Path,
) -> None:
    """`up --nodes 3`, Ctrl-C, `up --nodes 2` on the same data: node-3 has no handler any
    more, so before the controller places anything `up` cordons it and says what became of
    it and how to remove it; VMs started then and a migration go to node-1 and node-2 only
    (node-3, the emptiest, would be the scheduler's pick); `delete node` removes it."""
    port = free_port()
    first = Output(_up(data_dir, port, "--nodes", "3"))
    try:
        with up_client(port, timeout=5) as http:
            until(lambda: len(http.get("/api/v1/nodes").json()["items"]) == 3, 60, "3 nodes")
    finally:
        assert first.stop() == 0, first.text
    nats_port = free_port()
    second = Output(_up(data_dir, port, "--nodes", "2", nats_port=nats_port))
    try:
        second.wait_for("Ctrl-C stops the cluster")
        assert "node-3 of the stored cluster is not started by this run (--nodes 2)" in second.text
        assert "`virtstream delete node node-3` removes it" in second.text
        assert "`virtstream up --nodes 3` runs it again" in second.text
        with up_client(port, timeout=5) as http:
            until(lambda: http.get("/readyz").is_success, 60, "the api")
            node3 = http.get("/api/v1/nodes/node-3").json()
            assert node3["spec"]["unschedulable"] is True
            for name in ("a", "b", "c"):
                vm = {
                    "apiVersion": "kubevirt.io/v1", "kind": "VirtualMachine",
                    "metadata": {"name": name, "namespace": "default"},
                    "spec": {"runStrategy": "Always", "template": {"spec": {
                        "domain": {"memory": {"guest": "64Mi"}, "devices": {}},
                        "terminationGracePeriodSeconds": 0}}},
                }  # fmt: skip
                assert http.post(VMS, json=vm).is_success

            def running(name: str) -> dict[str, Any] | None:
                vmi = _vmi(http, name)
                return vmi if vmi and vmi["status"].get("phase") == "Running" else None

            for name in ("a", "b", "c"):
                vmi = until(functools.partial(running, name), 60, f"{name} Running")
                assert vmi["status"]["nodeName"] in ("node-1", "node-2")
            migration = {
                "apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstanceMigration",
                "metadata": {"name": "move-a", "namespace": "default"},
                "spec": {"vmiName": "a"},
            }  # fmt: skip
            migrations = "/apis/kubevirt.io/v1/namespaces/default/virtualmachineinstancemigrations"
            assert http.post(migrations, json=migration).is_success
            done = until(
                lambda: (m := http.get(f"{migrations}/move-a").json())["status"].get("phase")
                in ("Succeeded", "Failed") and m, 60, "the migration",
            )  # fmt: skip
            assert done["status"]["phase"] == "Succeeded", done["status"]
            assert done["status"]["migrationState"]["targetNode"] in ("node-1", "node-2")
            # nothing was ever placed on node-3, not even before it timed out
            for kind in ("PodScheduled", "MigrationScheduled"):
                listed = subprocess.run(
                    [sys.executable, "-m", "cli.main", "events", "-t", kind, "-o", "json",
                     "--nats-url", f"nats://127.0.0.1:{nats_port}"],
                    cwd=REPO, capture_output=True, text=True, timeout=60, check=True,
                )  # fmt: skip
                placed = [json.loads(line)["node"] for line in listed.stdout.splitlines()]
                assert placed and "node-3" not in placed, (kind, placed)
            deleted = subprocess.run(
                [sys.executable, "-m", "cli.main", "--server", f"http://127.0.0.1:{port}",
                 "delete", "node", "node-3"],
                cwd=REPO, capture_output=True, text=True, timeout=60,
            )  # fmt: skip
            assert deleted.returncode == 0, deleted.stderr
            assert deleted.stdout.strip() == 'node "node-3" deleted'
            names = [n["metadata"]["name"] for n in http.get("/api/v1/nodes").json()["items"]]
            assert names == ["node-1", "node-2"]
    finally:
        assert second.stop() == 0, second.text


@pytest.mark.timeout(300)
@pytest.mark.qemu
@pytest.mark.skipif(qemu_skip_reason() is not None, reason=qemu_skip_reason() or "")
def test_a_test_mode_cluster_resumed_in_qemu_mode_says_so(data_dir: Path) -> None:
    """`up` (test mode), Ctrl-C, then `up --hypervisor qemu` on the same data (as the
    demo's `.virtstream-demo` is): one line names the mode the stored cluster ran and what
    changes; the nodes rejoin as QEMU nodes."""
    port = free_port()
    first = Output(_up(data_dir, port))
    try:
        with up_client(port, timeout=5) as http:
            until(lambda: len(http.get("/api/v1/nodes").json()["items"]) == 1, 60, "the node")
    finally:
        assert first.stop() == 0, first.text
    assert "the stored cluster ran" not in first.text
    second = Output(_up(data_dir, port, "--hypervisor", "qemu"))
    try:
        second.wait_for("Ctrl-C stops the cluster", timeout=180)
        assert (
            "the stored cluster ran --hypervisor test; this run is --hypervisor qemu: its nodes "
            "rejoin as QEMU nodes and its VMs boot real guests when they start"
        ) in second.text
        with up_client(port, timeout=5) as http:

            def rejoined() -> bool:
                node = http.get("/api/v1/nodes/node-1").json()
                return node["metadata"]["annotations"]["virtstream.io/hypervisor"] == "qemu"

            until(rejoined, 60, "node-1 a QEMU node")
    finally:
        assert second.stop() == 0, second.text
