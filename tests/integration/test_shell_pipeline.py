"""The pipelined shell (a window of deliveries whose appends are in flight) on a real
nats-server: the window stays bounded, each aggregate's appends keep the order they were
decided in, and a controller killed mid-burst loses nothing it acknowledged."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from collections.abc import Sequence

from events import subjects
from events.catalog import (
    Event,
    NodeJoined,
    PodScheduled,
    Resources,
    VMCreated,
    VMICreated,
    VMIPauseRequested,
    VMStartRequested,
)
from events.envelope import Appended, Context, Decision, Stored
from events.meta import Aggregate, Kind
from eventstore.jetstream import JetStreamStore
from eventstore.settings import StreamSettings
from ops.nats_server import NatsServer
from services.runtime.shell import ServiceShell
from tests.conftest import REPO, unique
from tests.factories import meta, vm_manifest
from tests.integration.test_controller_service import eventually

GiB = 1024**3


class Funnel:
    """Each VMStartRequested on vm/x → a pause on vmi/x and one on the shared vmi/<target>,
    both OCC: many deliveries' appends name the same aggregate."""

    name = "funnel"

    def __init__(self, target: str) -> None:
        self.target = target

    def filters(self) -> Sequence[str]:
        return [subjects.kind_filter(Kind.VM), subjects.kind_filter(Kind.VMI)]

    def initial_state(self) -> int:
        return 0

    def holds(self, state: int, key: str) -> bool:
        return True  # keeps every version

    def evolve(self, state: int, stored: Stored) -> int:
        return state + 1

    def react(self, state: int, stored: Stored, ctx: Context) -> Sequence[Decision]:
        if not isinstance(stored.event, VMStartRequested):
            return []
        agg = stored.event.meta.aggregate
        own = Aggregate(kind=Kind.VMI, namespace=agg.namespace, name=agg.name)
        shared = Aggregate(kind=Kind.VMI, namespace=agg.namespace, name=self.target)
        return [
            Decision(VMIPauseRequested(meta=ctx.meta(own))),
            Decision(VMIPauseRequested(meta=ctx.meta(shared))),
        ]

    def tick(self, state: int, ctx: Context) -> Sequence[Decision]:
        return []


class SlowStore(JetStreamStore):
    """The real store, each append held a moment longer (a slow disk), counting how many
    are in flight at once."""

    def __init__(self, store: JetStreamStore) -> None:
        super().__init__(store.nc, store.settings)
        self.in_flight = 0
        self.peak = 0

    async def append(
        self, event: Event, *, expected: int | None = None, msg_id: str | None = None
    ) -> Appended:
        self.in_flight += 1
        self.peak = max(self.peak, self.in_flight)
        try:
            await asyncio.sleep(0.02)
            return await super().append(event, expected=expected, msg_id=msg_id)
        finally:
            self.in_flight -= 1


async def test_window_is_bounded_and_each_aggregate_keeps_its_order(
    store: JetStreamStore,
) -> None:
    target = unique("shared")
    slow = SlowStore(store)
    shell = ServiceShell(Funnel(target), slow, tick_interval=0.2, ack_wait=2.0, window=4)
    names = [unique("vm") for _ in range(40)]
    for name in names:
        await store.append(VMStartRequested(meta=meta(name=name)))
    runner = asyncio.create_task(shell.run())
    try:
        shared = Aggregate(kind=Kind.VMI, namespace="default", name=target)

        async def all_landed() -> list[Stored]:
            evs = await store.load(shared)
            return evs if len(evs) >= len(names) else []

        landed = await eventually(all_landed)
        info = await eventually(lambda: _all_acked(store))
    finally:
        shell.stop()
        await runner

    assert shell.pipe is not None and 1 < shell.pipe.peak <= 4
    assert slow.peak <= 4 * 2  # each delivery in flight has at most its two chains
    # exactly once per cause, stored in the order the causes were decided (stream order)
    causes = [int(s.event.meta.event_id.split("/")[1]) for s in landed]
    assert len(landed) == len(names) and causes == sorted(causes)
    for name in names:
        own = await store.load(Aggregate(kind=Kind.VMI, namespace="default", name=name))
        assert len(own) == 1
    assert info.num_ack_pending == 0


async def _all_acked(store: JetStreamStore) -> object:
    info = await store.js.consumer_info(store.stream, "funnel")
    return info if info.num_pending == 0 and info.num_ack_pending == 0 else None


def spawn_controller(server: NatsServer, settings: StreamSettings) -> subprocess.Popen[bytes]:
    env = {
        **os.environ,
        "VIRTSTREAM_STREAM_NAME": settings.name,
        "VIRTSTREAM_STREAM_STORAGE": settings.storage,
    }
    return subprocess.Popen(
        [sys.executable, "-m", "services.controller", "--nats-url", server.url],
        cwd=REPO,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


async def test_controller_killed_mid_burst_loses_nothing(
    store: JetStreamStore, nats_server: NatsServer, stream_settings: StreamSettings
) -> None:
    await store.append(
        NodeJoined(
            meta=meta(Kind.NODE, "node-a", namespace=""),
            node="node-a",
            capacity=Resources(cpu_millis=640000, memory_bytes=640 * GiB),
        )
    )
    names = [unique("vm") for _ in range(150)]
    first = spawn_controller(nats_server, stream_settings)
    try:
        for name in names:
            await store.append(
                VMCreated(meta=meta(Kind.VM, name), manifest=vm_manifest(name, memory="64Mi"))
            )

        async def some_created() -> bool:
            seq = await store.stream_last_seq()
            return seq > len(names) + 40  # the controller is part-way through the burst

        await eventually(some_created, timeout=30)
        first.send_signal(signal.SIGKILL)
        assert first.wait(10) == -signal.SIGKILL
    finally:
        if first.poll() is None:
            first.kill()
            first.wait(10)

    second = spawn_controller(nats_server, stream_settings)
    try:

        async def all_scheduled() -> bool:
            scheduled = {n for n, evs in (await _vmi_events(store)).items() if PodScheduled in evs}
            return scheduled >= set(names)

        await eventually(all_scheduled, timeout=60)
    finally:
        second.terminate()
        second.wait(10)

    vmis = await _vmi_events(store)
    for name in names:
        assert vmis[name].count(VMICreated) == 1, name
        assert vmis[name].count(PodScheduled) == 1, name
    dlq = await store.js.stream_info(stream_settings.dlq_name)
    assert dlq.state.messages == 0


async def _vmi_events(store: JetStreamStore) -> dict[str, list[type]]:
    """Every VMI's event types, in order, from one replay."""
    out: dict[str, list[type]] = {}
    async for s in store.replay([subjects.kind_filter(Kind.VMI)]):
        out.setdefault(s.event.meta.aggregate.name, []).append(type(s.event))
    return out
