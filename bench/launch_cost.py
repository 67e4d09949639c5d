"""What a launch costs on the real path against a raw one, without the load's contention.

  python -m bench.launch_cost [--vms 60] [--rate 5] [--nodes 2]

Starts `virtstream up` (test mode), measures the floor (raw zygote spawns driven to Running,
bench/exec_common.py), then creates `--vms` VMs at a rate low enough that launches do not
contend with each other, and reads each launcher's CPU (the scheduler's run time) once all
are Running, and the zygotes' CPU per spawn. Target: the real launch (launcher + zygote)
≤ 1.2x the raw one. Last, the same launcher's life without a process of its own (the
zygote's warm-up path: the launcher and a client on one loop in this process, the test
driver's events delivered on the loop): what of a launch is the launcher's work and what
is the process (the fork and its copy-on-write faults). bench.smoke's per-VMI launcher
figure is taken under a 30/s burst on a saturated machine, where every process costs more
per unit of work."""

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
    cpu_seconds,
    paced,
    pct,
    remove_run,
    start_up,
    wait_ready,
    watch_vmis,
    zygote_floor,
)


def in_process(count: int) -> list[float]:
    """CPU seconds of each of `count` launchers run in this process to Running (the
    zygote's warm-up path), all kept running: a launch without its fork."""
    import msgspec

    from services.launcher import zygote
    from services.launcher.client import LauncherClient
    from services.launcher.domain_state import DomainState
    from services.launcher.process import Launcher, LauncherConfig
    from services.launcher.protocol import Start

    zygote.preload()
    template = msgspec.json.decode(zygote.WARM_UP_VMI)

    async def launches(tmp: str) -> list[float]:
        spent: list[float] = []
        tasks: list[asyncio.Task[int]] = []
        clients: list[LauncherClient] = []
        for i in range(count):
            vmi = {**template, "metadata": {"name": f"p{i}", "namespace": "default", "uid": f"{i}"}}
            config = LauncherConfig(vmi=vmi, socket_path=f"{tmp}/p{i}.sock")
            t = time.process_time()
            launcher = Launcher(config, zygote.WarmUpHypervisor(config.hypervisor_uri))
            tasks.append(asyncio.get_running_loop().create_task(launcher.run()))
            client = await LauncherClient.connect(config.socket_path)
            await client.call(Start())
            await client.wait_for(lambda s: s.state is DomainState.RUNNING)
            spent.append(time.process_time() - t)
            clients.append(client)
        for client in clients:
            await client.close()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        return spent

    with tempfile.TemporaryDirectory(prefix="vsli") as tmp:
        return asyncio.run(launches(tmp))


def faults(pid: int) -> int:
    """Minor page faults so far (a forked child's are mostly copy-on-write)."""
    with contextlib.suppress(OSError, IndexError, ValueError), open(f"/proc/{pid}/stat") as f:
        return int(f.read().rpartition(")")[2].split()[7])
    return 0


def zygotes_cpu(up: Up) -> float:
    return sum(cpu_seconds(z) for z in up.zygote_pids())


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
        zygote_faults = sum(faults(z) for z in up.zygote_pids())
        names = [f"l{int(time.time()) % 100000}-{i}" for i in range(a.vms)]
        await paced(up, names, a.rate, "POST", 2, track)
        await asyncio.wait_for(track.all_running.wait(), a.timeout)
        await asyncio.sleep(1.0)  # the last launchers' reports after Running
        launchers = [cpu_seconds(pid) for pid in up.launcher_pids()]
        launcher_faults = [faults(pid) for pid in up.launcher_pids()]
        zygote = (zygotes_cpu(up) - zygotes_before) / a.vms
        zygote_faults = (sum(faults(z) for z in up.zygote_pids()) - zygote_faults) / a.vms
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
        "launcher_faults": statistics.median(launcher_faults),
        "zygote_faults": zygote_faults,
        "x_raw": (real + zygote) / (raw + floor.zygote_cpu),
    }


def main() -> None:
    p = argparse.ArgumentParser(prog="python -m bench.launch_cost")
    p.add_argument("--vms", type=int, default=60)
    p.add_argument("--rate", type=float, default=5.0)
    p.add_argument("--nodes", type=int, default=2)
    p.add_argument("--settle", type=float, default=5.0, help="seconds after ready, unmeasured")
    p.add_argument("--timeout", type=float, default=120.0)
    p.add_argument("--in-process", type=int, default=40, help="launchers run without a fork")
    a = p.parse_args()
    r = asyncio.run(measure(a))
    alone = in_process(a.in_process)[a.in_process // 5 :] if a.in_process else []  # warm first
    print(f"== {a.vms} launches at {a.rate:g}/s over {a.nodes} nodes ==")
    print(f"raw launch: launcher {r['raw_launcher_ms']:.1f} ms + zygote {r['raw_zygote_ms']:.1f}")
    print(
        f"real launch: launcher {r['launcher_ms']:.1f} ms (p90 {r['launcher_p90_ms']:.1f}, "
        f"mean {r['launcher_mean_ms']:.1f}) + zygote {r['zygote_ms']:.1f}: "
        f"x{r['x_raw']:.2f} the raw launch (target ≤ 1.2)"
    )
    print(
        f"page faults per launch: launcher {r['launcher_faults']:.0f}, "
        f"zygote {r['zygote_faults']:.0f}"
    )
    if alone:
        raw, own = r["raw_launcher_ms"] + r["raw_zygote_ms"], statistics.median(alone) * 1e3
        print(
            f"the launcher's life without its own process: {own:.1f} ms (the launcher and its "
            f"client); the process is {raw - own:.1f} ms of the raw launch's {raw:.1f}"
        )


if __name__ == "__main__":
    main()
