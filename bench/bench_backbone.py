"""Event backbone benchmark: OCC appends and replay-into-a-fold, each as a ratio to the raw
nats-py rate measured in the same run on the same nats-server.

  python -m bench.bench_backbone [--events N] [--sync-interval always|2m] [--sync-compare]

- raw publish: `js.publish` awaited one at a time (no headers);
- OCC append: `JetStreamStore.append(event, expected=<aggregate's last seq>)`, i.e. encode +
  Nats-Msg-Id + expected-sequence headers, round-robin over 100 aggregates;
- raw replay: an ordered push consumer over the stream that only decodes each event;
- fold replay: `JetStreamStore.replay()` folded into the projections' `Cluster`.
Targets: OCC ≥ 70% of raw publish, fold ≥ 50% of raw replay. `--sync-compare` runs the
whole measurement on a server that fsyncs every write (`sync_interval: always`, the embedded
default) and on one that fsyncs every 2 minutes (the server's own default), and prints
what the durability costs appends.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
import tracemalloc
import uuid

import nats

from events.catalog import DomainStarted, LauncherStarted, PodScheduled, VMICreated
from events.codec import decode, encode
from events.meta import Actor, Aggregate, Kind, Meta
from eventstore.jetstream import JetStreamStore
from eventstore.settings import StreamSettings
from ops.nats_server import NatsServer
from projections.cluster import Cluster

VMI_MANIFEST = {
    "apiVersion": "kubevirt.io/v1",
    "kind": "VirtualMachineInstance",
    "metadata": {"name": "x", "namespace": "bench", "uid": "u"},
    "spec": {
        "domain": {
            "resources": {"requests": {"memory": "64Mi"}},
            "devices": {"disks": [{"name": "containerdisk", "disk": {"bus": "virtio"}}]},
        },
        "volumes": [{"name": "containerdisk", "containerDisk": {"image": "cirros"}}],
    },
}


def lifecycle(i: int, n_aggs: int) -> object:
    """The i-th event of a VMI lifecycle mix over n_aggs VMIs."""
    name = f"vmi-{i % n_aggs}"
    step = (i // n_aggs) % 4
    m = Meta(
        event_id=uuid.uuid4().hex,
        aggregate=Aggregate(kind=Kind.VMI, namespace="bench", name=name),
        occurred_at=time.time(),
        correlation_id="bench",
        actor=Actor(service="bench"),
        node="node-1",
    )
    manifest = {**VMI_MANIFEST, "metadata": {"name": name, "namespace": "bench", "uid": name}}
    match step:
        case 0:
            return VMICreated(meta=m, manifest=manifest)
        case 1:
            return PodScheduled(
                meta=m, node="node-1", pod_name="p", pod_uid="pu", manifest=manifest
            )
        case 2:
            return LauncherStarted(meta=m, node="node-1", pod_uid="pu", pid=1)
        case _:
            return DomainStarted(meta=m, node="node-1", domain=f"bench_{name}")


async def run(n: int, sync_interval: str = "always") -> dict[str, float]:
    server = NatsServer(tempfile.mkdtemp(prefix="vs-bench-"), sync_interval=sync_interval)
    await server.start()
    nc = await nats.connect(server.url)
    js = nc.jetstream()
    try:
        # raw publish and OCC append alternate in rounds (the machine is shared and noisy:
        # alternating spreads the noise over both); the median round of each is reported
        await js.add_stream(name="RAW", subjects=["raw.>"])
        store = JetStreamStore(nc, StreamSettings(name="VIRT"))
        await store.ensure()
        events = [lifecycle(i, 100) for i in range(n)]
        payloads = [encode(ev) for ev in events]  # type: ignore[arg-type]
        versions: dict[str, int] = {}
        rounds = 5
        size = n // rounds
        raw_rates, occ_rates = [], []
        for r in range(rounds):
            chunk = range(r * size, (r + 1) * size)
            t = time.perf_counter()
            for i in chunk:
                await js.publish(f"raw.{i % 100}", payloads[i])
            raw_rates.append(size / (time.perf_counter() - t))
            t = time.perf_counter()
            for i in chunk:
                ev = events[i]
                k = ev.meta.aggregate.name  # type: ignore[attr-defined]
                ack = await store.append(ev, expected=versions.get(k, 0))  # type: ignore[arg-type]
                versions[k] = ack.seq
            occ_rates.append(size / (time.perf_counter() - t))
        raw_pub, occ = statistics.median(raw_rates), statistics.median(occ_rates)
        n = size * rounds

        # raw replay: ordered consumer, decode only
        t = time.perf_counter()
        sub = await js.subscribe("virt.>", ordered_consumer=True)
        for _ in range(n):
            msg = await sub.next_msg(timeout=10)
            decode(msg.data)
        await sub.unsubscribe()
        raw_replay = n / (time.perf_counter() - t)

        # replay folded into the projections
        t = time.perf_counter()
        cluster = Cluster()
        count = 0
        async for stored in store.replay():
            cluster.apply(stored)
            count += 1
        fold = count / (time.perf_counter() - t)
        assert count == n and len(cluster.vmis) == 100

        # memory of the folded views, in a separate pass (tracemalloc slows everything)
        tracemalloc.start()
        base = tracemalloc.get_traced_memory()[0]
        cluster = Cluster()
        async for stored in store.replay():
            cluster.apply(stored)
        held = tracemalloc.get_traced_memory()[0] - base
        tracemalloc.stop()
        return {
            "events": n,
            "raw_publish_per_s": raw_pub,
            "occ_append_per_s": occ,
            "occ_ratio": occ / raw_pub,
            "raw_replay_per_s": raw_replay,
            "fold_replay_per_s": fold,
            "fold_ratio": fold / raw_replay,
            "view_bytes_per_vmi": held / len(cluster.vmis),
        }
    finally:
        await nc.close()
        await server.stop()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--events", type=int, default=20000)
    ap.add_argument("--sync-interval", default="always")
    ap.add_argument("--sync-compare", action="store_true")
    args = ap.parse_args()
    if args.sync_compare:
        always = asyncio.run(run(args.events, "always"))
        lazy = asyncio.run(run(args.events, "2m"))
        for label, key in (
            ("raw js.publish", "raw_publish_per_s"),
            ("OCC append", "occ_append_per_s"),
        ):
            a, b = always[key], lazy[key]
            print(
                f"{label:<16} sync always {a:8.0f}/s   sync 2m {b:8.0f}/s   always/2m {a / b:.0%}"
            )
        return
    r = asyncio.run(run(args.events, args.sync_interval))
    print(f"events: {r['events']:.0f} (sync_interval {args.sync_interval})")
    print(f"raw js.publish (awaited):  {r['raw_publish_per_s']:9.0f}/s")
    occ, ratio = r["occ_append_per_s"], r["occ_ratio"]
    print(f"OCC append:                {occ:9.0f}/s   ratio {ratio:.0%} (target ≥ 70%)")
    print(f"raw ordered replay+decode: {r['raw_replay_per_s']:9.0f}/s")
    fold, ratio = r["fold_replay_per_s"], r["fold_ratio"]
    print(f"replay into Cluster fold:  {fold:9.0f}/s   ratio {ratio:.0%} (target ≥ 50%)")
    print(f"projection memory:         {r['view_bytes_per_vmi'] / 1024:9.1f} KiB per VMI (traced)")


if __name__ == "__main__":
    main()
