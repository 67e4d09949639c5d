"""A cluster at rest: what it costs when nothing is asked of it.

  python -m bench.rest [--nodes 10] [--seconds 30] [--settle 10]

Starts `virtstream up --nodes N` (test mode) on a fresh data dir, waits until it is ready
and `--settle` seconds more (start-up work ends), then measures every process's CPU (the
scheduler's run time, bench/exec_common.py) over `--seconds`: each service's and the
cluster's share of one core. Target: a 10-node cluster at rest ≤ 3% of one core."""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from pathlib import Path

from bench.exec_common import cpu_delta, cpu_snapshot, remove_run, start_up, wait_ready


async def measure(nodes: int, seconds: float, settle: float) -> dict[str, float]:
    data_dir = Path(tempfile.mkdtemp(prefix="vsr", dir="/tmp"))
    up = start_up(data_dir, nodes, "64Gi", 64)
    try:
        await wait_ready(up, nodes)
        await asyncio.sleep(settle)
        before, t0 = cpu_snapshot(up), time.perf_counter()
        await asyncio.sleep(seconds)
        spent = cpu_delta(before, cpu_snapshot(up))
        span = time.perf_counter() - t0
    finally:
        up.stop()
    remove_run(data_dir, False)
    spent.pop("bench client", None)
    return {name: cpu / span * 100 for name, cpu in spent.items()}


def main() -> None:
    p = argparse.ArgumentParser(prog="python -m bench.rest")
    p.add_argument("--nodes", type=int, default=10)
    p.add_argument("--seconds", type=float, default=30.0)
    p.add_argument("--settle", type=float, default=10.0, help="seconds after ready, unmeasured")
    a = p.parse_args()
    share = asyncio.run(measure(a.nodes, a.seconds, a.settle))
    cells = ", ".join(
        f"{k} {v:.2f}%" for k, v in sorted(share.items(), key=lambda x: -x[1]) if v >= 0.01
    )
    print(f"== {a.nodes} nodes at rest over {a.seconds:g} s ==")
    print(f"{sum(share.values()):.2f}% of one core (target ≤ 3%): {cells}")


if __name__ == "__main__":
    main()
