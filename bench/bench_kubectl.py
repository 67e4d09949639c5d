"""kubectl and PATCH against the api, beside today's plain GET and PUT in the same run.

`python -m bench.bench_kubectl [--vms N] [--patches P]`, on one embedded nats-server and
the api as its own process:
1. `kubectl get vms` (a Table list, printed) over N VMs, against a plain JSON list GET of
   the same VMs and the Table GET kubectl sends (both from a lean raw-asyncio client,
   `bench/http_load.py`), and against `kubectl version --client` (kubectl's own start);
2. a merge PATCH's latency (one label changed, one at a time), against a PUT of the
   whole object read just before (today's GET/PUT update).
Prints medians and the ratios to each floor."""

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

from bench import http_load
from bench.bench_api import REPO, VMS, pct, vm_doc, wait_ready
from cli import kubeconfig
from ops.nats_server import NatsServer, free_port

KUBECTL = str(Path(sys.executable).parent / "kubectl")
NS = "kbench"
TABLE = (
    "application/json;as=Table;v=v1;g=meta.k8s.io,"
    "application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json"
)
ROUNDS = 7


def kubectl_seconds(config: Path, *args: str) -> float:
    env = {**os.environ, "KUBECONFIG": str(config), "HOME": str(config.parent)}
    t0 = time.perf_counter()
    proc = subprocess.run([KUBECTL, *args], env=env, capture_output=True, check=False)
    took = time.perf_counter() - t0
    if proc.returncode != 0:
        raise RuntimeError(proc.stderr.decode())
    return took


async def get_seconds(conn: http_load.Connection, path: str, accept: str) -> float:
    t0 = time.perf_counter()
    status, body = await conn.request("GET", path, accept=accept)
    took = time.perf_counter() - t0
    assert status == 200, body[:300]
    return took


async def run(n: int, patches: int, port: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        server = NatsServer(Path(tmp) / "nats")
        server.start_sync()
        api = None
        try:
            api = subprocess.Popen(  # noqa: ASYNC220 (started once, before the timed part)
                [sys.executable, "-m", "services.api", "--nats-url", server.url,
                 "--port", str(port)],
                env={**os.environ, "PYTHONPATH": REPO},
            )  # fmt: skip
            base = f"http://127.0.0.1:{port}"
            await wait_ready(base)
            config = kubeconfig.write(Path(tmp) / "kubeconfig", base)

            def make(i: int) -> tuple[str, str, object]:
                return "POST", VMS.format(ns=NS), vm_doc(f"vm-{i:04d}", "Halted")

            await http_load.run("127.0.0.1", port, n, 4, make, expect=201)
            conn = await http_load.Connection.open("127.0.0.1", port)
            path = VMS.format(ns=NS)
            kubectl_seconds(config, "get", "vms", "-n", NS)  # warm: discovery cache
            lists, tables, gets, starts = [], [], [], []
            for _ in range(ROUNDS):
                lists.append(await get_seconds(conn, path, "application/json"))
                tables.append(await get_seconds(conn, path, TABLE))
                gets.append(
                    await asyncio.to_thread(kubectl_seconds, config, "get", "vms", "-n", NS)
                )
                starts.append(
                    await asyncio.to_thread(kubectl_seconds, config, "version", "--client")
                )
            puts, merges = [], []
            for i in range(patches):
                item = f"{path}/vm-{i % n:04d}"
                status, body = await conn.request("GET", item)
                obj = json.loads(body)
                obj["metadata"].setdefault("labels", {})["round"] = f"put-{i}"
                t0 = time.perf_counter()
                status, body = await conn.request("PUT", item, obj)
                puts.append(time.perf_counter() - t0)
                assert status == 200, body[:300]
                patch = {"metadata": {"labels": {"round": f"merge-{i}"}}}
                t0 = time.perf_counter()
                status, body = await conn.request(
                    "PATCH", item, patch, content_type="application/merge-patch+json"
                )
                merges.append(time.perf_counter() - t0)
                assert status == 200, body[:300]
            conn.close()
        finally:
            if api is not None:
                api.terminate()
                api.wait(10)
            server.stop_sync()

    def ms(values: list[float]) -> float:
        return statistics.median(values) * 1000

    print(f"{n} VMs, medians of {ROUNDS} rounds")
    print(f"GET list (JSON):             {ms(lists):8.1f} ms")
    print(
        f"GET list (Table):            {ms(tables):8.1f} ms   {ms(tables) / ms(lists):5.2f}x JSON"
    )
    print(f"kubectl version --client:    {ms(starts):8.1f} ms")
    own = (ms(gets) - ms(starts)) / ms(lists)
    print(
        f"kubectl get vms:             {ms(gets):8.1f} ms   {ms(gets) / ms(lists):5.2f}x JSON GET,"
        f" {own:5.2f}x without kubectl's own start"
    )
    print(
        f"PUT (whole object):          p50 {ms(puts):6.2f} ms  p99 {pct(puts, 99) * 1000:6.2f} ms"
    )
    p99 = pct(merges, 99) * 1000
    print(
        f"merge PATCH:                 p50 {ms(merges):6.2f} ms  p99 {p99:6.2f} ms"
        f"   {ms(merges) / ms(puts):5.2f}x PUT  (n={patches})"
    )


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.bench_kubectl")
    parser.add_argument("--vms", type=int, default=500)
    parser.add_argument("--patches", type=int, default=200)
    parser.add_argument("--port", type=int, default=0, help="the api's port (0: a free one)")
    args = parser.parse_args()
    asyncio.run(run(args.vms, args.patches, args.port or free_port()))


if __name__ == "__main__":
    main()
