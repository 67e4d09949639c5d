"""The ceiling: `python -m bench.bench_exec --ramp 25,50,100,150,200 [--step-seconds 4]`.

One `virtstream up` cluster; for each rate in turn (`--rounds N`: the whole ramp N times
over): POST `max(--step-min, rate x --step-seconds)` VMs open-loop at that rate, wait
until the watch shows them all Running, then DELETE them (at `--rate`) and wait until all
are gone, so every step starts from an empty cluster. Per step: create→Running p50/p99,
each hop's p99 (JetStream timestamps of the create chain's events, as in the default
mode), and CPU seconds per process from /proc (api, controller, each handler,
nats-server, the zygotes, the launchers, this client) during the create phase. The
ceiling is the highest rate whose p99 stays ≤ `--p99-target` in most rounds.

Floors, measured in the same run before the first step: a raw JetStream chain of as many
hops as the create chain (POST → 5 events → watch: 6) and a raw zygote fork → launcher
Running. Every figure is printed beside its ratio to the floor: create→Running against
fork→Running + chain (the work no choreography can skip), a hop's p99 against the chain's
p99 per hop.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from bench.exec_common import (
    CREATE_CHAIN,
    Track,
    Up,
    breakdown,
    cpu_delta,
    cpu_line,
    cpu_snapshot,
    hop_chain,
    ms,
    paced,
    pct,
    remove_run,
    spawn_cpu_line,
    start_up,
    stream_times,
    wait_ready,
    watch_vmis,
    zygote_floor,
)

HOPS = len(CREATE_CHAIN) + 1  # POST → each event → the watch


@dataclass
class Step:
    round: int
    rate: float
    n: int
    create: list[float]
    track: Track
    span: float
    cpu: dict[str, float]
    send_lag_p99: float
    errors: int


async def create_step(
    up: Up, prefix: str, rnd: int, rate: float, n: int, a: argparse.Namespace
) -> tuple[Step, list[str]]:
    track = Track(n=n)
    opened = asyncio.Event()
    watcher = asyncio.create_task(watch_vmis(up.api, track, opened))
    await asyncio.wait_for(opened.wait(), 10)
    names = [f"{prefix}-{i}" for i in range(n)]
    cpu0 = cpu_snapshot(up)
    t0 = time.perf_counter()
    await paced(up, names, rate, "POST", a.conns, track)
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(track.all_running.wait(), a.timeout)
    span = time.perf_counter() - t0
    cpu = cpu_delta(cpu0, cpu_snapshot(up))
    # the same watch sees the deletions through to DELETED
    await paced(up, names, a.rate, "DELETE", a.conns, track)
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(track.all_removed.wait(), a.timeout)
    watcher.cancel()
    with contextlib.suppress(asyncio.CancelledError, Exception):
        await watcher
    create = [track.running[k] - track.created[k] for k in track.running]
    lag = pct(track.send_lag, 99) if track.send_lag else 0.0
    return Step(rnd, rate, n, create, track, span, cpu, lag, len(track.http_errors)), names


def ceiling_line(held: dict[int, set[float]], rates: list[float], target: float) -> str:
    """The highest rate whose p99 held in most rounds; each round's own ceiling beside it.

    A round's ceiling moves with what else the machine does (one rate apart between runs
    minutes apart), so one round is not a figure on its own."""
    rounds = len(held)
    per_round = [max(h, default=0.0) for h in held.values()]
    counts = {rate: sum(rate in h for h in held.values()) for rate in rates}
    most = [rate for rate, n in counts.items() if n * 2 > rounds]
    tally = ", ".join(f"{rate:g}/s {counts[rate]}/{rounds}" for rate in rates)
    rounds_text = ", ".join(f"{c:g}" if c else "none" for c in per_round)
    if not most:
        return f"\nceiling: no rate kept p99 ≤ {target:g} ms in most rounds ({tally})"
    return (
        f"\nceiling: {max(most):g} VMs/s with p99 ≤ {target:g} ms in most rounds "
        f"(held: {tally}; each round's ceiling: {rounds_text})"
    )


async def run_ramp(a: argparse.Namespace) -> int:
    rates = [float(r) for r in a.ramp.split(",") if r.strip()]
    data_dir = Path(tempfile.mkdtemp(prefix="vsr", dir="/tmp"))
    up = start_up(data_dir, a.nodes, a.node_memory, a.node_cpus, a.sync_interval)
    steps: list[Step] = []
    rc = 0
    try:
        await wait_ready(up, a.nodes)
        await asyncio.sleep(a.settle)
        chain = await hop_chain(up.nats_url, a.hop_rounds, hops=HOPS)
        spawn = await zygote_floor(data_dir / "floor", a.floor_launchers)
        fork = spawn.latency
        for rnd in range(1, a.rounds + 1):
            for i, rate in enumerate(rates):
                n = max(a.step_min, round(rate * a.step_seconds))
                step, _ = await create_step(up, f"r{rnd}-{i}", rnd, rate, n, a)
                steps.append(step)
                print(
                    f"round {rnd}, step {rate:g}/s: {len(step.create)}/{n} Running, "
                    f"{ms(step.create)}",
                    flush=True,
                )
                await asyncio.sleep(a.step_pause)
        first = await stream_times(up)
    finally:
        up.stop()

    floor50 = pct(fork, 50) + pct(chain, 50)
    floor99 = pct(fork, 99) + pct(chain, 99)
    hop99 = pct(chain, 99) / HOPS
    print(
        f"\n== ramp over {a.nodes} nodes ({os.cpu_count()} CPUs), p99 target {a.p99_target:g} ms =="
    )
    print(f"floor: raw zygote fork→Running {ms(fork)}")
    print(f"       {spawn_cpu_line(spawn)}")
    print(f"       raw JetStream {HOPS}-hop chain {ms(chain)}")
    print(
        f"       create→Running floor (fork + chain): p50 {floor50 * 1e3:.1f} ms, "
        f"p99 {floor99 * 1e3:.1f} ms; per hop p99 {hop99 * 1e3:.2f} ms"
    )
    print(
        f"\n{'round':>5} {'rate/s':>7} {'VMs':>5} {'p50 ms':>8} {'xfloor':>7} {'p99 ms':>8} "
        f"{'xfloor':>7} {'max ms':>8} {'achieved/s':>10} {'lag p99':>8} {'conns':>5}"
    )
    held: dict[int, set[float]] = {rnd: set() for rnd in range(1, a.rounds + 1)}
    for s in steps:
        if not s.create:
            print(f"{s.round:>5} {s.rate:>7g} {s.n:>5}   no VMI Running")
            rc = 1
            continue
        p50, p99 = pct(s.create, 50), pct(s.create, 99)
        ok = len(s.create) == s.n and s.errors == 0
        if ok and p99 * 1e3 <= a.p99_target:
            held[s.round].add(s.rate)
        if not ok:
            rc = 1
        print(
            f"{s.round:>5} {s.rate:>7g} {s.n:>5} {p50 * 1e3:>8.1f} {p50 / floor50:>7.1f} "
            f"{p99 * 1e3:>8.1f} {p99 / floor99:>7.1f} {max(s.create) * 1e3:>8.1f} "
            f"{s.n / s.span:>10.1f} {s.send_lag_p99 * 1e3:>7.1f}ms {s.track.connections:>5}"
            + ("" if ok else f"  !! {s.errors} errors")
        )
    print("\nper-hop p99 ms (x the raw chain's p99 per hop):")
    for s in steps:
        segs = breakdown(first, s.track, "POST", CREATE_CHAIN, s.track.running, "watch")
        cells = [
            f"{seg.split('→')[1]} {pct(v, 99) * 1e3:.1f} (x{pct(v, 99) / hop99:.0f})"
            for seg, v in segs
        ]
        print(f"  {s.round}: {s.rate:>5g}/s: " + ", ".join(cells))
    print("\nCPU seconds during each create phase (per VMI in ms):")
    for s in steps:
        print(f"  {s.round}: {s.rate:>5g}/s over {s.span:.1f} s: {cpu_line(s.cpu, s.span, s.n)}")
    print(ceiling_line(held, rates, a.p99_target))
    remove_run(data_dir, a.keep)
    return rc
