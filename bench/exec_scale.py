"""Many VMIs: `python -m bench.bench_exec --scale 500,2000 [--scale-nodes 20] [--rate 50]`.

One `virtstream up --nodes 20` cluster with real launcher processes (test driver). After
a warm-up (`--warm-up` VMs created and deleted) and the memory baseline, the cluster grows
to each count in turn (POSTs open-loop at `--rate` over a fixed pool of `--conns`
connections: what the api holds per client connection is not a VMI's cost), and at each
count, with every VMI Running, the bench measures:
- create→Running of the VMIs added in that batch (as in the default mode);
- control plane memory (api + controller + handlers): RSS and USS (Private_* of
  smaps_rollup) against the same processes before the first create, per VMI;
- the api's list of all VMIs: `--list-rounds` GETs one after another, p50/p99, bytes;
- watch fan-out: `--watchers` watches (plus the one that times create→Running) open from
  the start; the time from the batch's last POST until every watch has seen every VMI of
  the batch Running, and the slowest watch's lag behind the first;
- `virtstream verify` (a subprocess: rebuild every view from the log, compare with the
  api's): wall time and its verdict;
- a full rebuild: the whole stream replayed and folded into the projections' Cluster,
  in this process: seconds and events/s;
- launcher USS, median and p95.
Floors in the same run: a raw zygote fork → Running, a raw JetStream 6-hop chain, and a
raw ordered read + decode of the whole stream (the floor of the rebuild). The last
column shows how each figure grows from the first count to the last.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import msgspec
import nats

from bench.exec_common import (
    REPO,
    VMIS,
    Track,
    Up,
    hop_chain,
    ms,
    paced,
    pct,
    remove_run,
    rss_kib,
    start_up,
    uss_kib,
    wait_ready,
    zygote_floor,
)
from bench.exec_ramp import cpu_delta, cpu_snapshot
from bench.http_load import Connection, open_stream
from client import credentials


# ------------------------------------------------------------------ a light watch
class _Meta(msgspec.Struct):
    name: str = ""


class _Status(msgspec.Struct):
    phase: str | None = None


class _Obj(msgspec.Struct):
    metadata: _Meta = msgspec.field(default_factory=_Meta)
    status: _Status = msgspec.field(default_factory=_Status)


class _Event(msgspec.Struct):
    type: str = ""
    object: _Obj = msgspec.field(default_factory=_Obj)


_decode_event = msgspec.json.Decoder(_Event).decode


@dataclass
class LightWatch:
    """A watch on raw asyncio streams (httpx would cost the bench more CPU than the
    api spends, times eleven): records when each VMI was first seen Running."""

    running: dict[str, float] = field(default_factory=dict)
    opened: asyncio.Event = field(default_factory=asyncio.Event)
    changed: asyncio.Event = field(default_factory=asyncio.Event)

    async def run(self, up: Up) -> None:
        reader, writer, head = await open_stream("127.0.0.1", up.port, credentials.for_api(up.api))
        writer.write(f"GET {VMIS}?watch=true HTTP/1.1\r\n".encode() + head + b"\r\n")
        status = await reader.readline()
        if b" 200 " not in status:
            raise RuntimeError(f"watch: {status!r}")
        chunked = False
        while (line := await reader.readline()) not in (b"\r\n", b""):
            if line.lower().startswith(b"transfer-encoding:") and b"chunked" in line.lower():
                chunked = True
        self.opened.set()
        buf = b""
        try:
            while True:
                if chunked:
                    size = int((await reader.readline()).split(b";")[0], 16)
                    if size == 0:
                        return
                    data = await reader.readexactly(size + 2)
                    buf += data[:-2]
                else:
                    data = await reader.read(65536)
                    if not data:
                        return
                    buf += data
                *lines, buf = buf.split(b"\n")
                now = time.perf_counter()
                for raw in lines:
                    if not raw.strip():
                        continue
                    ev = _decode_event(raw)
                    name = ev.object.metadata.name
                    if ev.object.status.phase == "Running" and name not in self.running:
                        self.running[name] = now
                        self.changed.set()
        finally:
            writer.close()

    async def until(self, names: list[str], timeout: float) -> float | None:
        """perf_counter when the last of `names` was seen Running (None: not in time)."""
        deadline = time.perf_counter() + timeout
        while any(n not in self.running for n in names):
            left = deadline - time.perf_counter()
            if left <= 0:
                return None
            self.changed.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.changed.wait(), min(left, 1.0))
        return max(self.running[n] for n in names)


# ----------------------------------------------------------------------- figures
@dataclass
class Point:
    count: int
    create: list[float]
    rss_kib: int  # control plane, absolute
    uss_kib: int
    rss_delta_kib: int  # against the same processes before the first create
    uss_delta_kib: int
    services_rss: dict[str, int]
    list_lat: list[float]
    list_bytes: int
    fanout: float | None  # last POST → every watch saw every VMI of the batch Running
    fanout_spread: float | None  # the last watch behind the first
    verify_s: float
    verify_ok: bool
    verify_line: str
    rebuild_s: float
    rebuild_events: int
    raw_read_s: float
    launcher_uss: list[int]
    cpu: dict[str, float]  # CPU seconds per process group while the batch was created
    span: float


def control_plane(up: Up) -> dict[str, int]:
    return {n: p for n, p in up.services().items() if n != "nats-server"}


def memory(up: Up) -> tuple[int, int, dict[str, int]]:
    pids = control_plane(up)
    rss = {n: rss_kib(p) for n, p in pids.items()}
    return sum(rss.values()), sum(uss_kib(p) for p in pids.values()), rss


async def list_latency(up: Up, rounds: int) -> tuple[list[float], int]:
    conn = await Connection.open("127.0.0.1", up.port, credentials.for_api(up.api))
    out, size = [], 0
    try:
        for _ in range(rounds):
            t = time.perf_counter()
            status, body = await conn.request("GET", VMIS)
            out.append(time.perf_counter() - t)
            if status != 200:
                raise RuntimeError(f"list: {status} {body[:200]!r}")
            size = len(body)
    finally:
        conn.close()
    return out, size


async def warm_up(up: Up, n: int, a: argparse.Namespace) -> None:
    """Create `n` VMs, wait until all are Running, delete them and wait until they are gone.
    What a process grows once, on first use (allocator arenas, lazily built caches and
    indexes, connection buffers), is then in the baseline rather than charged to the
    first batch's VMIs: the per-VMI figures are what holding a VMI costs."""
    if n <= 0:
        return
    names = [f"warm-{i}" for i in range(n)]
    track = Track(n=n)
    await paced(up, names, a.rate, "POST", a.conns, track, max_conns=a.conns)
    conn = await Connection.open("127.0.0.1", up.port, credentials.for_api(up.api))
    try:
        deadline = time.monotonic() + a.timeout
        want = "Running"
        while time.monotonic() < deadline:
            _, body = await conn.request("GET", VMIS)
            phases = [
                i.get("status", {}).get("phase")
                for i in msgspec.json.decode(body)["items"]
                if i["metadata"]["name"].startswith("warm-")
            ]
            if want == "Running" and len(phases) == n and all(x == "Running" for x in phases):
                await paced(up, names, a.rate, "DELETE", a.conns, track, max_conns=a.conns)
                want = "gone"
            elif want == "gone" and not phases:
                await asyncio.sleep(a.settle)
                return
            await asyncio.sleep(0.5)
        raise RuntimeError(f"warm-up: the {n} VMs did not come and go within {a.timeout} s")
    finally:
        conn.close()


async def verify(up: Up) -> tuple[float, bool, str]:
    t = time.perf_counter()
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "cli.main",
        "--server",
        up.api,
        "verify",
        "--nats-url",
        up.nats_url,
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        env={**os.environ, "COLUMNS": "200"},
    )
    out, _ = await proc.communicate()
    lines = out.decode(errors="replace").strip().splitlines()
    return time.perf_counter() - t, proc.returncode == 0, lines[-1] if lines else ""


async def rebuild(up: Up) -> tuple[float, int, float]:
    """Full rebuild (replay + fold into Cluster) and a raw ordered read + decode of the
    same stream: seconds each, and the events read."""
    from events.codec import decode
    from eventstore.jetstream import JetStreamStore
    from projections.cluster import Cluster

    nc = await nats.connect(up.nats_url, **credentials.nats_options(up.nats_url))
    try:
        store = JetStreamStore(nc)
        last = await store.stream_last_seq()
        t = time.perf_counter()
        sub = await store.js.subscribe("virt.>", stream=store.stream, ordered_consumer=True)
        n_raw = 0
        while n_raw < last:
            try:
                msg = await sub.next_msg(timeout=5)
            except TimeoutError:
                break
            with contextlib.suppress(Exception):
                decode(msg.data)
            n_raw += 1
            if msg.metadata.sequence.stream >= last:
                break
        await sub.unsubscribe()
        raw_s = time.perf_counter() - t
        t = time.perf_counter()
        cluster = Cluster()
        n = 0
        async for s in store.replay(raw=True):
            cluster.apply(s)
            n += 1
        return time.perf_counter() - t, n, raw_s
    finally:
        await nc.drain()


async def run_scale(a: argparse.Namespace) -> int:
    counts = [int(c) for c in a.scale.split(",") if c.strip()]
    nodes = a.scale_nodes
    data_dir = Path(tempfile.mkdtemp(prefix="vss", dir="/tmp"))
    up = start_up(data_dir, nodes, a.node_memory, a.node_cpus, a.sync_interval)
    points: list[Point] = []
    rc = 0
    tasks: list[asyncio.Task[None]] = []
    try:
        await wait_ready(up, nodes)
        await asyncio.sleep(a.settle)
        chain = await hop_chain(up.nats_url, a.hop_rounds)
        fork = (await zygote_floor(data_dir / "floor", a.floor_launchers)).latency
        await warm_up(up, a.warm_up, a)
        rss0, uss0, svc0 = memory(up)
        watches = [LightWatch() for _ in range(a.watchers + 1)]
        tasks = [asyncio.create_task(w.run(up)) for w in watches]
        for w in watches:
            await asyncio.wait_for(w.opened.wait(), 10)
        main = watches[0]
        track = Track()
        prev = 0
        for count in counts:
            names = [f"s-{i}" for i in range(prev, count)]
            prev = count
            cpu0, t0 = cpu_snapshot(up), time.perf_counter()
            await paced(up, names, a.rate, "POST", a.conns, track, max_conns=a.conns)
            last_post = max(track.created[n] for n in names)
            await main.until(names, a.timeout)
            create = [main.running[n] - track.created[n] for n in names if n in main.running]
            span = time.perf_counter() - t0
            cpu = cpu_delta(cpu0, cpu_snapshot(up))
            seen = [await w.until(names, 30.0) for w in watches[1:]]
            fanout = spread = None
            if seen and all(s is not None for s in seen):
                done = [s for s in seen if s is not None]
                fanout, spread = max(done) - last_post, max(done) - min(done)
            print(
                f"{count} VMIs: {len(create)}/{len(names)} of the batch Running, {ms(create)}",
                flush=True,
            )
            await asyncio.sleep(2.0)  # let the last launchers and the folds settle
            rss, uss, svc = memory(up)
            lat, size = await list_latency(up, a.list_rounds)
            verify_s, verify_ok, verify_line = await verify(up)
            rebuild_s, events, raw_s = await rebuild(up)
            launcher_uss = [u for u in (uss_kib(p) for p in up.launcher_pids()) if u]
            points.append(
                Point(
                    count,
                    create,
                    rss,
                    uss,
                    rss - rss0,
                    uss - uss0,
                    svc,
                    lat,
                    size,
                    fanout,
                    spread,
                    verify_s,
                    verify_ok,
                    verify_line,
                    rebuild_s,
                    events,
                    raw_s,
                    launcher_uss,
                    cpu,
                    span,
                )
            )
            if len(create) < len(names) or track.http_errors or not verify_ok:
                rc = 1
    finally:
        for t in tasks:
            t.cancel()
        # `up` would stop every VM through the api on its way out; at these counts that
        # takes minutes: kill the launchers (test driver, nothing to shut down) first
        for pid in up.launcher_pids():
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        up.stop()
        for pid in up.launcher_pids():  # spawned while the first pass ran
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)

    print(f"\n== {nodes} nodes, creates at {a.rate:g}/s ({os.cpu_count()} CPUs) ==")
    print(f"floor: raw zygote fork→Running {ms(fork)}")
    print(f"       raw JetStream 6-hop chain {ms(chain)}")
    floor50 = pct(fork, 50) + pct(chain, 50)
    floor99 = pct(fork, 99) + pct(chain, 99)
    print(f"       fork + chain: p50 {floor50 * 1e3:.1f} ms, p99 {floor99 * 1e3:.1f} ms")
    print(
        f"control plane before the first create: RSS {rss0 / 1024:.1f} MiB, "
        f"USS {uss0 / 1024:.1f} MiB"
    )

    def row(label: str, cells: list[str], growth: str = "") -> None:
        print(f"  {label:<44}" + "".join(f"{c:>16}" for c in cells) + f"  {growth}")

    def grow(values: list[float]) -> str:
        if len(values) < 2 or not values[0]:
            return ""
        return f"x{values[-1] / values[0]:.2f}"

    row("VMIs", [str(p.count) for p in points], "last/first")
    p50s = [pct(p.create, 50) * 1e3 if p.create else 0 for p in points]
    p99s = [pct(p.create, 99) * 1e3 if p.create else 0 for p in points]
    row("create→Running p50 ms (x floor)", [f"{v:.1f} (x{v / 1e3 / floor50:.1f})" for v in p50s])
    row("create→Running p99 ms (x floor)", [f"{v:.1f} (x{v / 1e3 / floor99:.1f})" for v in p99s])
    rd = [p.rss_delta_kib / p.count for p in points]
    ud = [p.uss_delta_kib / p.count for p in points]
    row("control plane RSS delta KiB/VMI", [f"{v:.1f}" for v in rd], grow(rd))
    row("control plane USS delta KiB/VMI", [f"{v:.1f}" for v in ud], grow(ud))
    # each batch's own cost: what the control plane grew by from the previous count
    steps = [(0, 0.0), *((p.count, p.rss_delta_kib) for p in points)]
    md = [(r - r0) / (c - c0) for (c0, r0), (c, r) in itertools.pairwise(steps)]
    row("  RSS growth of the batch KiB/VMI", [f"{v:.1f}" for v in md], grow(md))
    ra = [p.rss_kib / p.count for p in points]
    row("control plane RSS absolute KiB/VMI", [f"{v:.1f}" for v in ra], grow(ra))
    for name in sorted(svc0, key=lambda n: (not n.startswith("api"), n)):
        if name.startswith("handler") and name not in ("handler node-1",):
            continue
        per = [(p.services_rss.get(name, 0) - svc0[name]) / p.count for p in points]
        row(f"  {name} RSS delta KiB/VMI", [f"{v:.1f}" for v in per])
    hd = [
        sum(v - svc0.get(n, 0) for n, v in p.services_rss.items() if n.startswith("handler"))
        / p.count
        for p in points
    ]
    row("  all handlers RSS delta KiB/VMI", [f"{v:.1f}" for v in hd])
    l50 = [pct(p.list_lat, 50) * 1e3 for p in points]
    row("list all VMIs p50 ms", [f"{v:.1f}" for v in l50], grow(l50))
    row("list all VMIs p99 ms", [f"{pct(p.list_lat, 99) * 1e3:.1f}" for p in points])
    row("list body KiB", [f"{p.list_bytes / 1024:.0f}" for p in points])
    fo = [p.fanout * 1e3 if p.fanout is not None else float("nan") for p in points]
    row(f"last POST → {a.watchers} watches all Running ms", [f"{v:.1f}" for v in fo])
    row(
        "  slowest watch behind the first ms",
        [f"{p.fanout_spread * 1e3:.1f}" if p.fanout_spread is not None else "n/a" for p in points],
    )
    vs = [p.verify_s for p in points]
    row(
        "virtstream verify s",
        [f"{v:.2f}" + ("" if p.verify_ok else " !!") for v, p in zip(vs, points, strict=True)],
        grow(vs),
    )
    rb = [p.rebuild_s for p in points]
    row(
        "full rebuild s (events)",
        [f"{p.rebuild_s:.2f} ({p.rebuild_events})" for p in points],
        grow(rb),
    )
    row(
        "  rebuild / raw read+decode rate",
        [f"{p.raw_read_s / p.rebuild_s:.0%}" if p.rebuild_s else "n/a" for p in points],
    )
    row(
        "launcher USS median / p95 MiB",
        [
            f"{statistics.median(p.launcher_uss) / 1024:.2f}/"
            f"{pct([float(u) for u in p.launcher_uss], 95) / 1024:.2f}"
            if p.launcher_uss
            else "n/a"
            for p in points
        ],
    )
    print("CPU seconds while each batch was created (until all Running):")
    for p in points:
        cells = [f"{n} {c:.1f}" for n, c in sorted(p.cpu.items(), key=lambda x: -x[1]) if c >= 0.05]
        print(f"  to {p.count} over {p.span:.1f} s: " + ", ".join(cells))
    for p in points:
        if not p.verify_ok:
            print(f"!! verify at {p.count}: {p.verify_line}")
    if track.http_errors:
        print(f"!! {len(track.http_errors)} HTTP error(s), first: {track.http_errors[0]}")
    remove_run(data_dir, a.keep)
    return rc
