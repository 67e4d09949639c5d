"""Replay benchmark: a full rebuild of all views beside a raw read of the same stream, in the
same run on the same nats-server.

  python -m bench.bench_replay [--events N]

- raw read: an ordered push consumer over the stream that only decodes each event;
- rebuild: `JetStreamStore.replay()` folded into the projections' `Cluster` (all views);
- snapshot: saving the rebuilt views to the KV bucket, then `load_cluster` (snapshot + an
  empty tail) and a rebuild from a snapshot taken 10% before the end;
- why: the causal chain of one VM (direct gets per hop) and a full scan of the stream
  (the fallback for an effect written without its cause's sequence);
- correlation: `events --correlation` of that chain's request through the index (the
  stream indexed first), against the full scan (its fallback without an index);
- memory per VMI of the folded views, traced in a separate pass (tracemalloc is slow).
Target: rebuild ≥ 50% of the raw rate.

The workload is a VM lifecycle mix (create, start, the VMI's scheduling and launch, pause,
unpause, a live migration for one VM in ten, stop for one in five), 100 VMs interleaved at
a time, so every view kind and the cross-aggregate joins are exercised.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
import tracemalloc
from collections.abc import Iterator
from typing import Any

import nats

from events import subjects
from events.catalog import (
    DomainPaused,
    DomainResumed,
    DomainStarted,
    DomainStopped,
    Event,
    LauncherStarted,
    MigrationRequested,
    MigrationScheduled,
    MigrationScheduling,
    MigrationSettings,
    MigrationStarted,
    MigrationSucceeded,
    NodeJoined,
    PodScheduled,
    Resources,
    StopReason,
    VMCreated,
    VMICreated,
    VMIRemoved,
    VMStartRequested,
    VMStateChangeRequestsCleared,
    VMStopRequested,
)
from events.codec import decode, encode, event_type
from events.meta import CLUSTER_SCOPE, Actor, Aggregate, Kind, KindToken, Meta
from eventstore import push
from eventstore.index import Indexer, last_indexed
from eventstore.jetstream import JetStreamStore
from eventstore.settings import StreamSettings
from ops.nats_server import NatsServer
from projections.cluster import Cluster
from readside import correlation, view_checkpoints
from readside.causality import why

NS = "bench"
NODES = 8
WAVE = 100  # VMs whose lifecycles interleave


def _vmi(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachineInstance",
        "metadata": {"name": name, "namespace": NS, "uid": f"vmi-{name}"},
        "spec": {
            "domain": {
                "resources": {"requests": {"memory": "64Mi"}},
                "devices": {"disks": [{"name": "containerdisk", "disk": {"bus": "virtio"}}]},
            },
            "volumes": [{"name": "containerdisk", "containerDisk": {"image": "cirros"}}],
        },
    }


def _vm(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachine",
        "metadata": {"name": name, "namespace": NS, "uid": f"vm-{name}"},
        "spec": {"runStrategy": "Manual", "template": _vmi(name) | {"metadata": {}}},
    }


class _Ids:
    """Unique event ids; causation chains follow each VM's lifecycle. `seq` counts the
    metas made, which are appended in that order to a new stream: it is each event's stream
    sequence, so a cause's is known when its effect is made (`causation_seq`)."""

    def __init__(self) -> None:
        self.seq = 0
        self._seqs: dict[str, int] = {}  # event id → sequence

    def meta(self, kind: KindToken, name: str, by: str, cause: Meta | None, node: str = "") -> Meta:
        self.seq += 1
        ns = CLUSTER_SCOPE if kind == Kind.NODE else NS
        eid = f"{by}/e{self.seq}"
        meta = Meta(
            event_id=eid,
            aggregate=Aggregate(kind=kind, namespace=ns, name=name),
            occurred_at=time.time(),
            correlation_id=cause.correlation_id if cause else eid,
            causation_id=cause.event_id if cause else "",
            causation_seq=self._seqs.get(cause.event_id, 0) if cause else 0,
            actor=Actor(service=by, node=node),
            node=node,
        )
        self._seqs[eid] = self.seq
        return meta


def _lifecycle(ids: _Ids, i: int) -> Iterator[list[Event]]:
    """One VM's events, one list per step (the generator interleaves the steps of a wave).
    Causation points at the previous step's event by id and sequence (the ids name no
    sequence)."""
    name = f"vm-{i}"
    node = f"node-{i % NODES}"
    target = f"node-{(i + 1) % NODES}"
    prev: Meta | None = None

    def m(kind: KindToken, by: str, route: str = "") -> Meta:
        nonlocal prev
        meta = ids.meta(kind, name, by, prev, route)
        prev = meta
        return meta

    yield [VMCreated(meta=m(Kind.VM, "api"), manifest=_vm(name))]
    yield [VMStartRequested(meta=m(Kind.VM, "api"))]
    yield [
        VMICreated(meta=m(Kind.VMI, "controller"), manifest=_vmi(name), owner_vm_uid=f"vm-{name}")
    ]
    yield [VMStateChangeRequestsCleared(meta=m(Kind.VM, "controller"))]
    yield [
        PodScheduled(
            meta=m(Kind.VMI, "controller", node),
            node=node,
            pod_name=f"virt-launcher-{name}",
            pod_uid=f"pod-{name}",
            manifest=_vmi(name),
        )
    ]
    yield [
        LauncherStarted(meta=m(Kind.VMI, "handler", node), node=node, pod_uid=f"pod-{name}", pid=i)
    ]
    yield [DomainStarted(meta=m(Kind.VMI, "handler", node), node=node, domain=f"{NS}_{name}")]
    yield [DomainPaused(meta=m(Kind.VMI, "handler", node))]
    yield [DomainResumed(meta=m(Kind.VMI, "handler", node))]
    if i % 10 == 0:
        mig = f"mig-{name}"
        mm = {
            "apiVersion": "kubevirt.io/v1",
            "kind": "VirtualMachineInstanceMigration",
            "metadata": {"name": mig, "namespace": NS, "uid": f"u-{mig}"},
            "spec": {"vmiName": name},
        }

        def mg(by: str, route: str = "") -> Meta:
            nonlocal prev
            meta = ids.meta(Kind.MIGRATION, mig, by, prev, route)
            prev = meta
            return meta

        yield [MigrationRequested(meta=mg("api"), manifest=mm)]
        yield [
            MigrationScheduling(
                meta=mg("controller"), vmi_uid=f"vmi-{name}", source_node=node, source_pod="p"
            )
        ]
        yield [
            MigrationScheduled(
                meta=mg("controller", target),
                vmi_name=name,
                vmi_uid=f"vmi-{name}",
                source_node=node,
                source_pod="p",
                target_node=target,
                target_pod="t",
                target_pod_uid=f"tpod-{name}",
                settings=MigrationSettings(),
                manifest=_vmi(name),
            )
        ]
        yield [MigrationStarted(meta=mg("handler", node))]
        yield [MigrationSucceeded(meta=mg("handler", node), target_node=target, target_pod_uid="t")]
    if i % 5 == 0:
        yield [VMStopRequested(meta=m(Kind.VM, "api"), vmi_uid=f"vmi-{name}")]
        yield [DomainStopped(meta=m(Kind.VMI, "handler", node), reason=StopReason.DESTROYED)]
        yield [VMIRemoved(meta=m(Kind.VMI, "controller"))]


def generate(n: int) -> Iterator[Event]:
    """About `n` events: node joins, then VM lifecycles in interleaved waves."""
    ids = _Ids()
    count = 0
    for k in range(NODES):
        count += 1
        yield NodeJoined(
            meta=ids.meta(Kind.NODE, f"node-{k}", "handler", None, f"node-{k}"),
            node=f"node-{k}",
            capacity=Resources(cpu_millis=64_000, memory_bytes=256 * 1024**3),
        )
    i = 0
    while count < n:
        gens = [_lifecycle(ids, i + j) for j in range(WAVE)]
        i += WAVE
        while gens and count < n:
            alive = []
            for g in gens:
                step = next(g, None)
                if step is None:
                    continue
                alive.append(g)
                for ev in step:
                    count += 1
                    yield ev
                    if count >= n:
                        return
            gens = alive


async def fill(store: JetStreamStore, n: int, batch: int = 2000) -> int:
    """Append `n` generated events with publish_async in batches; returns the last seq."""
    js = store.js
    pending = 0
    for ev in generate(n):
        subject = subjects.event_subject(ev.meta.aggregate, event_type(ev), ev.meta.node)
        await js.publish_async(subject, encode(ev), stream=store.stream)
        pending += 1
        if pending >= batch:
            await js.publish_async_completed()
            pending = 0
    await js.publish_async_completed()
    return await store.stream_last_seq()


async def raw_read(store: JetStreamStore, n: int) -> float:
    t = time.perf_counter()
    sub = await store.js.subscribe("virt.>", stream=store.stream, ordered_consumer=True)
    for _ in range(n):
        msg = await push.next_msg(sub, 10.0)  # as the store reads
        decode(msg.data)
    await sub.unsubscribe()
    return n / (time.perf_counter() - t)


async def rebuild(store: JetStreamStore) -> tuple[float, Cluster]:
    t = time.perf_counter()
    cluster = Cluster()
    count = 0
    async for s in store.replay():
        cluster.apply(s)
        count += 1
    return count / (time.perf_counter() - t), cluster


async def run(n: int, rounds: int) -> dict[str, float]:
    server = NatsServer(tempfile.mkdtemp(prefix="vs-bench-replay-"))
    await server.start()
    nc = await nats.connect(server.url)
    try:
        store = JetStreamStore(nc, StreamSettings(name="VIRT"))
        await store.ensure()
        t = time.perf_counter()
        n = await fill(store, n)
        fill_rate = n / (time.perf_counter() - t)

        # alternate raw and rebuild rounds (a shared, noisy machine); report the medians
        raws, folds = [], []
        cluster = Cluster()
        for _ in range(rounds):
            raws.append(await raw_read(store, n))
            rate, cluster = await rebuild(store)
            folds.append(rate)
        raw, fold = statistics.median(raws), statistics.median(folds)

        t = time.perf_counter()
        head = await view_checkpoints.save(store, "bench", cluster)
        save_s = time.perf_counter() - t
        t = time.perf_counter()
        loaded, info = await view_checkpoints.load_cluster(store, "bench")
        load_s = time.perf_counter() - t
        assert info.tail_events == 0
        assert view_checkpoints.encode_views(loaded) == view_checkpoints.encode_views(cluster)

        # a snapshot 10% before the end + its tail, against the full rebuild above
        early = Cluster()
        async for s in store.replay(until_seq=n - n // 10):
            early.apply(s)
        await view_checkpoints.save(store, "bench-early", early)
        t = time.perf_counter()
        tail, info = await view_checkpoints.load_cluster(store, "bench-early")
        tail_s = time.perf_counter() - t
        assert view_checkpoints.encode_views(tail) == view_checkpoints.encode_views(cluster)

        # why: one VM's chain by direct gets, and a full scan (the fallback) for scale
        vm = next(iter(cluster.vms.values()))
        t = time.perf_counter()
        chain = await why(store, Aggregate(kind=Kind.VM, namespace=NS, name=vm.name))
        why_s = time.perf_counter() - t
        t = time.perf_counter()
        async for _ in store.replay(raw=True):
            pass
        scan_s = time.perf_counter() - t

        # the request behind that chain, through the index (written first, unpaced)
        indexer = Indexer(store, pace=0)
        await indexer.start()
        try:
            while await last_indexed(store) < n:  # noqa: ASYNC110  (no event for it)
                await asyncio.sleep(0.1)
        finally:
            await indexer.stop()
        t = time.perf_counter()
        caused = await correlation.events_of(store, chain.correlation_id)
        correlation_s = time.perf_counter() - t
        assert caused and {s.event.meta.correlation_id for s in caused} == {chain.correlation_id}

        tracemalloc.start()
        base = tracemalloc.get_traced_memory()[0]
        traced = Cluster()
        async for s in store.replay():
            traced.apply(s)
        held = tracemalloc.get_traced_memory()[0] - base
        tracemalloc.stop()
        vmis = len(traced.vmis) or 1
        return {
            "events": n,
            "fill_per_s": fill_rate,
            "raw_per_s": raw,
            "rebuild_per_s": fold,
            "ratio": fold / raw,
            "vms": len(cluster.vms),
            "vmis": len(cluster.vmis),
            "migrations": len(cluster.migrations),
            "snapshot_bytes": head.size,
            "snapshot_chunks": head.chunks,
            "snapshot_save_s": save_s,
            "snapshot_load_s": load_s,
            "snapshot_tail_s": tail_s,
            "tail_events": info.tail_events,
            "why_s": why_s,
            "why_hops": len(chain.hops),
            "full_scan_s": scan_s,
            "correlation_s": correlation_s,
            "correlation_events": len(caused),
            "bytes_per_vmi": held / vmis,
            "bytes_per_object": held / max(1, len(traced.vms) + vmis + len(traced.migrations)),
        }
    finally:
        await nc.close()
        await server.stop()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--events", type=int, default=100_000)
    ap.add_argument("--rounds", type=int, default=3)
    r = asyncio.run(run(ap.parse_args().events, ap.parse_args().rounds))
    print(
        f"events: {r['events']:.0f} ({r['vms']:.0f} VMs, {r['vmis']:.0f} VMIs, "
        f"{r['migrations']:.0f} migrations in the views)"
    )
    print(f"append (publish_async):     {r['fill_per_s']:9.0f}/s")
    print(f"raw ordered read + decode:  {r['raw_per_s']:9.0f}/s")
    print(
        f"full rebuild of all views:  {r['rebuild_per_s']:9.0f}/s   ratio {r['ratio']:.0%} "
        "(target ≥ 50%)"
    )
    print(
        f"snapshot: {r['snapshot_bytes'] / 1024:.0f} KiB in {r['snapshot_chunks']:.0f} chunks, "
        f"save {r['snapshot_save_s'] * 1000:.0f} ms, load {r['snapshot_load_s'] * 1000:.0f} ms, "
        f"load + {r['tail_events']:.0f}-event tail {r['snapshot_tail_s'] * 1000:.0f} ms"
    )
    print(
        f"why (one VM, {r['why_hops']:.0f} hops): {r['why_s'] * 1000:.0f} ms; "
        f"full stream scan: {r['full_scan_s'] * 1000:.0f} ms"
    )
    print(
        f"events --correlation ({r['correlation_events']:.0f} events): "
        f"{r['correlation_s'] * 1000:.0f} ms through the index, "
        f"{r['correlation_s'] / r['full_scan_s']:.1%} of the full scan"
    )
    print(
        f"projection memory:          {r['bytes_per_vmi'] / 1024:9.2f} KiB per VMI "
        f"({r['bytes_per_object'] / 1024:.2f} KiB per VM/VMI/migration object, traced)"
    )


if __name__ == "__main__":
    main()
