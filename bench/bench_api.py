"""API throughput beside the raw event-store rate, on one embedded nats-server.

`python -m bench.bench_api [--vms N] [--concurrency C]`:
1. raw OCC appends (JetStreamStore.append(VMCreated, expected=0)), C concurrent writers;
2. VM creates/s through HTTP (the api as its own process on uvicorn, C keep-alive
   connections from a lean raw-asyncio client, `bench/http_load.py`: httpx spends more CPU
   per request than the api and would measure itself on 2 cores); each 201 means appended
   *and* folded by the api's projection;
3. p50/p99 latency of a subresource call (start on Halted VMs, one at a time).
Prints the ratio HTTP/raw (target ≥ 25%)."""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import httpx
import nats

from bench import http_load
from events.catalog import VMCreated
from events.meta import Actor, Aggregate, Kind, Meta
from eventstore.jetstream import JetStreamStore
from eventstore.settings import StreamSettings
from ops.nats_server import NatsServer, free_port

REPO = str(Path(__file__).resolve().parents[1])
VMS = "/apis/kubevirt.io/v1/namespaces/{ns}/virtualmachines"
SUB = "/apis/subresources.kubevirt.io/v1/namespaces/{ns}/virtualmachines/{name}/start"


def vm_doc(name: str, strategy: str = "Manual") -> dict[str, object]:
    return {
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachine",
        "metadata": {"name": name},
        "spec": {
            "runStrategy": strategy,
            "template": {"spec": {"domain": {"memory": {"guest": "64Mi"}}}},
        },
    }


async def raw_appends(url: str, n: int, concurrency: int, prefix: str = "raw") -> float:
    nc = await nats.connect(url)
    store = JetStreamStore(nc, StreamSettings())
    await store.ensure()

    async def worker(w: int) -> None:
        for i in range(w, n, concurrency):
            name = f"{prefix}-{i}"
            meta = Meta(
                event_id=uuid.uuid4().hex,
                aggregate=Aggregate(kind=Kind.VM, namespace="rawbench", name=name),
                occurred_at=time.time(),
                correlation_id="bench",
                actor=Actor(service="bench"),
            )
            await store.append(VMCreated(meta=meta, manifest=vm_doc(name)), expected=0)

    t0 = time.perf_counter()
    await asyncio.gather(*(worker(w) for w in range(concurrency)))
    elapsed = time.perf_counter() - t0
    await nc.close()
    return n / elapsed


async def wait_ready(base: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    async with httpx.AsyncClient(base_url=base) as client:
        while time.monotonic() < deadline:
            try:
                if (await client.get("/readyz")).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            await asyncio.sleep(0.1)
    raise RuntimeError("api did not become ready")


async def http_creates(base: str, n: int, concurrency: int, prefix: str = "http") -> float:
    host, port = base.removeprefix("http://").split(":")

    def make(i: int) -> tuple[str, str, object]:
        return "POST", VMS.format(ns="httpbench"), vm_doc(f"{prefix}-{i}")

    t0 = time.perf_counter()
    await http_load.run(host, int(port), n, concurrency, make, expect=201)
    return n / (time.perf_counter() - t0)


async def subresource_latency(base: str, n: int) -> list[float]:
    host, port = base.removeprefix("http://").split(":")
    conn = await http_load.Connection.open(host, int(port))
    try:
        for i in range(n):
            status, body = await conn.request(
                "POST", VMS.format(ns="subbench"), vm_doc(f"s-{i}", "Halted")
            )
            assert status == 201, body
        lat = []
        for i in range(n):
            t0 = time.perf_counter()
            status, body = await conn.request("PUT", SUB.format(ns="subbench", name=f"s-{i}"), {})
            lat.append(time.perf_counter() - t0)
            assert status == 202, body
        return lat
    finally:
        conn.close()


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(p / 100 * len(ordered)))]


async def run(n: int, concurrency: int, port: int, sync_interval: str) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        server = NatsServer(Path(tmp) / "nats", sync_interval=sync_interval)
        server.start_sync()
        api = None
        try:
            # three rounds of each, median reported: the machine is shared and noisy
            raw = statistics.median(
                [await raw_appends(server.url, n // 3, concurrency, f"raw{r}") for r in range(3)]
            )
            env = {**os.environ, "PYTHONPATH": REPO}
            api = subprocess.Popen(  # noqa: ASYNC220 (started once, before the timed part)
                [
                    sys.executable,
                    "-m",
                    "services.api",
                    "--nats-url",
                    server.url,
                    "--port",
                    str(port),
                ],
                env=env,
            )
            base = f"http://127.0.0.1:{port}"
            await wait_ready(base)
            await http_creates(base, 50, concurrency, "warm")
            creates = statistics.median(
                [await http_creates(base, n // 3, concurrency, f"http{r}") for r in range(3)]
            )
            lat = await subresource_latency(base, min(n, 300))
        finally:
            if api is not None:
                api.terminate()
                api.wait(10)
            server.stop_sync()
    print(f"raw OCC appends (c={concurrency}):      {raw:8.0f} /s")
    print(f"HTTP VM creates (c={concurrency}):      {creates:8.0f} /s")
    print(f"ratio HTTP/raw:                {creates / raw:8.1%}  (target >= 25%)")
    print(
        f"subresource start latency:     p50 {statistics.median(lat) * 1000:.2f} ms  "
        f"p99 {pct(lat, 99) * 1000:.2f} ms  (n={len(lat)})"
    )


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.bench_api")
    parser.add_argument("--vms", type=int, default=2000)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--port", type=int, default=0, help="the api's port (0: a free one)")
    parser.add_argument("--sync-interval", default="always", help="the server's fsync interval")
    args = parser.parse_args()
    port = args.port or free_port()
    asyncio.run(run(args.vms, args.concurrency, port, args.sync_interval))


if __name__ == "__main__":
    main()
