"""What a launch costs on the real path against a raw one, without the load's contention.

  python -m bench.launch_cost [--vms 60] [--rate 5] [--nodes 2]

Starts `virtstream up` (test mode), measures the floor (raw zygote spawns driven to Running,
bench/exec_common.py), then creates `--vms` VMs at a rate low enough that launches do not
contend with each other, and reads each launcher's CPU (the scheduler's run time) once all
are Running, and the zygotes' CPU per spawn. Target: the real launch (launcher + zygote)
≤ 1.2x the raw one. bench.smoke's per-VMI launcher figure is taken under a 30/s burst on a
saturated machine, where every process costs more per unit of work."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import statistics
import tempfile
import time
from pathlib import Path

from bench.exec_common import (
    Track,
    Up,
    children,
    cpu_seconds,
    paced,
    pct,
    remove_run,
    start_up,
    wait_ready,
    watch_vmis,
    zygote_floor,
)


def zygotes_cpu(up: Up) -> float:
    return sum(
        cpu_seconds(child)
        for name, pid in up.services().items()
        if name.startswith("handler")
        for child in children(pid)
    )


async def measure(a: argparse.Namespace) -> dict[str, float]:
    data_dir = Path(tempfile.mkdtemp(prefix="vsl", dir="/tmp"))
    up = start_up(data_dir, a.nodes, "64Gi", 64)
    try:
        await wait_ready(up, a.nodes)
        await asyncio.sleep(a.settle)
        floor = await zygote_floor(data_dir / "floor", 12)
        track = Track(n=a.vms)
        opened = asyncio.Event()
        watcher = asyncio.create_task(watch_vmis(up.api, track, opened))
        await asyncio.wait_for(opened.wait(), 10)
        zygotes_before = zygotes_cpu(up)
        names = [f"l{int(time.time()) % 100000}-{i}" for i in range(a.vms)]
        await paced(up, names, a.rate, "POST", 2, track)
        await asyncio.wait_for(track.all_running.wait(), a.timeout)
        await asyncio.sleep(1.0)  # the last launchers' reports after Running
        launchers = [cpu_seconds(pid) for pid in up.launcher_pids()]
        zygote = (zygotes_cpu(up) - zygotes_before) / a.vms
        watcher.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await watcher
    finally:
        up.stop()
    remove_run(data_dir, False)
    raw = statistics.median(floor.launcher_cpu)
    real = statistics.median(launchers)
    return {
        "raw_launcher_ms": raw * 1e3,
        "raw_zygote_ms": floor.zygote_cpu * 1e3,
        "launcher_ms": real * 1e3,
        "launcher_p90_ms": pct(launchers, 90) * 1e3,
        "launcher_mean_ms": statistics.fmean(launchers) * 1e3,
        "zygote_ms": zygote * 1e3,
        "x_raw": (real + zygote) / (raw + floor.zygote_cpu),
    }


def main() -> None:
    p = argparse.ArgumentParser(prog="python -m bench.launch_cost")
    p.add_argument("--vms", type=int, default=60)
    p.add_argument("--rate", type=float, default=5.0)
    p.add_argument("--nodes", type=int, default=2)
    p.add_argument("--settle", type=float, default=5.0, help="seconds after ready, unmeasured")
    p.add_argument("--timeout", type=float, default=120.0)
    a = p.parse_args()
    r = asyncio.run(measure(a))
    print(f"== {a.vms} launches at {a.rate:g}/s over {a.nodes} nodes ==")
    print(f"raw launch: launcher {r['raw_launcher_ms']:.1f} ms + zygote {r['raw_zygote_ms']:.1f}")
    print(
        f"real launch: launcher {r['launcher_ms']:.1f} ms (p90 {r['launcher_p90_ms']:.1f}, "
        f"mean {r['launcher_mean_ms']:.1f}) + zygote {r['zygote_ms']:.1f}: "
        f"x{r['x_raw']:.2f} the raw launch (target ≤ 1.2)"
    )


if __name__ == "__main__":
    main()
