"""Execution benchmark: create→Running and deletion→Succeeded through the
whole stack, control-plane memory per VMI, launcher USS, beside the physical floor.

  python -m bench.bench_exec [--vms 500] [--rate 50] [--nodes 10] [--node-memory 64Gi]

Starts `virtstream up --nodes N` on a fresh data dir under /tmp (short paths: launcher
sockets live there), nodes sized by `--node-memory`/`--node-cpus` so all VMIs fit.
Loopback only; bounded in count (--vms) and time (--timeout per phase).

Measured from the client:
- create→Running (KubeVirt's vmiCreationToRunningSeconds): a watch on
  virtualmachineinstances is open before the first create; per VM, from just before its
  POST (runStrategy Always) is written until the watch delivers its VMI with phase
  Running. POSTs are issued open-loop at a steady rate (a schedule, not a closed loop)
  over a pool of keep-alive connections with the raw asyncio client (bench/http_load.py):
  httpx would cost more CPU than the api on 2 cores.
- deletion→Succeeded (KubeVirt's phase transition time from deletion): per VM, from just
  before its DELETE is written (same rate) until the watch shows its VMI phase Succeeded
  (and, separately, until the VMI is DELETED, i.e. removed once its launcher exited).
  VMs have terminationGracePeriodSeconds 30; the test driver's guest honours the ACPI
  shutdown at once.
- control plane: RSS (VmRSS) of api + controller + handlers before the first create and
  with all VMIs Running: (after - before) / VMIs, and after / VMIs. nats-server and the
  per-node zygotes are printed separately.
- launchers: USS (Private_Clean + Private_Dirty of /proc/<pid>/smaps_rollup) with all
  VMIs Running, median and p95.
- floor, in the same run: a raw JetStream 6-hop chain on the same nats-server (each hop:
  an ordered push consumer receives, `js.publish` to the next subject, awaited ack) and a
  raw zygote fork → launcher reports Running (no bus, no handler).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import msgspec
import nats
from nats.aio.msg import Msg

from bench.http_load import Connection
from client import credentials
from ops.nats_server import free_port
from ops.supervisor import interrupt

NS = "default"
VMS = f"/apis/kubevirt.io/v1/namespaces/{NS}/virtualmachines"
VMIS = f"/apis/kubevirt.io/v1/namespaces/{NS}/virtualmachineinstances"
REPO = Path(__file__).resolve().parents[1]


def vm_manifest(name: str) -> dict[str, object]:
    return {
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachine",
        "metadata": {"name": name, "namespace": NS},
        "spec": {
            "runStrategy": "Always",
            "template": {
                "spec": {
                    "domain": {"memory": {"guest": "64Mi"}, "devices": {}},
                    "terminationGracePeriodSeconds": 30,
                }
            },
        },
    }


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


def ms(values: list[float]) -> str:
    if not values:
        return "n/a"
    return (
        f"p50 {pct(values, 50) * 1e3:.1f} ms, p95 {pct(values, 95) * 1e3:.1f} ms, "
        f"p99 {pct(values, 99) * 1e3:.1f} ms, max {max(values) * 1e3:.1f} ms "
        f"(n={len(values)})"
    )


# ----------------------------------------------------------------------- /proc
def rss_kib(pid: int) -> int:
    with contextlib.suppress(OSError):
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def uss_kib(pid: int) -> int:
    with contextlib.suppress(OSError), open(f"/proc/{pid}/smaps_rollup") as f:
        return sum(int(line.split()[1]) for line in f if line.startswith("Private_"))
    return 0


def cpu_seconds(pid: int) -> float:
    """The scheduler's exact run time of a process, summed over its threads.

    Not utime + stime from /proc/<pid>/stat: those come from tick sampling, and a
    launcher that runs a few milliseconds after its fork is charged next to nothing
    there (measured: 0-1 ticks for 7-9 ms of run time)."""
    total = 0
    try:
        tasks = list(Path(f"/proc/{pid}/task").iterdir())
    except OSError:
        return 0.0
    for task in tasks:
        with contextlib.suppress(OSError, ValueError, IndexError):
            total += int((task / "schedstat").read_text().split()[0])
    return total / 1e9


def children(pid: int) -> list[int]:
    out = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        with contextlib.suppress(OSError):
            out += [int(c) for c in (task / "children").read_text().split()]
    return out


# ------------------------------------------------------------------ the cluster
@dataclass
class Up:
    data_dir: Path
    port: int
    nats_port: int
    proc: subprocess.Popen[bytes]

    @property
    def api(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def nats_url(self) -> str:
        return f"nats://127.0.0.1:{self.nats_port}"

    def services(self) -> dict[str, int]:
        """name → pid from up's state file (api, controller, handler node-i, nats-server)."""
        raw = json.loads((self.data_dir / "up.json").read_text())
        return {name: rec["pid"] for name, rec in raw.items()}

    def launcher_pids(self) -> list[int]:
        pids = []
        for pidfile in (self.data_dir / "run").glob("*/launchers/*.pid"):
            with contextlib.suppress(OSError, ValueError):
                pid = int(pidfile.read_text().strip())
                if Path(f"/proc/{pid}").exists():
                    pids.append(pid)
        return pids

    def stop(self) -> None:
        interrupt(self.proc, 90)


def cpu_snapshot(up: Up) -> dict[str, float]:
    """CPU seconds so far of every process of the cluster, grouped: each service, the
    zygotes, the launchers alive now (a launcher born later counts from 0), this client."""
    svcs = up.services()
    out = {name: cpu_seconds(pid) for name, pid in svcs.items()}
    out["zygotes"] = sum(
        cpu_seconds(c) for n, pid in svcs.items() if n.startswith("handler") for c in children(pid)
    )
    out["launchers"] = sum(cpu_seconds(p) for p in up.launcher_pids())
    out["bench client"] = cpu_seconds(os.getpid())
    return out


def cpu_delta(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    delta = {n: after[n] - before.get(n, 0.0) for n in after}
    handlers = sum(v for n, v in delta.items() if n.startswith("handler"))
    grouped = {n: v for n, v in delta.items() if not n.startswith("handler")}
    grouped["handlers (all)"] = handlers
    return grouped


def cpu_line(cpu: dict[str, float], span: float, n: int) -> str:
    """Total CPU of a phase, its share of the machine, per VMI, and each part (seconds)."""
    total = sum(cpu.values())
    cells = [f"{k} {c:.2f}" for k, c in sorted(cpu.items(), key=lambda x: -x[1]) if c >= 0.05]
    return (
        f"total {total:.1f} ({total / span / (os.cpu_count() or 1):.0%} of the machine, "
        f"{total / max(n, 1) * 1e3:.1f} ms/VMI): " + ", ".join(cells)
    )


def start_up(
    data_dir: Path, nodes: int, node_memory: str, node_cpus: int, sync_interval: str = "always"
) -> Up:
    port, nats_port = free_port(), free_port()
    log = open(data_dir.parent / f"{data_dir.name}-up.log", "wb")  # noqa: SIM115
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "cli.main",
            "up",
            "--data-dir",
            str(data_dir),
            "--nodes",
            str(nodes),
            "--port",
            str(port),
            "--nats-port",
            str(nats_port),
            "--node-memory",
            node_memory,
            "--node-cpus",
            str(node_cpus),
            "--sync-interval",
            sync_interval,
        ],
        cwd=REPO,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    return Up(data_dir, port, nats_port, proc)


async def wait_ready(up: Up, nodes: int, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    async with httpx.AsyncClient(**credentials.httpx_options(up.api, wait=60), timeout=5) as http:
        while time.monotonic() < deadline:
            if up.proc.poll() is not None:
                raise SystemExit(f"virtstream up exited with {up.proc.returncode}")
            with contextlib.suppress(httpx.HTTPError, ValueError):
                r = await http.get("/api/v1/nodes")
                if r.is_success and len(r.json().get("items", [])) >= nodes:
                    ready = await http.get("/readyz")
                    if ready.is_success:
                        return
            await asyncio.sleep(0.3)
    raise SystemExit(f"cluster not ready within {timeout:.0f}s")


# ------------------------------------------------------------------- the floor
async def hop_chain(nats_url: str, rounds: int, hops: int = 6) -> list[float]:
    """Raw JetStream: a message through `hops` consume→publish steps, one process."""
    nc = await nats.connect(nats_url, **credentials.nats_options(nats_url, "admin"))
    js = nc.jetstream()
    stream = f"BENCHHOP{os.getpid()}"
    await js.add_stream(name=stream, subjects=[f"benchhop{os.getpid()}.>"])
    subj = [f"benchhop{os.getpid()}.{i}" for i in range(hops + 1)]
    done: asyncio.Queue[float] = asyncio.Queue()
    subs = []
    try:
        for i in range(1, hops + 1):

            async def relay(msg: Msg, i: int = i) -> None:
                if i == hops:
                    done.put_nowait(time.perf_counter())
                else:
                    await js.publish(subj[i + 1], msg.data)

            subs.append(await js.subscribe(subj[i], cb=relay, ordered_consumer=True))
        out = []
        for _ in range(rounds):
            t0 = time.perf_counter()
            await js.publish(subj[1], b"x" * 200)
            out.append(await asyncio.wait_for(done.get(), 5) - t0)
        return out[min(10, rounds // 10) :]  # the first rounds warm the consumers up
    finally:
        for s in subs:
            with contextlib.suppress(Exception):
                await s.unsubscribe()
        with contextlib.suppress(Exception):
            await js.delete_stream(stream)
        await nc.drain()


@dataclass
class SpawnFloor:
    """Raw launcher spawns: latency, memory and CPU of the work no choreography skips."""

    latency: list[float]  # seconds, zygote fork → the launcher reports Running
    uss: list[int]  # KiB per launcher
    zygote_cpu: float  # seconds of the zygote's CPU per spawn (the fork)
    launcher_cpu: list[float]  # seconds each launcher ran until Running

    @property
    def cpu(self) -> float:
        """CPU seconds one launch costs the machine (zygote + launcher, median)."""
        return self.zygote_cpu + (statistics.median(self.launcher_cpu) if self.launcher_cpu else 0)


def spawn_cpu_line(spawn: SpawnFloor) -> str:
    """The launch's CPU and the rate at which launches alone would fill every core."""
    launcher = statistics.median(spawn.launcher_cpu) if spawn.launcher_cpu else 0.0
    cores = os.cpu_count() or 1
    return (
        f"CPU per launch {spawn.cpu * 1e3:.1f} ms (zygote fork {spawn.zygote_cpu * 1e3:.1f}, "
        f"launcher to Running {launcher * 1e3:.1f}): launches alone fill {cores} cores at "
        f"{cores / spawn.cpu if spawn.cpu else 0:.0f}/s"
    )


async def zygote_floor(run_dir: Path, count: int) -> SpawnFloor:
    """Raw launcher spawn: zygote fork → the launcher reports Running (spawn_probe's path)."""
    from services.launcher.client import LauncherClient
    from services.launcher.domain_state import DomainState
    from services.launcher.protocol import Shutdown, Start
    from services.launcher.zygote import spawn_launcher, start_zygote

    os.makedirs(run_dir, exist_ok=True)
    zsock = str(run_dir / "zygote.sock")
    saved = os.dup(2)  # the zygote logs every exit to its stderr: keep the report readable
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 2)
    try:
        zygote = start_zygote(zsock)
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(devnull)
    clients = []
    lat, uss, run = [], [], []
    zygote_cpu = cpu_seconds(zygote.pid)
    try:
        for i in range(count):
            vmi = {
                "metadata": {"name": f"floor-{i}", "namespace": NS, "uid": f"floor-{i}"},
                "spec": {"domain": {"memory": {"guest": "64Mi"}}},
            }
            sock = str(run_dir / f"f{i}.sock")
            t0 = time.perf_counter()
            await asyncio.to_thread(spawn_launcher, zsock, msgspec.json.encode(vmi), sock)
            client = await LauncherClient.connect(sock)
            await client.call(Start())
            await client.wait_for(lambda s: s.state is DomainState.RUNNING)
            lat.append(time.perf_counter() - t0)
            run.append(cpu_seconds(client.hello.pid))
            clients.append(client)
        zygote_cpu = (cpu_seconds(zygote.pid) - zygote_cpu) / max(1, count)
        await asyncio.sleep(0.2)
        uss = [uss_kib(c.hello.pid) for c in clients]
    finally:
        for c in clients:
            with contextlib.suppress(Exception):
                await c.call(Shutdown(grace_period_seconds=0))
                await c.wait_for(lambda s: s.final, timeout=5)
            await c.close()
        zygote.terminate()
        zygote.wait()
    skip = min(2, count // 10)  # the first spawns warm the path up
    return SpawnFloor(lat[skip:], uss, zygote_cpu, run[skip:])


# --------------------------------------------------------------- the workload
@dataclass
class Track:
    created: dict[str, float] = field(default_factory=dict)  # name → POST written
    # (method, name) → (perf_counter, epoch) at the request: converts client times to epoch
    wall: dict[tuple[str, str], tuple[float, float]] = field(default_factory=dict)
    running: dict[str, float] = field(default_factory=dict)
    deleting: dict[str, float] = field(default_factory=dict)  # name → DELETE written
    succeeded: dict[str, float] = field(default_factory=dict)
    failed: dict[str, float] = field(default_factory=dict)
    removed: dict[str, float] = field(default_factory=dict)
    send_lag: list[float] = field(default_factory=list)
    http_errors: list[str] = field(default_factory=list)
    all_running: asyncio.Event = field(default_factory=asyncio.Event)
    all_ended: asyncio.Event = field(default_factory=asyncio.Event)
    all_removed: asyncio.Event = field(default_factory=asyncio.Event)
    n: int = 0
    connections: int = 0  # the most the paced client held open at once


async def watch_vmis(api: str, track: Track, opened: asyncio.Event) -> None:
    decoder = msgspec.json.Decoder()
    timeout = httpx.Timeout(10, read=None)
    async with (
        httpx.AsyncClient(**credentials.httpx_options(api, wait=60), timeout=timeout) as http,
        http.stream("GET", VMIS, params={"watch": "true"}) as resp,
    ):
        resp.raise_for_status()
        opened.set()
        async for line in resp.aiter_lines():
            if not line:
                continue
            now = time.perf_counter()
            ev = decoder.decode(line)
            obj = ev.get("object") or {}
            name = (obj.get("metadata") or {}).get("name", "")
            phase = (obj.get("status") or {}).get("phase")
            if ev.get("type") == "DELETED":
                if name in track.deleting and name not in track.removed:
                    track.removed[name] = now
                    if len(track.removed) >= track.n:
                        track.all_removed.set()
                continue
            if phase == "Running" and name in track.created and name not in track.running:
                track.running[name] = now
                if len(track.running) >= track.n:
                    track.all_running.set()
            elif name in track.deleting and phase in ("Succeeded", "Failed"):
                ended = track.succeeded if phase == "Succeeded" else track.failed
                if name not in track.succeeded and name not in track.failed:
                    ended[name] = now
                    if len(track.succeeded) + len(track.failed) >= track.n:
                        track.all_ended.set()


MAX_CONNS = 64  # each new one costs a TLS handshake on both sides


async def paced(
    up: Up,
    names: list[str],
    rate: float,
    method: str,
    conns: int,
    track: Track,
    max_conns: int = MAX_CONNS,
) -> None:
    """Open-loop: request i is due at start + i/rate, whatever earlier ones are doing: a
    request due while every connection is busy opens another one (as more clients would,
    up to `max_conns`), so a slow api meets the offered rate, not a client-side queue."""
    pool: asyncio.Queue[Connection] = asyncio.Queue()
    creds = credentials.for_api(up.api)
    opened: list[Connection] = []

    async def connection() -> Connection:
        if pool.empty() and len(opened) < max_conns:
            conn = await Connection.open("127.0.0.1", up.port, creds)
            opened.append(conn)
            return conn
        return await pool.get()

    for _ in range(conns):
        pool.put_nowait(await connection())
    stamp = track.created if method == "POST" else track.deleting
    expect = 201 if method == "POST" else 200

    async def one(name: str, due: float) -> None:
        conn = await connection()
        try:
            t = time.perf_counter()
            track.send_lag.append(t - due)
            stamp[name] = t
            track.wall[method, name] = (t, time.time())
            if method == "POST":
                status, body = await conn.request("POST", VMS, vm_manifest(name))
            else:
                status, body = await conn.request("DELETE", f"{VMS}/{name}")
            if status != expect and not (method == "DELETE" and status == 202):
                track.http_errors.append(f"{method} {name}: {status} {body[:200]!r}")
        finally:
            pool.put_nowait(conn)

    start = time.perf_counter() + 0.05
    tasks = []
    for i, name in enumerate(names):
        due = start + i / rate
        delay = due - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        tasks.append(asyncio.create_task(one(name, due)))
    await asyncio.gather(*tasks)
    track.connections = max(track.connections, len(opened))
    for conn in opened:
        conn.close()


CREATE_CHAIN = ("VMCreated", "VMICreated", "PodScheduled", "LauncherStarted", "DomainStarted")
DELETE_CHAIN = ("VMDeleted", "VMIDeleteRequested", "DomainStopped", "LauncherExited", "VMIRemoved")


async def stream_times(up: Up) -> dict[str, dict[str, float]]:
    """VM name → event type → JetStream timestamp of its first such event (VM and VMI)."""
    from events.codec import event_type
    from eventstore.jetstream import JetStreamStore

    nc = await nats.connect(up.nats_url, **credentials.nats_options(up.nats_url))
    first: dict[str, dict[str, float]] = {}
    try:
        async for s in JetStreamStore(nc).replay(["virt.vm.>", "virt.vmi.>"]):
            et = event_type(s.event)
            first.setdefault(s.event.meta.aggregate.name, {}).setdefault(et, s.time)
    finally:
        await nc.drain()
    return first


def breakdown(
    first: dict[str, dict[str, float]],
    track: Track,
    method: str,
    chain: tuple[str, ...],
    end: dict[str, float],
    end_label: str,
) -> list[tuple[str, list[float]]]:
    """Where a request's latency goes: the chain's events by server timestamp between the
    client's request and what the watch showed (client clock converted to epoch)."""
    segments: dict[str, list[float]] = {}
    for (m, name), (perf, epoch) in track.wall.items():
        times = first.get(name, {})
        if m != method or name not in end or any(et not in times for et in chain):
            continue
        points = [(method, epoch), *((et, times[et]) for et in chain)]
        points.append((end_label, epoch + end[name] - perf))
        points.sort(key=lambda p: p[1])
        for (a, ta), (b, tb) in itertools.pairwise(points):
            segments.setdefault(f"{a}→{b}", []).append(tb - ta)
    return list(segments.items())


@dataclass
class Memory:
    services: dict[str, int]  # name → RSS KiB
    zygotes: list[int]  # RSS KiB
    nats: int

    @property
    def control_plane(self) -> int:
        return sum(v for k, v in self.services.items() if k != "nats-server")


def start_profilers(up: Up, out: Path) -> list[subprocess.Popen[bytes]]:
    """py-spy (if installed; not a project dependency) on api, controller and node-1's
    handler for the create phase: flame graphs in `out`."""
    out.mkdir(parents=True, exist_ok=True)
    spy = Path(sys.executable).parent / "py-spy"
    svcs = up.services()
    procs = []
    for name in ("api", "controller", "handler node-1"):
        txt = out / f"{name.replace(' ', '-')}.txt"
        procs.append(
            subprocess.Popen(
                [
                    str(spy),
                    "record",
                    "-p",
                    str(svcs[name]),
                    "-o",
                    str(txt),
                    "-r",
                    "200",
                    "-f",
                    "raw",
                    "--gil",  # samples of a thread holding the GIL: work, not waits
                ],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
        )
    return procs


def sample_memory(up: Up) -> Memory:
    svcs = up.services()
    rss = {name: rss_kib(pid) for name, pid in svcs.items()}
    zygotes = [
        rss_kib(c)
        for name, pid in svcs.items()
        if name.startswith("handler")
        for c in children(pid)
    ]
    return Memory(rss, zygotes, rss.get("nats-server", 0))


async def run(a: argparse.Namespace) -> int:
    data_dir = Path(tempfile.mkdtemp(prefix="vsb", dir="/tmp"))
    up = start_up(data_dir, a.nodes, a.node_memory, a.node_cpus, a.sync_interval)
    rc = 0
    try:
        await wait_ready(up, a.nodes)
        await asyncio.sleep(a.settle)  # let start-up work (imports, catch-up) finish
        hops = await hop_chain(up.nats_url, a.hop_rounds)
        spawn = await zygote_floor(data_dir / "floor", a.floor_launchers)
        fork, floor_uss = spawn.latency, spawn.uss
        before = sample_memory(up)
        cpu_before = cpu_snapshot(up)
        profilers = start_profilers(up, a.profile) if a.profile else []

        track = Track(n=a.vms)
        opened = asyncio.Event()
        watcher = asyncio.create_task(watch_vmis(up.api, track, opened))
        await asyncio.wait_for(opened.wait(), 10)
        prefix = f"b{int(time.time()) % 100000}"
        names = [f"{prefix}-{i}" for i in range(a.vms)]
        t_create = time.perf_counter()
        await paced(up, names, a.rate, "POST", a.conns, track)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(track.all_running.wait(), a.timeout)
        create_span = time.perf_counter() - t_create
        cpu = cpu_delta(cpu_before, cpu_snapshot(up))
        for prof in profilers:
            prof.send_signal(signal.SIGINT)
        for prof in profilers:
            prof.wait(30)
        await asyncio.sleep(1.0)  # let the last launchers settle before reading memory
        after = sample_memory(up)
        launchers = up.launcher_pids()
        launcher_uss = [u for u in (uss_kib(p) for p in launchers) if u]

        t_delete = time.perf_counter()
        await paced(up, names, a.rate, "DELETE", a.conns, track)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(track.all_removed.wait(), a.timeout)
        delete_span = time.perf_counter() - t_delete
        first = await stream_times(up)
        watcher.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await watcher
    finally:
        up.stop()

    create = [track.running[n] - track.created[n] for n in track.running]
    ended = {**track.succeeded, **track.failed}
    delete = [ended[n] - track.deleting[n] for n in ended if n in track.deleting]
    to_succeeded = [track.succeeded[n] - track.deleting[n] for n in track.succeeded]
    removed = [track.removed[n] - track.deleting[n] for n in track.removed]
    n_running = len(track.running)
    print(f"\n== {a.vms} VMs at {a.rate:g}/s over {a.nodes} nodes ({os.cpu_count()} CPUs) ==")
    print(f"create→Running (vmiCreationToRunningSeconds): {ms(create)}")
    print(
        f"  all created+Running in {create_span:.1f} s; send lag p99 "
        f"{pct(track.send_lag, 99) * 1e3:.1f} ms"
    )
    for seg, values in breakdown(first, track, "POST", CREATE_CHAIN, track.running, "watch"):
        print(f"    {seg:<34} {ms(values)}")
    print(f"deletion→Succeeded: {ms(to_succeeded)}")
    if track.failed:
        print(f"  {len(track.failed)} VMI(s) ended Failed instead; deletion→final: {ms(delete)}")
    print(f"deletion→VMI removed (DELETED): {ms(removed)}  ({delete_span:.1f} s)")
    for seg, values in breakdown(first, track, "DELETE", DELETE_CHAIN, ended, "watch"):
        print(f"    {seg:<34} {ms(values)}")
    if n_running < a.vms:
        print(f"!! {a.vms - n_running} VMI(s) never showed Running within {a.timeout:.0f}s")
        rc = 1
    if track.http_errors:
        print(f"!! {len(track.http_errors)} HTTP error(s), first: {track.http_errors[0]}")
        rc = 1
    cp_before, cp_after = before.control_plane, after.control_plane
    per = n_running or 1
    print("control plane RSS (api + controller + handlers):")
    print(
        f"  before {cp_before / 1024:.1f} MiB, after {cp_after / 1024:.1f} MiB → "
        f"{(cp_after - cp_before) / per:.1f} KiB per VMI (delta), "
        f"{cp_after / per:.1f} KiB per VMI (absolute)"
    )
    for name in sorted(after.services):
        b, x = before.services.get(name, 0), after.services[name]
        print(
            f"    {name:<16} {b / 1024:7.1f} → {x / 1024:7.1f} MiB ({(x - b) / per:+.1f} KiB/VMI)"
        )
    print(f"CPU seconds during the create phase: {cpu_line(cpu, create_span, n_running)}")
    print(
        f"  zygotes: {len(after.zygotes)}, RSS {sum(after.zygotes) / 1024:.1f} MiB total "
        f"(not in the control-plane figure)"
    )
    if launcher_uss:
        print(
            f"launcher USS: median {statistics.median(launcher_uss) / 1024:.2f} MiB, "
            f"p95 {pct([float(u) for u in launcher_uss], 95) / 1024:.2f} MiB "
            f"over {len(launcher_uss)} launchers"
        )
    print("floor (same run, same nats-server):")
    print(f"  raw JetStream 6-hop chain: {ms(hops)}")
    print(
        f"  raw zygote fork→Running: {ms(fork)}; USS median "
        f"{statistics.median(floor_uss) / 1024 if floor_uss else 0:.2f} MiB"
    )
    print(f"  {spawn_cpu_line(spawn)}")
    if create:
        print(target_line(create, fork, hops))
    remove_run(data_dir, a.keep)
    return rc


def target_line(create: list[float], fork: list[float], chain: list[float]) -> str:
    """create→Running against its targets: p50 ≤ 2x and p99 ≤ 5x the floor (fork→Running
    + the raw chain, the work no choreography can skip), and p99 ≤ 100 ms."""
    p50, p99 = pct(create, 50), pct(create, 99)
    f50, f99 = pct(fork, 50) + pct(chain, 50), pct(fork, 99) + pct(chain, 99)
    return (
        f"targets: p50 {p50 * 1e3:.1f} ms = x{p50 / f50:.1f} the floor's {f50 * 1e3:.1f} (≤ 2); "
        f"p99 {p99 * 1e3:.1f} ms (≤ 100) = x{p99 / f99:.1f} the floor's {f99 * 1e3:.1f} (≤ 5)"
    )


def remove_run(data_dir: Path, keep: bool) -> None:
    """A run's data dir and `up`'s log beside it, unless asked to keep them."""
    print(f"(logs: {data_dir}; removed unless --keep)")
    if not keep:
        shutil.rmtree(data_dir, ignore_errors=True)
        with contextlib.suppress(OSError):
            (data_dir.parent / f"{data_dir.name}-up.log").unlink()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--vms", type=int, default=500)
    p.add_argument("--rate", type=float, default=50.0, help="creates (and deletes) per second")
    p.add_argument("--nodes", type=int, default=10)
    p.add_argument("--node-memory", default="64Gi")
    p.add_argument("--node-cpus", type=int, default=64)
    p.add_argument("--sync-interval", default="always", help="the embedded server's fsync interval")
    p.add_argument("--conns", type=int, default=8, help="keep-alive connections for writes")
    p.add_argument("--timeout", type=float, default=120.0, help="per phase, after the last request")
    p.add_argument("--settle", type=float, default=3.0, help="seconds idle before measuring")
    p.add_argument("--hop-rounds", type=int, default=300)
    p.add_argument("--floor-launchers", type=int, default=30)
    p.add_argument("--keep", action="store_true", help="keep the data dir (logs)")
    p.add_argument("--profile", type=Path, default=None, help="py-spy flame graphs go here")
    ramp = p.add_argument_group("the ceiling (bench/exec_ramp.py)")
    ramp.add_argument("--ramp", default="", help="rates to step through, e.g. 25,50,100,150,200")
    ramp.add_argument(
        "--step-seconds", type=float, default=4.0, help="creates per step: rate x this"
    )
    ramp.add_argument("--step-min", type=int, default=100, help="at least this many VMs per step")
    ramp.add_argument("--step-pause", type=float, default=2.0, help="idle seconds between steps")
    ramp.add_argument("--p99-target", type=float, default=250.0, help="ms, for the ceiling")
    ramp.add_argument(
        "--rounds", type=int, default=1, help="step through the rates this many times"
    )
    scale = p.add_argument_group("many VMIs (bench/exec_scale.py)")
    scale.add_argument("--scale", default="", help="VMI counts to grow through, e.g. 500,2000")
    scale.add_argument("--scale-nodes", type=int, default=20)
    scale.add_argument("--watchers", type=int, default=10, help="watch fan-out")
    scale.add_argument("--list-rounds", type=int, default=20)
    scale.add_argument(
        "--warm-up", type=int, default=100, help="VMs created and deleted before the baseline"
    )
    a = p.parse_args()
    if a.scale:
        from bench.exec_scale import run_scale

        raise SystemExit(asyncio.run(run_scale(a)))
    if a.ramp:
        from bench.exec_ramp import run_ramp

        raise SystemExit(asyncio.run(run_ramp(a)))
    raise SystemExit(asyncio.run(run(a)))


if __name__ == "__main__":
    main()
