"""`virtstream whatif` against a real nats-server's log, written by the real controller in
its service shell (the api and the handlers played by the test, appending their events):
today's decider reproduces every decision; `--scheduler-policy pack` reports the
placements that differ, each with the live and the what-if node."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
import typer
from nats.aio.client import Client as NATS
from nats.js.api import StorageType
from typer.testing import CliRunner, Result

from cli.whatif import register
from events.catalog import (
    DomainStarted,
    LauncherExited,
    LauncherStarted,
    NodeJoined,
    PodScheduled,
    Resources,
    VMCreated,
    VMIDeleteRequested,
    VMIRemoved,
    VMStopRequested,
)
from events.envelope import Stored
from events.meta import Kind
from eventstore import heartbeats
from eventstore.jetstream import JetStreamStore
from eventstore.settings import StreamSettings
from ops.nats_server import NatsServer
from services.controller.reactor import ControllerReactor
from services.controller.service import ControllerService
from tests.conftest import unique
from tests.factories import meta, vm_manifest

GiB = 1024**3
NODES = ("node-a", "node-b", "node-c")
app = typer.Typer()
register(app)  # the one command: its arguments come first


async def eventually(cond: Callable[[], Awaitable[Any]], timeout: float = 20.0) -> Any:
    deadline = asyncio.get_running_loop().time() + timeout
    while not (result := await cond()):
        assert asyncio.get_running_loop().time() < deadline, "condition not met in time"
        await asyncio.sleep(0.05)
    return result


async def all_events(store: JetStreamStore) -> list[Stored]:
    return [s async for s in store.replay(None)]


async def whatif(server: NatsServer, settings: StreamSettings, *args: str) -> Result:
    argv = [*args, "--nats-url", server.url, "--stream", settings.name]
    result = await asyncio.to_thread(CliRunner().invoke, app, argv, env={"COLUMNS": "250"})
    return result


@pytest.fixture
async def controller(store: JetStreamStore, nc: NATS) -> AsyncIterator[None]:
    """The real controller (its pipelined shell, its ticks) on the test's stream."""
    bucket = unique("hb")
    await heartbeats.ensure_bucket(nc.jetstream(), bucket, storage=StorageType.MEMORY)
    service = ControllerService(
        ControllerReactor(node_timeout=120.0), store, bucket=bucket, tick_interval=0.2
    )
    task = asyncio.create_task(service.run())
    yield
    service.stop()
    task.cancel()
    with contextlib.suppress(BaseException):
        await asyncio.wait_for(task, 10)
    with contextlib.suppress(Exception):
        await nc.jetstream().delete_key_value(bucket)


async def run_twelve(store: JetStreamStore) -> dict[str, str]:
    """Three nodes, twelve VMs started (launchers and domains up), two stopped; returns
    where each VMI was placed."""
    for n in NODES:
        await store.append(
            NodeJoined(
                meta=meta(Kind.NODE, n, namespace=""),
                node=n,
                capacity=Resources(cpu_millis=64000, memory_bytes=64 * GiB),
            )
        )
    names = [f"vm{i:02}" for i in range(12)]
    for name in names:
        await store.append(VMCreated(meta=meta(Kind.VM, name), manifest=vm_manifest(name)))

    async def scheduled() -> dict[str, PodScheduled]:
        evs = await all_events(store)
        placed = {
            s.event.meta.aggregate.name: s.event for s in evs if isinstance(s.event, PodScheduled)
        }
        return placed if len(placed) == len(names) else {}

    placed: dict[str, PodScheduled] = await eventually(scheduled)
    for name, ps in placed.items():
        m = meta(Kind.VMI, name, node=ps.node)
        await store.append(LauncherStarted(meta=m, node=ps.node, pod_uid=ps.pod_uid, pid=42))
        await store.append(
            DomainStarted(meta=meta(Kind.VMI, name, node=ps.node), node=ps.node, domain=name)
        )
    for name in names[:2]:
        ps = placed[name]
        uid = ps.manifest["metadata"]["uid"]
        await store.append(VMStopRequested(meta=meta(Kind.VM, name), vmi_uid=uid))

    async def deleting() -> bool:
        evs = await all_events(store)
        return sum(isinstance(s.event, VMIDeleteRequested) for s in evs) == 2

    await eventually(deleting)
    for name in names[:2]:
        ps = placed[name]
        m = meta(Kind.VMI, name, node=ps.node)
        await store.append(LauncherExited(meta=m, node=ps.node, pod_uid=ps.pod_uid))

    async def removed() -> bool:
        evs = await all_events(store)
        return sum(isinstance(s.event, VMIRemoved) for s in evs) == 2

    await eventually(removed)
    await asyncio.sleep(0.5)  # the controller at rest: a few ticks decide nothing more
    return {name: ps.node for name, ps in placed.items()}


async def test_whatif_over_a_real_controllers_log(
    nats_server: NatsServer,
    stream_settings: StreamSettings,
    store: JetStreamStore,
    controller: None,
) -> None:
    placed = await run_twelve(store)
    evs = await all_events(store)
    live = [s for s in evs if s.event.meta.actor.service == "virt-controller"]

    same = await whatif(nats_server, stream_settings, "-o", "json")
    assert same.exit_code == 0, same.output + repr(same.exception)
    report = json.loads(same.stdout)
    assert report["differences"] == []
    assert report["events"] == len(evs)
    s = report["summary"]
    assert s["change"] == "none" and s["first_divergence"] is None
    assert s["reproduced"] + s["ticks_left_out"] == s["live_decisions"] == len(live)
    assert s["reproduced"] > 12
    pods = {s.event.meta.event_id: s.event.node for s in live if isinstance(s.event, PodScheduled)}
    assert set(placed.values()) == set(NODES)  # spread
    assert s["placements"]["live"] == dict(sorted(Counter(pods.values()).items()))

    packed = await whatif(nats_server, stream_settings, "--scheduler-policy", "pack", "-o", "json")
    assert packed.exit_code == 0, packed.output + repr(packed.exception)
    report = json.loads(packed.stdout)
    moved = {d["aggregate"]: d for d in report["differences"]}
    assert moved, "pack places the twelve VMIs differently from spread"
    for d in moved.values():
        assert d["live"]["type"] == d["whatif"]["type"] == "PodScheduled"
        assert d["live"]["node"] == pods[d["id"]] != d["whatif"]["node"]
        assert d["live"]["seq"] == d["seq"]
    first = report["summary"]["first_divergence"]
    assert first["event"]["seq"] == first["cause"] == report["differences"][0]["cause"]

    table = await whatif(nats_server, stream_settings, "--scheduler-policy", "pack")
    assert table.exit_code == 0
    assert "placements per node" in table.stdout and "first divergence: at event" in table.stdout
    row = next(line for line in table.stdout.splitlines() if "PodScheduled on" in line)
    assert row.count("PodScheduled on") == 2

    window = await whatif(nats_server, stream_settings, "--since", str(len(evs) - 5), "-o", "json")
    assert json.loads(window.stdout)["differences"] == []


async def test_a_changed_decider_is_caught(
    nats_server: NatsServer,
    stream_settings: StreamSettings,
    store: JetStreamStore,
    controller: None,
    tmp_path: Path,
) -> None:
    await run_twelve(store)
    r = await whatif(
        nats_server,
        stream_settings,
        "--decider",
        "controller=tests.unit.whatif_fixtures:forgetful",
        "-o",
        "json",
    )
    assert r.exit_code == 0, r.output
    report = json.loads(r.stdout)
    assert report["differences"] and all(
        d["live"]["type"] == "PodScheduled" and d["whatif"] is None for d in report["differences"]
    )
    bad = await whatif(nats_server, stream_settings, "--scheduler-policy", "best")
    assert bad.exit_code == 1 and "unknown scheduler policy 'best'" in bad.output
    weighed = await whatif(nats_server, stream_settings, "--scheduler-weights", "disk=1")
    assert (
        weighed.exit_code == 1 and "--scheduler-weights: unknown resource 'disk'" in weighed.output
    )
    # equal nodes, each VM over 1% of one: by share of memory, the choices by bytes
    same = await whatif(
        nats_server, stream_settings, "--scheduler-weights", "memory=1", "-o", "json"
    )
    assert same.exit_code == 0, same.output
    summary = json.loads(same.stdout)["summary"]
    assert summary["change"] == "scheduler policy spread weights memory=1"
    assert summary["placements"]["whatif"] == summary["placements"]["live"]
    policy = tmp_path / "policy.yaml"
    policy.write_text("kind: MigrationPolicy\nmetadata: {name: Not-A-Name}\nspec: {}\n")
    refused = await whatif(nats_server, stream_settings, "--migration-policy", str(policy))
    assert refused.exit_code == 1 and "--migration-policy" in refused.output
    assert "Not-A-Name" in refused.output
    both = await whatif(
        nats_server, stream_settings, "--scheduler-policy", "pack", "--migration-policy", "x"
    )
    assert both.exit_code == 1 and "one change at a time" in both.output
