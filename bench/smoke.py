"""The smoke benchmark, run before every stop: is the create path as light as it was?

  python -m bench.smoke [--vms 150] [--rate 30] [--nodes 4] [--rest 10] [--baseline FILE]
                        [--write-baseline] [--profile DIR] [--messages]
                        [--sync-interval always|DURATION]

One cluster (`virtstream up`, test mode), the same run's floor (a raw JetStream 6-hop chain
and raw zygote spawns: bench/exec_common.py), then about 150 VMs created at 30/s, then
`--rest` seconds with nothing asked. It prints:
- create→Running p50 / p99 and their ratios to the floor's (fork→Running + the raw chain);
- CPU ms per VMI by process during the create phase (launches included);
- the cluster's CPU at rest, as a share of one core;
- with `--messages`, nats-server's messages in and out per VMI by user, and the events
  stored per VMI (from its monitoring port, which `up` then opens: `bench/nats_traffic.py`).

Each figure is compared with `docs/perf/smoke-baseline.json`: one more than 25% worse (and
worse by more than an absolute slack, so a figure near zero does not flap) is printed on a
line starting `REGRESSION`, and the exit code is 1. Latency is judged by its ratio to the
floor and CPU per VMI by its ratio to the floor's launch, so a busier machine moves both
sides; the launchers' and zygotes' own figures against the baseline's scaled by the two
runs' raw launches. `--write-baseline` records this run's figures (commit it with the reason).
Not a test: a benchmark, on a quiet machine, under a minute."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import sys
import tempfile
import time
from pathlib import Path

from bench import nats_traffic
from bench.exec_common import (
    REPO,
    Track,
    cpu_delta,
    cpu_snapshot,
    hop_chain,
    paced,
    pct,
    remove_run,
    start_profilers,
    start_up,
    wait_ready,
    watch_vmis,
    zygote_floor,
)

BASELINE = REPO / "docs" / "perf" / "smoke-baseline.json"
TOLERANCE = 1.25  # more than 25% worse is a regression
# absolute slack per figure: a change smaller than this is noise whatever its ratio
SLACK = {
    "p50_x_floor": 0.5,
    "p99_x_floor": 1.0,
    "cpu_ms_per_vmi": 2.0,
    "cpu_x_launch": 0.3,
    "rest_core_pct": 1.0,
}
PROCESS_SLACK_MS = 1.0
# what a launch costs is the floor's own measure: these processes' figures are judged
# against the baseline's scaled by the two runs' raw launches (a machine whose fork is dearer
# makes them dearer, not the services)
LAUNCH_PROCESSES = ("launchers", "zygotes")


async def measure(a: argparse.Namespace) -> dict[str, object]:
    data_dir = Path(tempfile.mkdtemp(prefix="vss", dir="/tmp"))
    monitored = ["--nats-monitoring"] if a.messages else []
    up = start_up(data_dir, a.nodes, "64Gi", 64, a.sync_interval, extra=monitored)
    try:
        await wait_ready(up, a.nodes)
        await asyncio.sleep(a.settle)  # start-up work (imports, catch-up) ends first
        hops = await hop_chain(up.nats_url, 100)
        spawn = await zygote_floor(data_dir / "floor", 12)
        track = Track(n=a.vms)
        opened = asyncio.Event()
        watcher = asyncio.create_task(watch_vmis(up.api, track, opened))
        await asyncio.wait_for(opened.wait(), 10)
        names = [f"s{int(time.time()) % 100000}-{i}" for i in range(a.vms)]
        profilers = start_profilers(up, a.profile) if a.profile else []
        monitoring = nats_traffic.monitoring_url(data_dir) if a.messages else ""
        traffic = nats_traffic.snapshot(monitoring) if monitoring else None
        messages: dict[str, object] = {}
        before = cpu_snapshot(up)
        t0 = time.perf_counter()
        await paced(up, names, a.rate, "POST", 4, track)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(track.all_running.wait(), a.timeout)
        span = time.perf_counter() - t0
        create_cpu = cpu_delta(before, cpu_snapshot(up))
        if traffic is not None:
            messages = nats_traffic.per_vmi(traffic, nats_traffic.snapshot(monitoring), a.vms)
        for prof in profilers:
            prof.send_signal(signal.SIGINT)
        for prof in profilers:
            prof.wait(30)
        await asyncio.sleep(2.0)  # the last acks, checkpoints and heartbeats of the burst
        watcher.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await watcher
        rest_before = cpu_snapshot(up)
        await asyncio.sleep(a.rest)
        rest = cpu_delta(rest_before, cpu_snapshot(up))
    finally:
        up.stop()
    remove_run(data_dir, False)
    create = [track.running[n] - track.created[n] for n in track.running]
    if len(create) < a.vms or track.http_errors:
        first = track.http_errors[0] if track.http_errors else ""
        raise SystemExit(
            f"smoke: {len(create)} of {a.vms} VMIs Running within {a.timeout:.0f}s {first}"
        )
    floor50 = pct(spawn.latency, 50) + pct(hops, 50)
    floor99 = pct(spawn.latency, 99) + pct(hops, 99)
    n = len(create)
    create_cpu.pop("bench client", None)
    rest.pop("bench client", None)
    per_vmi = {k: v / n * 1e3 for k, v in create_cpu.items()}
    total = sum(per_vmi.values())
    return {
        "vms": n,
        "rate": a.rate,
        "span_s": round(span, 2),
        "p50_ms": round(pct(create, 50) * 1e3, 1),
        "p99_ms": round(pct(create, 99) * 1e3, 1),
        "floor_p50_ms": round(floor50 * 1e3, 1),
        "floor_p99_ms": round(floor99 * 1e3, 1),
        "p50_x_floor": round(pct(create, 50) / floor50, 2),
        "p99_x_floor": round(pct(create, 99) / floor99, 2),
        "launch_floor_ms": round(spawn.cpu * 1e3, 2),
        "cpu_ms_per_vmi": round(total, 2),
        "cpu_x_launch": round(total / (spawn.cpu * 1e3), 2) if spawn.cpu else 0.0,
        "cpu_ms_per_vmi_by_process": {k: round(v, 2) for k, v in sorted(per_vmi.items())},
        "rest_core_pct": round(sum(rest.values()) / a.rest * 100, 2),
        "rest_core_pct_by_process": {
            k: round(v / a.rest * 100, 2) for k, v in sorted(rest.items())
        },
        **({"nats_messages_per_vmi": messages} if messages else {}),
    }


def report(now: dict[str, object]) -> None:
    by = now["cpu_ms_per_vmi_by_process"]
    assert isinstance(by, dict)
    rest_by = now["rest_core_pct_by_process"]
    assert isinstance(rest_by, dict)
    print(f"== smoke: {now['vms']} VMs at {now['rate']}/s ({os.cpu_count()} CPUs) ==")
    print(
        f"create→Running p50 {now['p50_ms']} ms (x{now['p50_x_floor']} the floor's "
        f"{now['floor_p50_ms']}), p99 {now['p99_ms']} ms (x{now['p99_x_floor']} the floor's "
        f"{now['floor_p99_ms']})"
    )
    cells = ", ".join(f"{k} {v}" for k, v in sorted(by.items(), key=lambda x: -x[1]) if v >= 0.05)
    print(
        f"CPU per VMI {now['cpu_ms_per_vmi']} ms (x{now['cpu_x_launch']} a raw launch's "
        f"{now['launch_floor_ms']} ms): {cells}"
    )
    rcells = ", ".join(
        f"{k} {v}" for k, v in sorted(rest_by.items(), key=lambda x: -x[1]) if v >= 0.05
    )
    print(f"at rest: {now['rest_core_pct']}% of one core: {rcells}")
    messages = now.get("nats_messages_per_vmi")
    if isinstance(messages, dict):
        print(nats_traffic.line(messages))


def compare(now: dict[str, object], base: dict[str, object]) -> list[str]:
    """Every figure more than 25% (and more than its slack) worse than the baseline."""
    pairs = [(name, base.get(name), now.get(name), slack) for name, slack in SLACK.items()]
    nb, bb = now["cpu_ms_per_vmi_by_process"], base.get("cpu_ms_per_vmi_by_process", {})
    assert isinstance(nb, dict) and isinstance(bb, dict)
    launch, base_launch = now.get("launch_floor_ms"), base.get("launch_floor_ms")
    scale = 1.0
    if isinstance(launch, (int, float)) and isinstance(base_launch, (int, float)) and base_launch:
        scale = launch / base_launch
    for proc, x in sorted(nb.items()):
        b = bb.get(proc)
        if proc in LAUNCH_PROCESSES and isinstance(b, (int, float)):
            b = round(b * scale, 2)
        pairs.append((f"cpu_ms_per_vmi[{proc}]", b, x, PROCESS_SLACK_MS))
    return [
        f"REGRESSION {name}: {x} against the baseline's {b}"
        for name, b, x, slack in pairs
        if isinstance(b, (int, float))
        and isinstance(x, (int, float))
        and x > b * TOLERANCE
        and x - b > slack
    ]


def main() -> None:
    p = argparse.ArgumentParser(prog="python -m bench.smoke")
    p.add_argument("--vms", type=int, default=150)
    p.add_argument("--rate", type=float, default=30.0)
    p.add_argument("--nodes", type=int, default=4)
    p.add_argument("--rest", type=float, default=10.0, help="seconds at rest, measured")
    p.add_argument("--settle", type=float, default=2.0)
    p.add_argument("--timeout", type=float, default=30.0)
    p.add_argument("--baseline", type=Path, default=BASELINE)
    p.add_argument("--write-baseline", action="store_true")
    p.add_argument("--profile", type=Path, default=None, help="py-spy's samples go here")
    p.add_argument("--json", action="store_true", help="print the figures as JSON too")
    p.add_argument(
        "--sync-interval",
        default="always",
        help="nats-server's (the baseline's is always: every write fsynced before its ack)",
    )
    p.add_argument(
        "--messages",
        action="store_true",
        help="count nats-server's messages per VMI by user (opens its monitoring port)",
    )
    a = p.parse_args()
    now = asyncio.run(measure(a))
    report(now)
    if a.json:
        print(json.dumps(now, indent=2))
    if a.write_baseline:
        a.baseline.parent.mkdir(parents=True, exist_ok=True)
        a.baseline.write_text(json.dumps(now, indent=2) + "\n")
        print(f"baseline written: {a.baseline}")
        return
    if not a.baseline.exists():
        print(f"no baseline at {a.baseline}: run with --write-baseline")
        return
    regressions = compare(now, json.loads(a.baseline.read_text()))
    for line in regressions:
        print(line)
    if regressions:
        sys.exit(1)
    print("no regression against the baseline")


if __name__ == "__main__":
    main()
