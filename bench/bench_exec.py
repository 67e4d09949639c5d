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
import os
import signal
import statistics
import tempfile
import time
from pathlib import Path

from bench.exec_common import (
    CREATE_CHAIN,
    DELETE_CHAIN,
    Track,
    breakdown,
    cpu_delta,
    cpu_line,
    cpu_snapshot,
    hop_chain,
    ms,
    paced,
    pct,
    remove_run,
    sample_memory,
    spawn_cpu_line,
    start_profilers,
    start_up,
    stream_times,
    uss_kib,
    wait_ready,
    watch_vmis,
    zygote_floor,
)


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
