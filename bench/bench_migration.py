"""Migration benchmark: request → Succeeded through the whole control plane
in test mode, with the per-hop latency of the choreography, beside the simulated transfer.

  python -m bench.bench_migration [--vms 10] [--rounds 3] [--nodes 3]

Starts `virtstream up --nodes N` (api, controller, N handlers with zygote-forked launchers
on libvirt's test driver) on a fresh data dir under /tmp, creates `--vms` VMs (64 MiB
guests, no MigrationPolicy: bandwidth unlimited), then per round POSTs one
VirtualMachineInstanceMigration per VM at once and waits until all are final.

TEST MODE IS A SIMULATION: no memory moves; the source handler reports progress at the
default rate for an unlimited bandwidth (migration_sim.DEFAULT_RATE, 1 GiB/s), so a 64 MiB
guest "transfers" in ~62 ms; that time is printed beside the totals. What is real is the
choreography: ~10 events over the bus, three services, two launchers per migration.

Timings come from the event log (JetStream's server timestamps of each event): request =
MigrationRequested (the api's append), then each phase's event, Succeeded =
MigrationSucceeded. The controller's parallel limits apply (5 per cluster, 2 outbound per
node by default): with more requests than that, the rest wait in Pending and their
request→Succeeded includes the queueing; "admitted → Succeeded" (Scheduling →
Succeeded) excludes it.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
import uuid
from collections import defaultdict
from collections.abc import Awaitable, Callable
from pathlib import Path

import httpx
import nats

from bench.exec_common import ms, pct, start_up, vm_manifest, wait_ready
from client import credentials
from eventstore.jetstream import JetStreamStore
from eventstore.settings import StreamSettings
from services.handler.migration_sim import DEFAULT_RATE

NS = "default"
VMS = f"/apis/kubevirt.io/v1/namespaces/{NS}/virtualmachines"
VMIS = f"/apis/kubevirt.io/v1/namespaces/{NS}/virtualmachineinstances"
VMIMS = f"/apis/kubevirt.io/v1/namespaces/{NS}/virtualmachineinstancemigrations"
GUEST = 64 * 1024**2

# the choreography's hops: (from event, to event, who decides the second)
HOPS = [
    ("MigrationRequested", "MigrationScheduled", "controller (admit + place)"),
    ("MigrationScheduled", "TargetPreparing", "target handler"),
    ("TargetPreparing", "TargetPrepared", "target handler (launcher up, paused)"),
    ("TargetPrepared", "MigrationStarted", "source handler (OCC start)"),
    ("MigrationStarted", "MigrationSucceeded", "source handler (transfer + handoff)"),
]


async def until(probe: Callable[[], Awaitable[bool]], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if await probe():
            return
        await asyncio.sleep(0.05)
    raise SystemExit(f"timed out: {what}")


async def run(a: argparse.Namespace) -> int:
    data_dir = Path(tempfile.mkdtemp(prefix="vs-bm-")) / "d"
    up = start_up(data_dir, a.nodes, "32Gi", 32)
    try:
        await wait_ready(up, a.nodes)
        async with httpx.AsyncClient(
            **credentials.httpx_options(up.api, wait=60), timeout=10
        ) as http:
            names = [f"mig-{i}" for i in range(a.vms)]
            for n in names:
                (await http.post(VMS, json=vm_manifest(n))).raise_for_status()

            async def all_running() -> bool:
                items = (await http.get(VMIS)).json().get("items", [])
                return sum(1 for v in items if v["status"].get("phase") == "Running") >= a.vms

            await until(all_running, 120, "VMs Running")
            migs: list[str] = []
            for r in range(a.rounds):
                batch = [f"m-{r}-{n}" for n in names]
                for mig, n in zip(batch, names, strict=True):
                    body = {
                        "apiVersion": "kubevirt.io/v1",
                        "kind": "VirtualMachineInstanceMigration",
                        "metadata": {"name": mig, "namespace": NS, "uid": str(uuid.uuid4())},
                        "spec": {"vmiName": n},
                    }
                    (await http.post(VMIMS, json=body)).raise_for_status()
                migs += batch

                async def done(batch: list[str] = batch) -> bool:
                    items = (await http.get(VMIMS)).json().get("items", [])
                    final = {
                        m["metadata"]["name"]
                        for m in items
                        if m["status"].get("phase") in ("Succeeded", "Failed")
                    }
                    return set(batch) <= final

                await until(done, 120, f"round {r} final")
        nc = await nats.connect(up.nats_url, **credentials.nats_options(up.nats_url))
        try:
            store = JetStreamStore(nc, StreamSettings())
            times: dict[str, dict[str, float]] = defaultdict(dict)
            async for s in store.replay(["virt.migration.>"]):
                name = s.event.meta.aggregate.name
                times[name].setdefault(type(s.event).__name__, s.time)
        finally:
            await nc.close()
    finally:
        up.stop()

    ok = [m for m in migs if "MigrationSucceeded" in times[m]]
    total = [times[m]["MigrationSucceeded"] - times[m]["MigrationRequested"] for m in ok]
    admitted = [times[m]["MigrationSucceeded"] - times[m]["MigrationScheduling"] for m in ok]
    print(f"migrations: {len(migs)} requested, {len(ok)} succeeded ({a.vms} at once per round)")
    print(f"request → Succeeded:   {ms(total)}")
    print(f"admitted → Succeeded:  {ms(admitted)}")
    for a_ev, b_ev, who in HOPS:
        hop = [times[m][b_ev] - times[m][a_ev] for m in ok if a_ev in times[m] and b_ev in times[m]]
        print(f"  {a_ev} → {b_ev} [{who}]: {ms(hop)}")
    print(
        f"simulated transfer (test mode, {GUEST >> 20} MiB at {DEFAULT_RATE >> 20} MiB/s): "
        f"{GUEST / DEFAULT_RATE * 1e3:.1f} ms of every migration's Running phase"
    )
    if total:
        choreography = [t - GUEST / DEFAULT_RATE for t in admitted]
        p50, p99 = pct(choreography, 50) * 1e3, pct(choreography, 99) * 1e3
        print(
            f"admitted → Succeeded minus the simulated transfer: p50 {p50:.1f} ms, p99 {p99:.1f} ms"
        )
    return 0 if len(ok) == len(migs) else 1


def main() -> None:
    p = argparse.ArgumentParser(prog="python -m bench.bench_migration", description=__doc__)
    p.add_argument("--vms", type=int, default=10, help="migrations requested at once per round")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--nodes", type=int, default=3)
    raise SystemExit(asyncio.run(run(p.parse_args())))


if __name__ == "__main__":
    main()
