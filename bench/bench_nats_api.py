"""Intents/s over NATS request-reply beside HTTP and raw OCC appends, in the same run on
one embedded nats-server and one api process.

`python -m bench.bench_nats_api [--vms N] [--concurrency C]`:
1. raw OCC appends (JetStreamStore.append(VMCreated, expected=0)), C concurrent writers;
2. VM creates/s through HTTP (`bench/http_load.py`, C keep-alive connections);
3. VM creates/s through `virt-api.v1.<ns>.virtualmachines.<name>.create`, C concurrent
   requesters on one NATS connection.
Each api answer (201) means appended *and* folded by the api's projection."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import nats

from bench.bench_api import REPO, http_creates, raw_appends, vm_doc, wait_ready
from ops.nats_server import NatsServer, free_port


async def nats_creates(url: str, n: int, concurrency: int, prefix: str = "nats") -> float:
    nc = await nats.connect(url)

    async def worker(w: int) -> None:
        for i in range(w, n, concurrency):
            name = f"{prefix}-{i}"
            msg = await nc.request(
                f"virt-api.v1.natsbench.virtualmachines.{name}.create",
                json.dumps(vm_doc(name)).encode(),
                timeout=30,
            )
            code = (msg.headers or {}).get("Virt-Status-Code")
            assert code == "201", (code, msg.data[:300])

    t0 = time.perf_counter()
    await asyncio.gather(*(worker(w) for w in range(concurrency)))
    elapsed = time.perf_counter() - t0
    await nc.close()
    return n / elapsed


async def run(n: int, concurrency: int, port: int, sync_interval: str) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as tmp:
        server = NatsServer(Path(tmp) / "nats", sync_interval=sync_interval)
        server.start_sync()
        api = None
        try:
            # three rounds of each, median reported: the machine is shared and noisy
            raw = statistics.median(
                [await raw_appends(server.url, n // 3, concurrency, f"raw{r}") for r in range(3)]
            )
            api = subprocess.Popen(  # noqa: ASYNC220 (started once, before the timed part)
                [sys.executable, "-m", "services.api", "--nats-url", server.url,
                 "--port", str(port)],
                env={**os.environ, "PYTHONPATH": REPO},
            )  # fmt: skip
            base = f"http://127.0.0.1:{port}"
            await wait_ready(base)
            await http_creates(base, 50, concurrency, "warm")
            await nats_creates(server.url, 50, concurrency, "warm")
            http, over_nats = [], []
            for r in range(3):  # interleaved: both see the same machine and stream size
                http.append(await http_creates(base, n // 3, concurrency, f"http{r}"))
                over_nats.append(await nats_creates(server.url, n // 3, concurrency, f"nats{r}"))
        finally:
            if api is not None:
                api.terminate()
                api.wait(10)
            server.stop_sync()
    return {"raw": raw, "http": statistics.median(http), "nats": statistics.median(over_nats)}


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.bench_nats_api")
    parser.add_argument("--vms", type=int, default=1500)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--port", type=int, default=0, help="the api's port (0: a free one)")
    parser.add_argument("--sync-interval", default="always", help="the server's fsync interval")
    args = parser.parse_args()
    r = asyncio.run(run(args.vms, args.concurrency, args.port or free_port(), args.sync_interval))
    c = args.concurrency
    print(f"raw OCC appends (c={c}):        {r['raw']:8.0f} /s")
    print(
        f"HTTP VM creates (c={c}):        {r['http']:8.0f} /s  ({r['http'] / r['raw']:.0%} of raw)"
    )
    print(
        f"NATS VM creates (c={c}):        {r['nats']:8.0f} /s  ({r['nats'] / r['raw']:.0%} of raw)"
    )
    print(f"ratio NATS/HTTP:                 {r['nats'] / r['http']:8.2f}")


if __name__ == "__main__":
    main()
