"""qemu mode benchmark: what the launcher adds on top of libvirt, measured in the same run
on the same two node libvirtds (ops.node_libvirtd). Needs the qemu packages and root.

  python -m bench.bench_qemu [--runs N] [--base DIR]

  python -m bench.bench_qemu --only guest [--runs N]   # only "guest userspace up"

Guest: examples/kubevirt/vm-cirros.yaml's template (128 MiB, 1 vCPU), its containerDisk the
catalogue's Linux guest (ops/guest_images.py, built if missing), the cloud-init ISO attached
when genisoimage is there. The create and migration rows measure the domain, not the boot.

- raw create: libvirt `createXML(<the launcher's XML>)` until it returns (RUNNING), disks
  prepared beforehand;
- launcher create: spawn (zygote) → connect → Start → the Running DomainStatus, including
  the launcher's disk preparation (qemu-img, NoCloud ISO) and the define;
- raw migrate: `migrateToURI3(node-2, LIVE|PEER2PEER|PERSIST_DEST|UNDEFINE_SOURCE|UNSAFE)`
  until it returns;
- launcher migrate: MigrateTo sent to the source launcher → the target launcher (spawned
  beforehand in migration-target mode) reports Running, and → the source's MigrationResult;
  progress polled every 0.25 s.
Both migrations start SETTLE_SECONDS after the guest started (past the firmware).
- control plane create: `virtstream up --hypervisor qemu --nodes 1` (its own libvirtd, the
  same configuration) as a subprocess; per run, from just before the POST of a VM
  (runStrategy Always, the same template) until a watch on virtualmachineinstances, opened
  beforehand, delivers its VMI with phase Running (api → controller → handler → launcher →
  QEMU → handler → api); then the VM is stopped (grace 0) and deleted, unmeasured. Each
  run is followed by a raw createXML on up's libvirtd, the reference for the ratio.
- guest userspace up: from just before the POST of a VM (runStrategy Always) through `up`
  until the guest's init prints its first line on the serial console (the console log under
  the run dir, polled every 5 ms); against a raw `qemu-system-x86_64` boot of the same
  image (the same overlay + seed ISO + virtio NIC, serial on stdout) in the same run, from
  the exec until that line on stdout.
Target: raw/total ≥ 50% for each.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx
import libvirt
import msgspec

from client import credentials
from core.admission import default_vmi
from events.manifest import dump, load, yaml_documents
from events.objects import VirtualMachineInstance
from ops import guest_images
from ops.nats_server import free_port
from ops.node_libvirtd import NodeRuntime, cleanup_stale, connect_uri
from services.launcher import rundir, storage
from services.launcher.client import LauncherClient
from services.launcher.domain_state import DomainState
from services.launcher.domain_xml import DomainType, build_domain_xml, domain_name
from services.launcher.hypervisor import MigrationOptions
from services.launcher.kvm_probe import domain_type as probe_domain_type
from services.launcher.protocol import MigrateTo, Shutdown, Start
from services.launcher.rundir import guest_console_log
from services.launcher.zygote import spawn_launcher, start_zygote

REPO = Path(__file__).resolve().parents[1]
#: Both migration measurements start this long after the guest started, past its firmware.
SETTLE_SECONDS = 0.5
#: The first line the guest's init prints (ops/guest/init.sh): "guest userspace up".
GUEST_UP = b"virtstream-guest: init"
CIRROS = Path(__file__).resolve().parents[1] / "examples" / "kubevirt" / "vm-cirros.yaml"


def cirros_vmi(name: str) -> dict[str, Any]:
    vm = yaml_documents(CIRROS.read_text())[0]
    raw = {
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachineInstance",
        "metadata": {"name": name, "namespace": "bench", "uid": str(uuid.uuid4())},
        "spec": vm["spec"]["template"]["spec"],
    }
    return dump(default_vmi(load(raw, VirtualMachineInstance), str(uuid.uuid4())), raw)


def _format(path: str) -> str:
    return "qcow2" if path.endswith(".qcow2") else "raw"


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def row(label: str, values: list[float]) -> str:
    p50, p99, mean = (
        x * 1000 for x in (pct(values, 0.5), pct(values, 0.99), statistics.mean(values))
    )
    return f"{label:<36} p50 {p50:8.1f} ms   p99 {p99:8.1f} ms   mean {mean:8.1f} ms"


class Bench:
    def __init__(self, base: Path, dtype: DomainType) -> None:
        self.base = base
        self.dtype = dtype
        self.disk_dir = str(base / "disks")
        self.nodes = [NodeRuntime("node-1", base), NodeRuntime("node-2", base)]
        self.run_dirs = [base / "l1", base / "l2"]
        self.zygote = str(base / "zygote.sock")
        self.pids: list[int] = []
        #: launcher migrations, MigrateTo → the source's MigrationResult received
        self.result_seconds: list[float] = []

    def raw_xml(self, vmi: dict[str, Any]) -> str:
        name = domain_name(vmi)
        paths = storage.prepare_disks(vmi, name, self.disk_dir)
        omit = storage.skipped_disks(vmi, paths)
        return build_domain_xml(vmi, domain_type=self.dtype, disk_paths=paths, omit_disks=omit)

    def raw_create(self, i: int, uri: str | None = None) -> float:
        conn = libvirt.open(uri or self.nodes[0].uri)
        vmi = cirros_vmi(f"raw-create-{i}")
        xml = self.raw_xml(vmi)
        started = time.perf_counter()
        dom = conn.createXML(xml, 0)
        took = time.perf_counter() - started
        assert dom.state()[0] == libvirt.VIR_DOMAIN_RUNNING
        dom.destroy()
        storage.remove_disks(domain_name(vmi), self.disk_dir)
        conn.close()
        return took

    def raw_migrate(self, i: int) -> float:
        src, dst = (libvirt.open(n.uri) for n in self.nodes)
        vmi = cirros_vmi(f"raw-mig-{i}")
        dom = src.defineXML(self.raw_xml(vmi))
        dom.create()
        time.sleep(SETTLE_SECONDS)
        options = MigrationOptions()
        flags = (
            libvirt.VIR_MIGRATE_LIVE
            | libvirt.VIR_MIGRATE_PEER2PEER
            | libvirt.VIR_MIGRATE_PERSIST_DEST
            | libvirt.VIR_MIGRATE_UNDEFINE_SOURCE
            | libvirt.VIR_MIGRATE_UNSAFE
        )
        params = {libvirt.VIR_MIGRATE_PARAM_URI: options.migration_uri}
        started = time.perf_counter()
        dom.migrateToURI3(self.nodes[1].uri, params, flags)
        took = time.perf_counter() - started
        moved = dst.lookupByName(domain_name(vmi))
        assert moved.state()[0] == libvirt.VIR_DOMAIN_RUNNING
        moved.destroy()
        moved.undefine()
        storage.remove_disks(domain_name(vmi), self.disk_dir)
        src.close()
        dst.close()
        return took

    def raw_qemu_boot(self, i: int) -> float:
        """exec of qemu-system-x86_64 → the guest's first init line on its serial (stdout)."""
        vmi = cirros_vmi(f"raw-boot-{i}")
        name = domain_name(vmi)
        paths = storage.prepare_disks(vmi, name, self.disk_dir)
        accel = "kvm" if self.dtype is DomainType.KVM else "tcg"
        drives = [
            arg
            for path in paths.values()
            for arg in ("-drive", f"file={path},if=virtio,format={_format(path)}")
        ]
        started = time.perf_counter()
        proc = subprocess.Popen(
            ["qemu-system-x86_64", "-machine", f"q35,accel={accel}", "-m", "128", "-smp", "1",
             "-nographic", *drives, "-nic", "user,model=virtio"],
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        )  # fmt: skip
        assert proc.stdout is not None
        try:
            for line in proc.stdout:
                if GUEST_UP in line:
                    return time.perf_counter() - started
            assert proc.stderr is not None
            raise RuntimeError(f"qemu exited before the guest's init spoke: {proc.stderr.read()!r}")
        finally:
            proc.kill()
            proc.wait()
            storage.remove_disks(name, self.disk_dir)

    async def spawn(self, node: int, vmi: dict[str, Any], target: bool = False) -> LauncherClient:
        runtime = self.nodes[node]
        sock = str(rundir.launcher_socket_path(self.run_dirs[node], domain_name(vmi)))
        pid = spawn_launcher(
            self.zygote,
            msgspec.json.encode(vmi),
            sock,
            hypervisor_uri=runtime.uri,
            domain_type=self.dtype,
            disk_dir=self.disk_dir,
            qemu_pid_dir=str(runtime.qemu_pid_dir),
            migration_target=target,
        )
        self.pids.append(pid)
        return await LauncherClient.connect(sock)

    async def launcher_create(self, i: int) -> float:
        vmi = cirros_vmi(f"l-create-{i}")
        started = time.perf_counter()
        client = await self.spawn(0, vmi)
        await client.call(Start(), timeout=30)
        await client.wait_for(lambda s: s.state is DomainState.RUNNING, timeout=30)
        took = time.perf_counter() - started
        await client.call(Shutdown(grace_period_seconds=0))
        await client.wait_for(lambda s: s.final, timeout=30)
        await client.close()
        return took

    async def launcher_migrate(self, i: int) -> float:
        vmi = cirros_vmi(f"l-mig-{i}")
        source = await self.spawn(0, vmi)
        await source.call(Start(), timeout=30)
        await source.wait_for(lambda s: s.state is DomainState.RUNNING, timeout=30)
        target = await self.spawn(1, vmi, target=True)
        await asyncio.sleep(SETTLE_SECONDS)
        started = time.perf_counter()
        accepted = await source.call(MigrateTo(target_uri=self.nodes[1].uri))
        assert accepted.ok, accepted.error
        await target.wait_for(lambda s: s.state is DomainState.RUNNING, timeout=60)
        took = time.perf_counter() - started
        result = await source.migration_result(timeout=60)
        assert result.ok, result.error
        self.result_seconds.append(time.perf_counter() - started)
        await source.close()
        await target.call(Shutdown(grace_period_seconds=0))
        await target.wait_for(lambda s: s.final, timeout=30)
        await target.close()
        return took


class ControlPlane:
    """create→Running through `virtstream up --hypervisor qemu` (API POST → watch)."""

    VMS = "/apis/kubevirt.io/v1/namespaces/default/virtualmachines"
    VMIS = "/apis/kubevirt.io/v1/namespaces/default/virtualmachineinstances"

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir
        self.port = free_port()
        self.api = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen[bytes] | None = None
        self.running: dict[str, asyncio.Future[float]] = {}
        self.removed: dict[str, asyncio.Future[None]] = {}

    def spawn(self) -> None:
        log = open(self.data_dir.parent / "up.log", "wb")  # noqa: SIM115 (the child's)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "cli.main", "up", "--data-dir", str(self.data_dir),
             "--port", str(self.port), "--nats-port", str(free_port()),
             "--hypervisor", "qemu", "--nodes", "1"],
            cwd=REPO, stdout=log, stderr=subprocess.STDOUT,
        )  # fmt: skip
        log.close()

    async def start(self, timeout: float = 60.0) -> None:
        self.spawn()
        assert self.proc is not None
        deadline = time.monotonic() + timeout
        async with httpx.AsyncClient(
            **credentials.httpx_options(self.api, wait=60), timeout=5
        ) as http:
            while time.monotonic() < deadline:
                if self.proc.poll() is not None:
                    raise SystemExit(f"virtstream up exited; see {self.data_dir.parent}/up.log")
                with contextlib.suppress(httpx.HTTPError, ValueError):
                    nodes = await http.get("/api/v1/nodes")
                    if nodes.is_success and nodes.json().get("items"):
                        return
                await asyncio.sleep(0.2)
        raise SystemExit("virtstream up not ready in time")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(90)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    async def watch(self, opened: asyncio.Event) -> None:
        async with (
            httpx.AsyncClient(
                **credentials.httpx_options(self.api, wait=60), timeout=httpx.Timeout(10, read=None)
            ) as http,
            http.stream("GET", self.VMIS, params={"watch": "true"}) as resp,
        ):
            resp.raise_for_status()
            opened.set()
            async for line in resp.aiter_lines():
                if not line:
                    continue
                now = time.perf_counter()
                ev = msgspec.json.decode(line)
                obj = ev.get("object") or {}
                name = (obj.get("metadata") or {}).get("name", "")
                if ev.get("type") == "DELETED":
                    done = self.removed.get(name)
                    if done is not None and not done.done():
                        done.set_result(None)
                elif (obj.get("status") or {}).get("phase") == "Running":
                    fut = self.running.get(name)
                    if fut is not None and not fut.done():
                        fut.set_result(now)

    async def create(self, http: httpx.AsyncClient, i: int) -> float:
        name = f"cp-{i + 1}"
        vm = yaml_documents(CIRROS.read_text())[0]
        vm["metadata"] = {"name": name, "namespace": "default"}
        vm["spec"]["runStrategy"] = "Always"
        loop = asyncio.get_running_loop()
        self.running[name] = loop.create_future()
        self.removed[name] = loop.create_future()
        started = time.perf_counter()
        r = await http.post(self.VMS, json=vm)
        assert r.is_success, r.text
        took = await asyncio.wait_for(self.running[name], 60) - started
        sub = "/apis/subresources.kubevirt.io/v1/namespaces/default/virtualmachines"
        r = await http.put(f"{sub}/{name}/stop", json={"gracePeriod": 0})
        assert r.is_success, r.text
        await asyncio.wait_for(self.removed[name], 60)
        await http.delete(f"{self.VMS}/{name}")
        return took

    async def guest_up(self, http: httpx.AsyncClient, i: int) -> float:
        """POST of a VM → its guest's first init line in the console log."""
        name = f"guest-{i + 1}"
        vm = yaml_documents(CIRROS.read_text())[0]
        vm["metadata"] = {"name": name, "namespace": "default"}
        vm["spec"]["runStrategy"] = "Always"
        log = guest_console_log(self.data_dir / "run", "node-1", "default", name)
        loop = asyncio.get_running_loop()
        self.running[name] = loop.create_future()
        self.removed[name] = loop.create_future()
        started = time.perf_counter()
        r = await http.post(self.VMS, json=vm)
        assert r.is_success, r.text
        deadline = started + 120
        while not (log.exists() and GUEST_UP in log.read_bytes()):
            assert time.perf_counter() < deadline, f"{name}: no guest on {log}"
            await asyncio.sleep(0.005)
        took = time.perf_counter() - started
        await asyncio.wait_for(self.running[name], 60)
        sub = "/apis/subresources.kubevirt.io/v1/namespaces/default/virtualmachines"
        for _ in range(20):  # a stop racing the VM's status updates may meet a conflict
            r = await http.put(f"{sub}/{name}/stop", json={"gracePeriod": 0})
            if r.status_code != 409:
                break
            await asyncio.sleep(0.1)
        assert r.is_success, r.text
        await asyncio.wait_for(self.removed[name], 60)
        await http.delete(f"{self.VMS}/{name}")
        return took


async def control_plane_guest_up(
    runs: int, base: Path, bench: Bench
) -> tuple[list[float], list[float]]:
    """(POST → guest userspace up through `up`, raw qemu-system-x86_64 boot), interleaved."""
    cp = ControlPlane(base / "up-guest")
    try:
        await cp.start()
        opened = asyncio.Event()
        watcher = asyncio.create_task(cp.watch(opened))
        await asyncio.wait_for(opened.wait(), 10)
        async with httpx.AsyncClient(
            **credentials.httpx_options(cp.api, wait=60), timeout=10
        ) as http:
            await cp.guest_up(http, -1)  # warm-up
            await asyncio.to_thread(bench.raw_qemu_boot, -1)
            took, raw = [], []
            for i in range(runs):
                took.append(await cp.guest_up(http, i))
                raw.append(await asyncio.to_thread(bench.raw_qemu_boot, i))
        watcher.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await watcher
        return took, raw
    finally:
        await asyncio.to_thread(cp.stop)


def print_guest_up(control: list[float], raw: list[float]) -> None:
    print(row("raw qemu-system-x86_64 → init line", raw))
    print(row("control plane POST → init line", control))
    print(
        f"  ratio raw/total (p50): {pct(raw, 0.5) / pct(control, 0.5):.0%}"
        f"   (p99: {pct(raw, 0.99) / pct(control, 0.99):.0%}; target ≥ 50%)"
    )


async def control_plane_create(
    runs: int, base: Path, bench: Bench
) -> tuple[list[float], list[float]]:
    """(control plane create→Running, raw createXML on up's libvirtd), interleaved."""
    cp = ControlPlane(base / "up")
    uri = connect_uri(cp.data_dir / "nodes" / "node-1" / "sock")
    try:
        await cp.start()
        opened = asyncio.Event()
        watcher = asyncio.create_task(cp.watch(opened))
        await asyncio.wait_for(opened.wait(), 10)
        async with httpx.AsyncClient(
            **credentials.httpx_options(cp.api, wait=60), timeout=10
        ) as http:
            await cp.create(http, -1)  # warm-up
            took, raw = [], []
            for i in range(runs):
                took.append(await cp.create(http, i))
                raw.append(await asyncio.to_thread(bench.raw_create, 100 + i, uri))
        watcher.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await watcher
        return took, raw
    finally:
        await asyncio.to_thread(cp.stop)


async def measure_async(runs: int, fn: Callable[[int], Awaitable[float]]) -> list[float]:
    await fn(-1)  # warm-up (capability caches, first QEMU start)
    return [await fn(i) for i in range(runs)]


def measure(runs: int, fn: Callable[[int], float]) -> list[float]:
    fn(-1)
    return [fn(i) for i in range(runs)]


async def guest_only(runs: int, base: Path) -> None:
    dtype = probe_domain_type().domain_type
    bench = Bench(base, dtype)
    control, raw = await control_plane_guest_up(runs, base, bench)
    print(f"qemu mode, domain type {dtype}, {runs} runs (after one warm-up)")
    print_guest_up(control, raw)


async def main_async(runs: int, base: Path) -> None:
    dtype = probe_domain_type().domain_type
    bench = Bench(base, dtype)
    cleanup_stale(base)
    for node, run_dir in zip(bench.nodes, bench.run_dirs, strict=True):
        run_dir.mkdir(parents=True, exist_ok=True)
        node.start(adopt=False)
    zygote = start_zygote(bench.zygote)
    libvirt.registerErrorHandler(lambda *_: None, None)  # errors are raised, not printed
    try:
        raw_create = await asyncio.to_thread(measure, runs, bench.raw_create)
        launcher_create = await measure_async(runs, bench.launcher_create)
        raw_migrate = await asyncio.to_thread(measure, runs, bench.raw_migrate)
        launcher_migrate = await measure_async(runs, bench.launcher_migrate)
        control_create, raw_on_up = await control_plane_create(runs, base, bench)
        guest_control, guest_raw = await control_plane_guest_up(runs, base, bench)
    finally:
        zygote.terminate()
        zygote.wait(5)
        for pid in bench.pids:
            if rundir.pid_alive(pid):
                os.kill(pid, signal.SIGKILL)
        for node in bench.nodes:
            node.stop()
    print(f"qemu mode, domain type {dtype}, {runs} runs each (after one warm-up)")
    print(row("raw createXML → RUNNING", raw_create))
    print(row("launcher spawn → Running", launcher_create))
    print(
        f"  ratio raw/total (p50): {pct(raw_create, 0.5) / pct(launcher_create, 0.5):.0%}"
        "   (target ≥ 50%)"
    )
    print(row("raw createXML on up's libvirtd", raw_on_up))
    print(row("control plane POST → watch Running", control_create))
    print(
        f"  ratio raw/total (p50): {pct(raw_on_up, 0.5) / pct(control_create, 0.5):.0%}"
        f"   (p99: {pct(raw_on_up, 0.99) / pct(control_create, 0.99):.0%}; target ≥ 50%)"
    )
    print_guest_up(guest_control, guest_raw)
    print(row("raw migrateToURI3", raw_migrate))
    print(row("launcher MigrateTo → target Running", launcher_migrate))
    print(row("launcher MigrateTo → MigrationResult", bench.result_seconds[1:]))
    print(
        "  ratio raw/total (p50, to MigrationResult): "
        f"{pct(raw_migrate, 0.5) / pct(bench.result_seconds[1:], 0.5):.0%}"
        "   (target ≥ 50%)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.bench_qemu")
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--base", default=None, help="node dirs (default: a temp dir)")
    parser.add_argument("--only", choices=("all", "guest"), default="all")
    args = parser.parse_args()
    if shutil.which("qemu-system-x86_64") is None:
        raise SystemExit("needs qemu-system-x86_64: bash ops/install.sh --qemu")
    guest_images.ensure_images()
    run = guest_only if args.only == "guest" else main_async
    if args.base:
        asyncio.run(run(args.runs, Path(args.base)))
        return
    with tempfile.TemporaryDirectory(prefix="vs-bq-") as tmp:
        asyncio.run(run(args.runs, Path(tmp)))


if __name__ == "__main__":
    main()
