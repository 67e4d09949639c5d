"""Create→Running latency (KubeVirt's vmiCreationToRunningSeconds) through the whole stack.

`python -m bench.bench_exec [--vms 50] [--rate 10] [--nodes 2] [--api URL]`: without
--api it starts `virtstream up` on a temporary data dir. Creates VMs (runStrategy Always)
at a steady rate; per VM measures from its POST to the first time its VMI reads Running
(polled every 20 ms, so the numbers include up to 20 ms of polling), then prints
p50/p95/p99 and deletes the VMs. Bounded in count and time; loopback only.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

from ops.nats_server import free_port

VMS = "/apis/kubevirt.io/v1/namespaces/default/virtualmachines"
VMIS = "/apis/kubevirt.io/v1/namespaces/default/virtualmachineinstances"
SUB = "/apis/subresources.kubevirt.io/v1/namespaces/default/virtualmachines"


def _vm(name: str) -> dict[str, object]:
    return {
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachine",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "runStrategy": "Always",
            "template": {
                "spec": {
                    "domain": {"memory": {"guest": "64Mi"}, "devices": {}},
                    "terminationGracePeriodSeconds": 0,
                }
            },
        },
    }


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


def run(api: str, count: int, rate: float, timeout: float) -> list[float]:
    created: dict[str, float] = {}
    running: dict[str, float] = {}
    prefix = f"bench-{int(time.time()) % 100000}"
    with httpx.Client(base_url=api, timeout=10) as http:
        deadline = time.monotonic() + 60
        while True:
            with contextlib.suppress(httpx.HTTPError):
                if http.get(VMS).is_success:
                    break
            if time.monotonic() > deadline:
                raise SystemExit("API not up")
            time.sleep(0.2)
        next_at = time.monotonic()
        end = time.monotonic() + count / rate + timeout
        i = 0
        while len(running) < count and time.monotonic() < end:
            now = time.monotonic()
            if i < count and now >= next_at:
                name = f"{prefix}-{i}"
                r = http.post(VMS, json=_vm(name))
                r.raise_for_status()
                created[name] = now
                i += 1
                next_at += 1 / rate
                continue
            for vmi in http.get(VMIS).json().get("items", []):
                name = vmi["metadata"]["name"]
                phase = (vmi.get("status") or {}).get("phase")
                if name in created and name not in running and phase == "Running":
                    running[name] = time.monotonic()
            time.sleep(0.02)
        for name in created:
            with contextlib.suppress(httpx.HTTPError):
                http.delete(f"{VMS}/{name}")
    missing = len(created) - len(running)
    if missing:
        print(f"{missing} VM(s) did not reach Running within the timeout")
    return [running[n] - created[n] for n in running]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--vms", type=int, default=50)
    p.add_argument("--rate", type=float, default=10.0, help="VMs created per second")
    p.add_argument("--nodes", type=int, default=2)
    p.add_argument("--api", default="", help="an API already running (else starts up)")
    p.add_argument("--timeout", type=float, default=60.0)
    a = p.parse_args()
    up = None
    tmp = None
    api = a.api
    if not api:
        tmp = tempfile.TemporaryDirectory(prefix="vs-bench-")
        port = free_port()
        api = f"http://127.0.0.1:{port}"
        up = subprocess.Popen(
            [sys.executable, "-m", "cli.main", "up", "--data-dir", tmp.name, "--nodes",
             str(a.nodes), "--port", str(port), "--nats-port", str(free_port())],
            cwd=Path(__file__).resolve().parents[1], stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )  # fmt: skip
    try:
        lat = run(api, a.vms, a.rate, a.timeout)
    finally:
        if up is not None:
            up.send_signal(signal.SIGINT)
            try:
                up.wait(60)
            except subprocess.TimeoutExpired:
                os.kill(up.pid, signal.SIGKILL)
        if tmp is not None:
            tmp.cleanup()
    if not lat:
        raise SystemExit("no VM reached Running")
    print(
        f"{len(lat)} VMs at {a.rate}/s on {a.nodes} node(s): create→Running "
        f"p50 {pct(lat, 50) * 1e3:.0f} ms, p95 {pct(lat, 95) * 1e3:.0f} ms, "
        f"p99 {pct(lat, 99) * 1e3:.0f} ms, max {max(lat) * 1e3:.0f} ms, "
        f"mean {statistics.mean(lat) * 1e3:.0f} ms"
    )


if __name__ == "__main__":
    main()
