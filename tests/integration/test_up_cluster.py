"""`virtstream up` end to end: nats + api + controller + 2 handlers as supervised
subprocesses; a VM through its life over the KubeVirt REST API; a killed handler is
restarted; Ctrl-C shuts the VMs down and stops everything; `--demo` passes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from cli.up import live_launchers
from ops.nats_server import free_port
from ops.supervisor import importable
from tests.integration.polling import until

REPO = Path(__file__).resolve().parents[2]
VMS = "/apis/kubevirt.io/v1/namespaces/default/virtualmachines"
VMIS = "/apis/kubevirt.io/v1/namespaces/default/virtualmachineinstances"
SUB = "/apis/subresources.kubevirt.io/v1/namespaces/default/virtualmachines"

pytestmark = pytest.mark.skipif(
    not (importable("services.api") and importable("services.controller")),
    reason="api and controller are needed",
)


def _up(data_dir: Path, port: int, *extra: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "cli.main", "up", "--data-dir", str(data_dir), "--port",
         str(port), "--nats-port", str(free_port()), *extra],
        cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        env={**os.environ, "COLUMNS": "120"},
    )  # fmt: skip


def _vmi(http: httpx.Client, name: str) -> dict[str, Any] | None:
    r = http.get(f"{VMIS}/{name}")
    return None if r.status_code == 404 else r.json()


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
    port = free_port()
    up = _up(data_dir, port, "--nodes", "2")
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=5) as http:
            until(lambda: http.get(VMS).is_success)
            vm = {
                "apiVersion": "kubevirt.io/v1", "kind": "VirtualMachine",
                "metadata": {"name": "vm1", "namespace": "default"},
                "spec": {"runStrategy": "Always", "template": {"spec": {
                    "domain": {"memory": {"guest": "64Mi"}, "devices": {}},
                    "terminationGracePeriodSeconds": 0}}},
            }  # fmt: skip
            assert http.post(VMS, json=vm).is_success
            first = until(
                lambda: (v := _vmi(http, "vm1")) and v["status"].get("phase") == "Running" and v
            )
            uid1 = first["metadata"]["uid"]

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


def test_up_demo(data_dir: Path) -> None:
    up = _up(data_dir, free_port(), "--demo")
    out, _ = up.communicate(timeout=120)
    text = out.decode()
    assert up.returncode == 0, text
    assert "demo passed" in text and "VMI Running" in text
