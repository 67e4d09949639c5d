"""Measure launcher spawning: `python -m services.launcher.spawn_probe [--count N]`.

Starts a zygote, spawns N launchers one after another and prints, per launcher, the time
from the spawn request to its pid, to its Hello, and to the first Running report, and
the CPU it used from fork to Running (utime+stime, in clock ticks, and the scheduler's
exact run time summed over its threads), and its USS (Private_* of
/proc/<pid>/smaps_rollup) while all N run. A diagnostic, not a test.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import statistics
import tempfile
import time
from pathlib import Path

import msgspec

from services.launcher.client import LauncherClient
from services.launcher.domain_state import DomainState
from services.launcher.protocol import Shutdown, Start
from services.launcher.zygote import spawn_launcher, start_zygote

_TICK_MS = 1000 / os.sysconf("SC_CLK_TCK")


def uss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/smaps_rollup") as f:
        return sum(int(line.split()[1]) for line in f if line.startswith("Private_"))


def cpu_ms(pid: int) -> tuple[float, float]:
    """(utime+stime in ms, ticks resolution; run time in ms from schedstat, exact but only
    of the threads still alive)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rpartition(")")[2].split()
    ticks = int(fields[11]) + int(fields[12])  # utime, stime (fields 14, 15)
    run_ns = 0
    for task in os.listdir(f"/proc/{pid}/task"):
        with contextlib.suppress(OSError), open(f"/proc/{pid}/task/{task}/schedstat") as f:
            run_ns += int(f.read().split()[0])
    return ticks * _TICK_MS, run_ns / 1e6


async def probe(count: int, run_dir: Path) -> None:
    zygote = start_zygote(str(run_dir / "zygote.sock"))
    clients: list[LauncherClient] = []
    rows = []
    try:
        for i in range(count):
            vmi = {
                "metadata": {"name": f"probe-{i}", "namespace": "default", "uid": str(i)},
                "spec": {"domain": {"memory": {"guest": "64Mi"}}},
            }
            sock = str(run_dir / f"default_probe-{i}.sock")
            t0 = time.perf_counter()
            pid = spawn_launcher(str(run_dir / "zygote.sock"), msgspec.json.encode(vmi), sock)
            t_pid = time.perf_counter()
            client = await LauncherClient.connect(sock)
            t_hello = time.perf_counter()
            await client.call(Start())
            await client.wait_for(lambda s: s.state is DomainState.RUNNING)
            t_running = time.perf_counter()
            clients.append(client)
            rows.append((pid, t_pid - t0, t_hello - t0, t_running - t0, *cpu_ms(pid)))
        await asyncio.sleep(0.2)  # let every launcher settle before reading memory
        print(
            f"{'pid':>8} {'->pid ms':>9} {'->Hello ms':>11} {'->Running ms':>13} "
            f"{'CPU ms':>7} {'run ms':>7} {'USS KiB':>8}"
        )
        uss = []
        for pid, d_pid, d_hello, d_running, ticks_ms, run_ms in rows:
            uss.append(uss_kib(pid))
            print(
                f"{pid:>8} {d_pid * 1e3:>9.2f} {d_hello * 1e3:>11.2f} "
                f"{d_running * 1e3:>13.2f} {ticks_ms:>7.0f} {run_ms:>7.2f} {uss[-1]:>8}"
            )
        print(
            f"median: spawn→Running {statistics.median(r[3] for r in rows) * 1e3:.2f} ms, "
            f"CPU to Running {statistics.mean(r[4] for r in rows):.1f} ms (utime+stime, mean) "
            f"{statistics.median(r[5] for r in rows):.2f} ms (run time), "
            f"USS {statistics.median(uss) / 1024:.2f} MiB; zygote USS "
            f"{uss_kib(zygote.pid) / 1024:.2f} MiB"
        )
    finally:
        for client in clients:
            await client.call(Shutdown(grace_period_seconds=0))
            # Collect the final status, or the launcher lingers waiting for a handler.
            await client.wait_for(lambda s: s.final)
            await client.close()
        zygote.terminate()
        zygote.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--count", type=int, default=10)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="virtstream-probe-") as run_dir:
        asyncio.run(probe(args.count, Path(run_dir)))


if __name__ == "__main__":
    main()
