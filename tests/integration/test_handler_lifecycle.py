"""virt-handler in-process against a real nats-server, real zygote-forked launchers and
libvirt's test driver: PodScheduled → launcher → domain events, and the intents after."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from nats.aio.client import Client as NATS

from events.catalog import (
    DomainPaused,
    DomainStarted,
    DomainStopped,
    LauncherStarted,
    NodeJoined,
    StopReason,
    VMIDeleteRequested,
    VMIFailed,
    VMIPauseRequested,
    VMISoftRebootRequested,
    VMIUnpauseRequested,
)
from events.meta import CLUSTER_SCOPE, Aggregate, Kind
from eventstore.jetstream import JetStreamStore
from eventstore.settings import StreamSettings
from services.handler.node_info import NodeConfig
from services.handler.service import Handler, HandlerConfig
from services.launcher import rundir
from services.launcher.client import LauncherClient
from services.launcher.domain_state import DomainState
from services.launcher.protocol import Crash
from tests.integration.test_handler_support import (
    of_type,
    pod_scheduled,
    short_run_dir,
    vmi_manifest,
    vmi_meta,
    wait_dead,
    wait_events,
)


@pytest.fixture
def run_dir() -> Iterator[Path]:
    with short_run_dir() as d:
        yield d


@contextlib.asynccontextmanager
async def running_handler(
    nc: NATS, settings: StreamSettings, run_dir: Path, node: str = "node-1"
) -> AsyncIterator[Handler]:
    cfg = HandlerConfig(
        node=NodeConfig(name=node, cpus=4, memory="8Gi"),
        run_dir=str(run_dir),
        settings=settings,
        tick_interval=0.2,
        heartbeat_interval=0.5,
    )
    handler = Handler(cfg, store=JetStreamStore(nc, settings))
    task = asyncio.create_task(handler.run())
    async with asyncio.timeout(15):
        while not handler.ready:
            if task.done():
                await task  # raises what stopped it
            await asyncio.sleep(0.02)
    try:
        yield handler
    finally:
        handler.stop()
        await asyncio.wait_for(task, 10)


@pytest.fixture
async def handler(
    nc: NATS, store: JetStreamStore, stream_settings: StreamSettings, run_dir: Path
) -> AsyncIterator[Handler]:
    async with running_handler(nc, stream_settings, run_dir) as h:
        yield h


def launcher_socket(run_dir: Path, name: str, node: str = "node-1") -> str:
    return str(run_dir / node / "launchers" / f"default_{name}.sock")


async def test_node_joined_and_heartbeat(handler: Handler, store: JetStreamStore, nc: NATS) -> None:
    events = await store.load(Aggregate(Kind.NODE, CLUSTER_SCOPE, "node-1"))
    joined = [s.event for s in events if isinstance(s.event, NodeJoined)]
    assert joined and joined[0].capacity.cpu_millis == 4000
    assert joined[0].capacity.memory_bytes == 8 * 1024**3
    assert joined[0].labels["kubernetes.io/hostname"] == "node-1"
    assert joined[0].meta.node == "node-1"
    kv = await nc.jetstream().key_value("virt-heartbeats")
    entry = await kv.get("node-1")
    assert entry.value and float(entry.value) > 0


async def test_pod_scheduled_runs_and_delete_stops(
    handler: Handler, store: JetStreamStore, run_dir: Path
) -> None:
    vmi = vmi_manifest("vm-a", grace=0)
    await store.append(pod_scheduled(vmi, "node-1"))
    events = await wait_events(store, vmi, lambda t: "DomainStarted" in t)
    started = of_type(events, LauncherStarted)
    assert len(started) == 1 and started[0].node == "node-1"
    assert of_type(events, DomainStarted)[0].meta.node == "node-1"
    pid = started[0].pid
    assert rundir.pid_alive(pid)
    client = await LauncherClient.connect(launcher_socket(run_dir, "vm-a"))
    try:
        status = await client.next_status(5)
        assert status.state is DomainState.RUNNING
    finally:
        await client.close()

    await store.append(VMIDeleteRequested(meta=vmi_meta(vmi, "node-1"), grace_period_seconds=0))
    events = await wait_events(store, vmi, lambda t: "LauncherExited" in t)
    stopped = of_type(events, DomainStopped)
    assert len(stopped) == 1 and stopped[0].reason is StopReason.DESTROYED
    assert not stopped[0].grace_period_expired
    await wait_dead(pid)


async def test_delete_without_grace_uses_spec_grace(
    handler: Handler, store: JetStreamStore
) -> None:
    # the test driver's guest obeys ACPI at once: a graceful Shutdown
    vmi = vmi_manifest("vm-g", grace=5)
    await store.append(pod_scheduled(vmi, "node-1"))
    await wait_events(store, vmi, lambda t: "DomainStarted" in t)
    await store.append(VMIDeleteRequested(meta=vmi_meta(vmi, "node-1")))
    events = await wait_events(store, vmi, lambda t: "LauncherExited" in t)
    assert of_type(events, DomainStopped)[0].reason is StopReason.SHUTDOWN


async def test_pause_unpause_softreboot(handler: Handler, store: JetStreamStore) -> None:
    vmi = vmi_manifest("vm-p")
    await store.append(pod_scheduled(vmi, "node-1"))
    await wait_events(store, vmi, lambda t: "DomainStarted" in t)
    await store.append(VMIPauseRequested(meta=vmi_meta(vmi, "node-1")))
    await wait_events(store, vmi, lambda t: "DomainPaused" in t)
    await store.append(VMIUnpauseRequested(meta=vmi_meta(vmi, "node-1")))
    await wait_events(store, vmi, lambda t: "DomainResumed" in t)
    await store.append(VMISoftRebootRequested(meta=vmi_meta(vmi, "node-1")))
    events = await wait_events(store, vmi, lambda t: "DomainSoftRebooted" in t)
    names = [type(s.event).__name__ for s in events]
    assert names.count("DomainPaused") == 1 and names.count("DomainResumed") == 1
    await store.append(VMIDeleteRequested(meta=vmi_meta(vmi, "node-1"), grace_period_seconds=0))
    await wait_events(store, vmi, lambda t: "LauncherExited" in t)


async def test_start_paused(handler: Handler, store: JetStreamStore) -> None:
    vmi = vmi_manifest("vm-sp", paused=True)
    await store.append(pod_scheduled(vmi, "node-1"))
    async with asyncio.timeout(10):
        while True:
            events = await wait_events(store, vmi, lambda t: "DomainStarted" in t)
            if of_type(events, DomainStarted)[0].paused or of_type(events, DomainPaused):
                break
            await asyncio.sleep(0.05)
    await store.append(VMIUnpauseRequested(meta=vmi_meta(vmi, "node-1")))
    await wait_events(store, vmi, lambda t: "DomainResumed" in t)
    await store.append(VMIDeleteRequested(meta=vmi_meta(vmi, "node-1"), grace_period_seconds=0))
    await wait_events(store, vmi, lambda t: "LauncherExited" in t)


async def test_crash_reports_crashed(
    handler: Handler, store: JetStreamStore, run_dir: Path
) -> None:
    vmi = vmi_manifest("vm-c")
    await store.append(pod_scheduled(vmi, "node-1"))
    await wait_events(store, vmi, lambda t: "DomainStarted" in t)
    client = await LauncherClient.connect(launcher_socket(run_dir, "vm-c"))
    try:
        result = await client.call(Crash())
        assert result.ok
    finally:
        await client.close()
    events = await wait_events(store, vmi, lambda t: "LauncherExited" in t)
    assert of_type(events, DomainStopped)[0].reason is StopReason.CRASHED


async def test_vmi_failed_destroys_launcher(handler: Handler, store: JetStreamStore) -> None:
    vmi = vmi_manifest("vm-f")
    await store.append(pod_scheduled(vmi, "node-1"))
    events = await wait_events(store, vmi, lambda t: "DomainStarted" in t)
    pid = of_type(events, LauncherStarted)[0].pid
    await store.append(VMIFailed(meta=vmi_meta(vmi, "node-1"), reason="NodeUnresponsive"))
    await wait_events(store, vmi, lambda t: "LauncherExited" in t)
    await wait_dead(pid)


async def test_only_own_node_traffic(
    nc: NATS, store: JetStreamStore, stream_settings: StreamSettings, run_dir: Path
) -> None:
    async with (
        running_handler(nc, stream_settings, run_dir, "node-1") as h1,
        running_handler(nc, stream_settings, run_dir, "node-2") as h2,
    ):
        vmi = vmi_manifest("vm-n2", grace=0)
        await store.append(pod_scheduled(vmi, "node-2"))
        events = await wait_events(store, vmi, lambda t: "DomainStarted" in t)
        assert of_type(events, LauncherStarted)[0].node == "node-2"
        assert "default/vm-n2" in h2.records and "default/vm-n2" not in h1.records
        # node-1's consumer was delivered none of node-2's VMI events
        info = await store.js.consumer_info(store.stream, "virt-handler-node-1")
        assert info.num_pending == 0 and info.delivered.consumer_seq == 0
        await store.append(VMIDeleteRequested(meta=vmi_meta(vmi, "node-2"), grace_period_seconds=0))
        await wait_events(store, vmi, lambda t: "LauncherExited" in t)
