"""What the execution benchmarks share (`bench_exec`'s sustained run, its ramp in
`exec_ramp.py`, its many-VMIs run in `exec_scale.py`, and `bench_migration`): the cluster
under test and its processes' CPU and memory, the floor's raw chain and zygote spawns, the
watch that times each VMI, the paced load, and the event chain's breakdown."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
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

    def zygote_pids(self) -> list[int]:
        """The handlers' children: a zygote each."""
        return [
            child
            for name, pid in self.services().items()
            if name.startswith("handler")
            for child in children(pid)
        ]

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
    out["zygotes"] = sum(cpu_seconds(z) for z in up.zygote_pids())
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
    data_dir: Path,
    nodes: int,
    node_memory: str,
    node_cpus: int,
    sync_interval: str = "always",
    extra: Sequence[str] = (),
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
            *extra,
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
    """py-spy (if installed; not a project dependency) on api, controller, upkeep and node-1's
    handler for the create phase: flame graphs in `out`."""
    out.mkdir(parents=True, exist_ok=True)
    spy = Path(sys.executable).parent / "py-spy"
    svcs = up.services()
    procs = []
    for name in ("api", "controller", "handler node-1", "upkeep"):
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
    zygotes = [rss_kib(z) for z in up.zygote_pids()]
    return Memory(rss, zygotes, rss.get("nats-server", 0))


def remove_run(data_dir: Path, keep: bool) -> None:
    """A run's data dir and `up`'s log beside it, unless asked to keep them."""
    print(f"(logs: {data_dir}; removed unless --keep)")
    if not keep:
        shutil.rmtree(data_dir, ignore_errors=True)
        with contextlib.suppress(OSError):
            (data_dir.parent / f"{data_dir.name}-up.log").unlink()
