"""virt-controller in a real service shell against a real nats-server. The handler and api
are played by the test, appending their events to the store directly."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest
from nats.aio.client import Client as NATS
from nats.js.api import StorageType

from events.catalog import (
    Event,
    LauncherExited,
    NodeJoined,
    NodeUnresponsive,
    PodScheduled,
    Resources,
    VMCreated,
    VMICreated,
    VMIDeleteRequested,
    VMIRemoved,
    VMRestartRequested,
    VMRunStrategyChanged,
    VMStartRequested,
    VMStopRequested,
)
from events.envelope import Stored
from events.meta import Aggregate, Kind
from eventstore import heartbeats
from eventstore.jetstream import JetStreamStore
from eventstore.settings import StreamSettings
from services.controller.reactor import ControllerReactor
from services.controller.service import ControllerService
from tests.conftest import unique
from tests.factories import meta, vm_manifest

GiB = 1024**3


async def eventually(cond: Callable[[], Awaitable[Any]], timeout: float = 15.0) -> Any:
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        result = await cond()
        if result:
            return result
        assert asyncio.get_running_loop().time() < deadline, "condition not met in time"
        await asyncio.sleep(0.05)


class Cluster:
    """The test's hands: append api/handler events, read what the controller did."""

    def __init__(self, store: JetStreamStore) -> None:
        self.store = store

    async def append(self, ev: Event) -> None:
        await self.store.append(ev)

    async def node_joined(self, name: str) -> None:
        await self.append(
            NodeJoined(
                meta=meta(Kind.NODE, name, namespace=""),
                node=name,
                capacity=Resources(cpu_millis=64000, memory_bytes=64 * GiB),
            )
        )

    async def vmi_events(self, name: str) -> list[Stored]:
        return await self.store.load(Aggregate(kind=Kind.VMI, namespace="default", name=name))

    async def wait_for(self, name: str, cls: type, n: int = 1) -> list[Any]:
        async def found() -> list[Any]:
            evs = [s.event for s in await self.vmi_events(name) if isinstance(s.event, cls)]
            return evs if len(evs) >= n else []

        return list(await eventually(found))


@pytest.fixture
async def controller(
    store: JetStreamStore, nc: NATS
) -> AsyncIterator[Callable[..., asyncio.Task[None]]]:
    """Starts controller incarnations (each a ServiceShell task); all are cancelled at the
    end, and the test's heartbeat bucket is deleted."""
    bucket = unique("hb")
    await heartbeats.ensure_bucket(nc.jetstream(), bucket, storage=StorageType.MEMORY)
    tasks: list[tuple[ControllerService, asyncio.Task[None]]] = []

    def start(node_timeout: float = 120.0) -> asyncio.Task[None]:
        service = ControllerService(
            ControllerReactor(node_timeout=node_timeout),
            store,
            bucket=bucket,
            tick_interval=0.2,
            ack_wait=1.0,
        )
        start.bucket = bucket  # type: ignore[attr-defined]
        task = asyncio.create_task(service.run())
        tasks.append((service, task))
        return task

    yield start
    for service, t in tasks:
        # stop() first: Python 3.11's wait_for can swallow a cancel that races its timeout
        # (inside nats-py's fetch), and a loop that lost its cancel still sees the flag
        service.stop()
        t.cancel()
        with contextlib.suppress(BaseException):
            await asyncio.wait_for(t, 10)
    with contextlib.suppress(Exception):
        await nc.jetstream().delete_key_value(bucket)


async def test_vm_lifecycle_create_schedule_stop_start_restart(
    store: JetStreamStore, controller: Callable[[], asyncio.Task[None]]
) -> None:
    c = Cluster(store)
    controller()
    name = unique("vm")
    vm = lambda: meta(Kind.VM, name)  # noqa: E731
    await c.node_joined("node-a")
    await c.append(VMCreated(meta=vm(), manifest=vm_manifest(name, memory="64Mi")))

    (created,) = await c.wait_for(name, VMICreated)
    (scheduled,) = await c.wait_for(name, PodScheduled)
    uid = created.manifest["metadata"]["uid"]
    assert created.owner_vm_uid == f"uid-{name}" and scheduled.node == "node-a"
    assert scheduled.meta.node == "node-a"  # routed to the node's handler

    # stop: the api turns Always into Halted and records the request
    await c.append(VMRunStrategyChanged(meta=vm(), run_strategy="Halted"))
    await c.append(VMStopRequested(meta=vm(), vmi_uid=uid))
    (delete,) = await c.wait_for(name, VMIDeleteRequested)
    assert delete.meta.node == "node-a"
    await c.append(
        LauncherExited(
            meta=meta(Kind.VMI, name, node="node-a"), node="node-a", pod_uid=scheduled.pod_uid
        )
    )
    await c.wait_for(name, VMIRemoved)

    # start: Halted → Always, and a new VMI
    await c.append(VMRunStrategyChanged(meta=vm(), run_strategy="Always"))
    await c.append(VMStartRequested(meta=vm()))
    second = (await c.wait_for(name, VMICreated, 2))[1]
    uid2 = second.manifest["metadata"]["uid"]
    assert uid2 != uid
    await c.wait_for(name, PodScheduled, 2)

    # restart: the old VMI goes, a new one comes with a new uid
    await c.append(VMRestartRequested(meta=vm(), vmi_uid=uid2))
    await c.wait_for(name, VMIDeleteRequested, 2)
    await c.append(
        LauncherExited(meta=meta(Kind.VMI, name, node="node-a"), node="node-a", pod_uid="p")
    )
    third = (await c.wait_for(name, VMICreated, 3))[2]
    assert third.manifest["metadata"]["uid"] not in (uid, uid2)


async def test_a_controller_killed_mid_workload_creates_no_vmi_twice(
    store: JetStreamStore,
    stream_settings: StreamSettings,
    controller: Callable[[], asyncio.Task[None]],
) -> None:
    c = Cluster(store)
    names = [f"{unique('kill')}-{i}" for i in range(30)]
    await c.node_joined("node-k")
    first = controller()
    for name in names:
        await c.append(
            VMCreated(meta=meta(Kind.VM, name), manifest=vm_manifest(name, memory="64Mi"))
        )
        if name == names[10]:
            await c.wait_for(names[0], VMICreated)
            first.cancel()  # abrupt: mid-batch, maybe between append and ack
            with contextlib.suppress(BaseException):
                await asyncio.wait_for(first, 10)  # re-cancels if a cancel was swallowed
    controller()

    async def all_created() -> bool:
        counts = await created_per_vm(store)
        return set(counts) >= set(names)

    await eventually(all_created, timeout=30)

    async def settled() -> bool:
        info = await store.js.consumer_info(stream_settings.name, "virt-controller")
        return info.num_pending == 0 and info.num_ack_pending == 0

    await eventually(settled, timeout=30)
    counts = await created_per_vm(store)
    assert {n: counts[n] for n in names} == dict.fromkeys(names, 1)


async def created_per_vm(store: JetStreamStore) -> Counter[str]:
    counts: Counter[str] = Counter()
    async for s in store.replay(["virt.vmi.>"]):
        if isinstance(s.event, VMICreated):
            counts[s.event.meta.aggregate.name] += 1
    return counts


async def test_heartbeats_from_the_bucket_keep_nodes_alive(
    store: JetStreamStore, nc: NATS, controller: Callable[..., asyncio.Task[None]]
) -> None:
    c = Cluster(store)
    controller(node_timeout=1.5)
    kv = await heartbeats.ensure_bucket(nc.jetstream(), controller.bucket)  # type: ignore[attr-defined]
    live, silent = unique("live"), unique("silent")
    await c.node_joined(live)
    await c.node_joined(silent)

    async def beat() -> None:
        while True:
            await heartbeats.put(kv, live, time.time())
            await asyncio.sleep(0.2)

    beating = asyncio.create_task(beat())
    try:

        async def unresponsive() -> list[str]:
            return [
                s.event.meta.aggregate.name
                async for s in store.replay(["virt.node.>"])
                if isinstance(s.event, NodeUnresponsive)
            ]

        assert await eventually(unresponsive) == [silent]
        await asyncio.sleep(0.5)
        assert await unresponsive() == [silent]
    finally:
        beating.cancel()
