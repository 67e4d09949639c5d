"""qemu mode through the whole control plane: `virtstream up --hypervisor qemu` (nats, api,
controller, handlers, a libvirtd per node) as a subprocess; vm-cirros.yaml over the KubeVirt
REST API reaches Running with a real QEMU process; pause/unpause change the real domain;
kill -9 of a handler leaves the guest running and re-attached; a stop with a grace period
ends QEMU; a killed `up` is cleaned up by the next one; Ctrl-C leaves nothing behind.

The tests share one `up` (module fixture) and run in file order. Skipped without the qemu
packages or root."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import libvirt
import nats
import pytest

from cli.up import live_launchers
from client import credentials
from events.catalog import DomainStarted
from events.manifest import yaml_documents
from events.meta import Aggregate, Kind
from eventstore.jetstream import JetStreamStore
from eventstore.settings import StreamSettings
from host.procs import pid_alive
from ops.nats_server import free_port
from ops.node_libvirtd import connect_uri, processes_in_namespace, read_state
from tests.integration.polling import until, up_client
from tests.integration.qemu_support import CIRROS, process_name, qemu_marks

pytestmark = qemu_marks

REPO = Path(__file__).resolve().parents[2]
VMS = "/apis/kubevirt.io/v1/namespaces/default/virtualmachines"
VMIS = "/apis/kubevirt.io/v1/namespaces/default/virtualmachineinstances"
SUB_VM = "/apis/subresources.kubevirt.io/v1/namespaces/default/virtualmachines"
SUB_VMI = "/apis/subresources.kubevirt.io/v1/namespaces/default/virtualmachineinstances"
DOMAIN = "default_vm-cirros"
NODES = ("node-1", "node-2")


class Up:
    """One `virtstream up --hypervisor qemu --nodes 2` and what the tests need of it."""

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir
        self.port = free_port()
        self.nats_port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None
        self.http = httpx.Client()  # the api's, once `up` wrote its credentials (start)

    def start(self) -> None:
        # a killed previous `up` left its services (the next one stops them first)
        previous = self.recorded_pids()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "cli.main", "up", "--data-dir", str(self.data_dir),
             "--port", str(self.port), "--nats-port", str(self.nats_port),
             "--hypervisor", "qemu", "--nodes", str(len(NODES))],
            cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            env={**os.environ, "COLUMNS": "120"},
        )  # fmt: skip
        until(lambda: not any(pid_alive(p) for p in previous), what="the old services gone")
        self.http = up_client(self.port, timeout=5)
        until(lambda: self.http.get(VMS).is_success, what="the API")

    def recorded_pids(self) -> list[int]:
        try:
            state = json.loads((self.data_dir / "up.json").read_text())
        except OSError:
            return []
        return [int(r["pid"]) for r in state.values()]

    def interrupt(self) -> str:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGINT)
        out, _ = self.proc.communicate(timeout=90)
        assert self.proc.returncode == 0, out.decode()
        return out.decode()

    def kill9(self) -> None:
        assert self.proc is not None
        self.proc.kill()
        self.proc.wait(10)
        if self.proc.stdout is not None:  # its nats-server still holds the pipe: not read
            self.proc.stdout.close()

    def vmi(self, name: str = "vm-cirros") -> dict[str, Any] | None:
        r = self.http.get(f"{VMIS}/{name}")
        return None if r.status_code == 404 else r.json()

    def running_vmi(self) -> dict[str, Any]:
        def probe() -> dict[str, Any] | None:
            v = self.vmi()
            if v and v["status"].get("phase") == "Running":
                return v
            return None

        return until(probe, what="vm-cirros Running")

    def uri(self, node: str) -> str:
        return connect_uri(self.data_dir / "nodes" / node / "sock")

    def domain_state(self, node: str) -> int | None:
        conn = libvirt.open(self.uri(node))
        try:
            return int(conn.lookupByName(DOMAIN).state()[0])
        except libvirt.libvirtError:
            return None
        finally:
            conn.close()

    def domain_started_count(self, uid: str) -> int:
        async def count() -> int:
            url = f"nats://127.0.0.1:{self.nats_port}"
            nc = await nats.connect(url, **credentials.nats_options(url))
            try:
                store = JetStreamStore(nc, StreamSettings())
                events = await store.load(Aggregate(Kind.VMI, "default", "vm-cirros"))
                return sum(
                    isinstance(s.event, DomainStarted) and s.event.meta.aggregate.uid == uid
                    for s in events
                )
            finally:
                await nc.close()

        return asyncio.run(count())

    def handler_pid(self, node: str) -> int | None:
        for proc in Path("/proc").iterdir():
            if not proc.name.isdigit():
                continue
            try:
                cmd = (proc / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            mine = str(self.data_dir).encode() in b" ".join(cmd)
            if mine and b"services.handler" in cmd and node.encode() in cmd:
                return int(proc.name)
        return None

    def namespaces(self) -> list[str]:
        states = (read_state(self.data_dir / "nodes" / n) for n in NODES)
        return [s.mount_namespace for s in states if s is not None]


def qemu_pid(vmi: dict[str, Any]) -> int:
    return int(vmi["status"]["virtstream.io/domain"]["qemuPid"])


@pytest.fixture(scope="module")
def up() -> Iterator[Up]:
    # short: the nodes' libvirt sockets live under it (107-byte limit)
    with tempfile.TemporaryDirectory(prefix="vs-qe-") as d:
        cluster = Up(Path(d))
        cluster.start()
        try:
            yield cluster
        finally:
            cluster.http.close()
            if cluster.proc is not None and cluster.proc.poll() is None:
                cluster.interrupt()
            for pid in live_launchers(cluster.data_dir / "run"):
                os.kill(pid, signal.SIGKILL)


def test_cirros_vm_runs_a_real_qemu(up: Up) -> None:
    vm = yaml_documents(CIRROS.read_text())[0]
    assert up.http.post(VMS, json=vm).is_success
    assert up.http.put(f"{SUB_VM}/vm-cirros/start", json={}).is_success
    vmi = up.running_vmi()
    status = vmi["status"]
    node = status["nodeName"]
    domain = status["virtstream.io/domain"]
    assert domain["state"] == "Running"
    pid = domain["qemuPid"]
    assert pid_alive(pid) and process_name(pid).startswith("qemu-system")
    assert up.domain_state(node) == libvirt.VIR_DOMAIN_RUNNING
    emulated = [c for c in status["conditions"] if c["type"] == "SoftwareEmulation"]
    if domain["type"] == "qemu":  # TCG: KubeVirt's software emulation
        assert emulated and emulated[0]["status"] == "True"
    else:
        assert domain["type"] == "kvm" and not emulated


def test_pause_and_unpause_change_the_real_domain(up: Up) -> None:
    node = up.running_vmi()["status"]["nodeName"]
    assert up.http.put(f"{SUB_VMI}/vm-cirros/pause", json={}).is_success
    until(lambda: up.domain_state(node) == libvirt.VIR_DOMAIN_PAUSED, what="domain paused")
    paused = until(
        lambda: (v := up.vmi()) and v["status"]["virtstream.io/domain"]["state"] == "Paused" and v
    )
    assert any(c["type"] == "Paused" for c in paused["status"]["conditions"])
    assert up.http.put(f"{SUB_VMI}/vm-cirros/unpause", json={}).is_success
    until(lambda: up.domain_state(node) == libvirt.VIR_DOMAIN_RUNNING, what="domain resumed")
    until(lambda: (v := up.vmi()) and v["status"]["virtstream.io/domain"]["state"] == "Running")


def test_kill9_handler_keeps_the_guest_and_reattaches(up: Up) -> None:
    vmi = up.running_vmi()
    node, pid = vmi["status"]["nodeName"], qemu_pid(vmi)
    handler = up.handler_pid(node)
    assert handler is not None
    os.kill(handler, signal.SIGKILL)
    until(lambda: (p := up.handler_pid(node)) and p != handler, what="the handler restarted")
    assert pid_alive(pid) and up.domain_state(node) == libvirt.VIR_DOMAIN_RUNNING
    # re-attached: the new handler relays a pause to the same guest's launcher
    assert up.http.put(f"{SUB_VMI}/vm-cirros/pause", json={}).is_success
    until(lambda: up.domain_state(node) == libvirt.VIR_DOMAIN_PAUSED, what="paused after restart")
    # unpause is refused until the api has folded the pause (KubeVirt: "VMI is not paused")
    until(
        lambda: (v := up.vmi()) and v["status"]["virtstream.io/domain"]["state"] == "Paused",
        what="the api shows the pause",
    )
    assert up.http.put(f"{SUB_VMI}/vm-cirros/unpause", json={}).is_success
    until(lambda: up.domain_state(node) == libvirt.VIR_DOMAIN_RUNNING, what="resumed")
    assert qemu_pid(up.running_vmi()) == pid and pid_alive(pid)
    assert up.domain_started_count(vmi["metadata"]["uid"]) == 1


def test_stop_with_grace_period_ends_qemu(up: Up) -> None:
    vmi = up.running_vmi()
    node, pid = vmi["status"]["nodeName"], qemu_pid(vmi)
    # the guest powers off on the ACPI button, or is destroyed as the second runs out
    assert up.http.put(f"{SUB_VM}/vm-cirros/stop", json={"gracePeriod": 1}).is_success
    until(lambda: up.vmi() is None, what="the VMI gone")
    until(lambda: not pid_alive(pid), what="QEMU gone")
    assert up.domain_state(node) is None
    assert not live_launchers(up.data_dir / "run")


def test_a_killed_up_leaves_no_guest_and_ctrl_c_leaves_nothing(up: Up) -> None:
    assert up.http.put(f"{SUB_VM}/vm-cirros/start", json={}).is_success
    pid = qemu_pid(up.running_vmi())
    assert len(up.namespaces()) == len(NODES)
    up.kill9()  # its reaper stops the launchers, and with them the guest
    until(lambda: not pid_alive(pid), timeout=60, what="the guest stopped by the reaper")
    up.start()  # a fresh cluster on the same data: the VM (runStrategy Always) runs again
    # (the api answers from the log at once: the killed run's VMI, until the handlers have
    # found its guest gone and started the new one)
    until(
        lambda: v if qemu_pid(v := up.running_vmi()) != pid else None,
        what="vm-cirros Running in a new guest",
    )
    namespaces = up.namespaces()
    out = up.interrupt()
    assert "stopped" in out, out
    assert not live_launchers(up.data_dir / "run")
    for ns in namespaces:  # no libvirtd, QEMU or reaper left: the mount namespaces are gone
        assert processes_in_namespace(ns) == []
    assert up.namespaces() == []
    for node in NODES:
        assert up.handler_pid(node) is None
