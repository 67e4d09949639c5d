"""Fixtures and helpers for the `qemu` tests: real libvirtds (one per node, ops.node_libvirtd)
and real QEMU guests. Every test module using them is marked `qemu` and skipped, with the
reason, on a host without the packages (or not root)."""

from __future__ import annotations

import asyncio
import os
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec
import pytest

from core.admission import default_vmi
from events.manifest import dump, load, yaml_documents
from events.objects import VirtualMachineInstance
from ops.node_libvirtd import INSTALL_COMMAND, NodeRuntime, cleanup_stale, missing_requirements
from services.launcher import rundir
from services.launcher.zygote import start_zygote

REPO = Path(__file__).resolve().parents[2]
CIRROS = REPO / "examples" / "kubevirt" / "vm-cirros.yaml"


def skip_reason() -> str | None:
    missing = missing_requirements()
    if missing:
        return f"qemu mode needs {', '.join(missing)}: {INSTALL_COMMAND}"
    if os.geteuid() != 0:
        return "qemu mode runs libvirtd as root"
    return None


qemu_marks = [
    pytest.mark.qemu,
    pytest.mark.skipif(skip_reason() is not None, reason=skip_reason() or ""),
]


def cirros_vmi(name: str) -> dict[str, Any]:
    """vm-cirros.yaml's template as the VMI the controller would create (API defaults on)."""
    vm = yaml_documents(CIRROS.read_text())[0]
    raw = {
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachineInstance",
        "metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}"},
        "spec": vm["spec"]["template"]["spec"],
    }
    firmware = str(uuid.uuid5(uuid.NAMESPACE_URL, f"virtstream-test/{name}"))
    typed = default_vmi(load(raw, VirtualMachineInstance), firmware)
    return dump(typed, raw)


class QemuCluster:
    def __init__(self, base: Path) -> None:
        self.base = base
        self.disk_dir = str(base / "disks")
        self.run_dir = base / "launchers"
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.nodes = {n: NodeRuntime(n, base) for n in ("node-1", "node-2")}

    def start(self) -> None:
        cleanup_stale(self.base)
        for node in self.nodes.values():
            node.start(adopt=False)

    def stop(self) -> None:
        for node in self.nodes.values():
            node.stop()

    def socket_for(self, node: str, vmi: dict[str, Any]) -> str:
        name = f"{vmi['metadata']['namespace']}_{vmi['metadata']['name']}"
        return str(rundir.launcher_socket_path(self.run_dir / node, name))


@pytest.fixture(scope="module")
def qemu_cluster() -> Iterator[QemuCluster]:
    # Short path: unix socket paths are limited to 107 bytes.
    with tempfile.TemporaryDirectory(prefix="vs-qemu-") as tmp:
        cluster = QemuCluster(Path(tmp))
        for node in cluster.nodes:
            (cluster.run_dir / node).mkdir()
        cluster.start()
        try:
            yield cluster
        finally:
            cluster.stop()


@pytest.fixture(scope="module")
def qemu_zygote(qemu_cluster: QemuCluster) -> Iterator[str]:
    sock = str(qemu_cluster.base / "zygote.sock")
    proc = start_zygote(sock)
    yield sock
    proc.terminate()
    proc.wait(5)


def vmi_json(vmi: dict[str, Any]) -> bytes:
    return msgspec.json.encode(vmi)


def pid_alive(pid: int | None) -> bool:
    return pid is not None and rundir.pid_alive(pid)


def process_name(pid: int) -> str:
    return Path(f"/proc/{pid}/comm").read_text().strip()


async def wait_until(predicate: Any, timeout: float = 10.0, what: str = "condition") -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not predicate():
        assert loop.time() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.02)
