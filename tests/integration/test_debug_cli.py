"""`virtstream events/replay/at/why` against a real nats-server, on a scripted lifecycle
(create, start, pause, migrate, stop) appended as the services would have."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import pytest
import typer
from typer.testing import CliRunner, Result

from cli.debug import register
from events.meta import Aggregate, Kind
from eventstore.jetstream import JetStreamStore
from eventstore.settings import StreamSettings
from ops.nats_server import NatsServer
from readside import causality, timetravel
from tests.debug_scenario import SLOW_HOP, VM_STATUS_AFTER, Script, lifecycle, node_failure

app = typer.Typer()
register(app)


async def append(store: JetStreamStore, script: Script, mark_after: int = 0) -> float:
    """Append in order (positions become sequences); returns a wall time between the
    event at `mark_after` and the next one."""
    mark = 0.0
    for i, ev in enumerate(script.events, start=1):
        ack = await store.append(ev)
        assert ack.seq == i
        if i == mark_after:
            mark = time.time()
    return mark


async def cli(server: NatsServer, settings: StreamSettings, *args: str) -> Result:
    runner = CliRunner()
    argv = [*args, "--nats-url", server.url, "--stream", settings.name]
    result = await asyncio.to_thread(runner.invoke, app, argv, env={"COLUMNS": "250"})
    assert result.exit_code == 0, result.output + repr(result.exception)
    return result


def lines(result: Result) -> list[dict[str, Any]]:
    return [json.loads(x) for x in result.stdout.splitlines() if x.strip()]


async def test_events_filters_on_the_server_and_prints_ids(
    nats_server: NatsServer, stream_settings: StreamSettings, store: JetStreamStore
) -> None:
    script = lifecycle()
    await append(store, script)
    out = lines(await cli(nats_server, stream_settings, "events", "-o", "json"))
    assert [o["seq"] for o in out] == list(range(1, 27))
    first = out[8]
    assert first["type"] == "DomainStarted" and first["causationId"] == "handler/7/0"
    assert first["correlationId"] == "req-2" and first["data"]["domain"] == "default_vm1"
    assert first["subject"] == "virt.vmi.default.vm1.DomainStarted.node-1"

    only = lines(
        await cli(nats_server, stream_settings, "events", "--type", "DomainStarted", "-o", "json")
    )
    assert [o["seq"] for o in only] == [9]
    mig = lines(
        await cli(
            nats_server, stream_settings, "events", "-a", "migration/default/mig1", "-o", "json"
        )
    )
    assert [o["seq"] for o in mig] == list(range(14, 21))
    since = lines(await cli(nats_server, stream_settings, "events", "--since", "24", "-o", "json"))
    assert [o["type"] for o in since] == ["DomainStopped", "LauncherExited", "VMIRemoved"]

    text = (await cli(nats_server, stream_settings, "events", "-a", "vmi/default/vm1")).stdout
    rows = text.splitlines()
    assert len(rows) == 12
    assert "PodScheduled" in rows[1] and "controller" in rows[1] and "podName=" in rows[1]
    assert "handler@node-1" in rows[2]


async def test_events_follow_prints_new_events(
    nats_server: NatsServer, stream_settings: StreamSettings, store: JetStreamStore
) -> None:
    script = lifecycle()
    for ev in script.events[:3]:
        await store.append(ev)
    follower = asyncio.create_task(
        cli(nats_server, stream_settings, "events", "-f", "--limit", "5", "-o", "json")
    )
    for ev in script.events[3:5]:
        await store.append(ev)
    out = lines(await asyncio.wait_for(follower, 20))
    assert [o["seq"] for o in out] == [1, 2, 3, 4, 5]


async def test_replay_shows_each_change_of_the_vm(
    nats_server: NatsServer, stream_settings: StreamSettings, store: JetStreamStore
) -> None:
    await append(store, lifecycle())
    steps = lines(await cli(nats_server, stream_settings, "replay", "vm/default/vm1", "-o", "json"))
    status = {
        s["seq"]: c["after"]
        for s in steps
        for c in s["changes"]
        if c["path"] == "status.printableStatus"
    }
    assert status == VM_STATUS_AFTER
    text = (await cli(nats_server, stream_settings, "replay", "vmi/default/vm1")).stdout
    assert "status.phase: Scheduled → Running" in text
    assert "status.nodeName: node-1 → node-2" in text
    assert "+ status.conditions[type=Paused].status: True" in text
    until = lines(
        await cli(
            nats_server, stream_settings, "replay", "vm/default/vm1", "--until", "13", "-o", "json"
        )
    )
    assert until[-1]["seq"] == 13


async def test_at_sequence_and_time_show_the_past(
    nats_server: NatsServer, stream_settings: StreamSettings, store: JetStreamStore
) -> None:
    mark = await append(store, lifecycle(), mark_after=11)
    vmi = lines(await cli(nats_server, stream_settings, "at", "11", "vmi", "vm1", "-o", "json"))[0]
    assert vmi["status"]["phase"] == "Running" and vmi["status"]["nodeName"] == "node-1"
    assert {"type": "Paused", "status": "True", "reason": "PausedByUser"}.items() <= (
        vmi["status"]["conditions"][1].items()
    )
    by_time = lines(
        await cli(nats_server, stream_settings, "at", f"@{mark}", "vm", "default/vm1", "-o", "json")
    )[0]
    assert by_time["status"]["printableStatus"] == "Paused"
    assert by_time["metadata"]["resourceVersion"] == "11"
    vms = lines(await cli(nats_server, stream_settings, "at", "16", "vms", "-o", "json"))[0]
    assert [v["status"]["printableStatus"] for v in vms["items"]] == ["Migrating"]
    table = (await cli(nats_server, stream_settings, "at", "20", "vmis")).stdout
    assert "vm1" in table and "Running" in table and "node-2" in table
    nodes = (await cli(nats_server, stream_settings, "at", "2", "nodes")).stdout
    assert "node-1" in nodes and "node-2" in nodes and "Ready" in nodes
    gone = lines(await cli(nats_server, stream_settings, "at", "26", "vmis", "-o", "json"))[0]
    assert gone["items"] == []

    at = await timetravel.cluster_at(store, seq=9)
    assert at.vmis["default/vm1"].phase == "Running" and at.last_seq == 9
    now = await timetravel.cluster_at(store)
    assert now.last_seq == 26 and "default/vm1" not in now.vmis


async def test_why_follows_causation_to_the_request_and_marks_the_slow_hop(
    nats_server: NatsServer, stream_settings: StreamSettings, store: JetStreamStore
) -> None:
    await append(store, lifecycle())
    chain = lines(
        await cli(nats_server, stream_settings, "why", "migration/default/mig1", "-o", "json")
    )[0]
    types = [h["type"] for h in chain["hops"]]
    assert types == [
        "MigrationRequested",
        "MigrationScheduling",
        "MigrationScheduled",
        "TargetPreparing",
        "TargetPrepared",
        "MigrationStarted",
        "MigrationSucceeded",
    ]
    assert chain["complete"] and chain["correlation_id"] == "req-5"
    slow = chain["hops"][chain["slowest"]]
    assert slow["type"] == "TargetPrepared" and slow["actor"] == "handler@node-2"
    assert slow["latency"] == pytest.approx(SLOW_HOP, abs=1e-6)

    text = (await cli(nats_server, stream_settings, "why", "vm/default/vm1")).stdout
    rows = [r for r in text.splitlines() if r.lstrip().startswith("#")]
    assert ["VMStopRequested" in rows[0], "VMIRemoved" in rows[-1]] == [True, True]
    assert "+510ms" in rows[2] and "+10ms" in rows[1]
    actors = ["api", "controller", "handler@node-2", "handler@node-2", "controller"]
    assert all(f" {a} " in r for a, r in zip(actors, rows, strict=True))
    assert "◀ slowest" in rows[2]  # DomainStopped took 0.5 s after the delete request

    # an older state: why was the VM Running at seq 9 (the start request's chain)
    agg = Aggregate(kind=Kind.VM, namespace="default", name="vm1")
    at9 = await causality.why(store, agg, anchor_seq=9)
    assert [h.type for h in at9.hops] == [
        "VMStartRequested",
        "VMICreated",
        "PodScheduled",
        "LauncherStarted",
        "DomainStarted",
    ]
    assert [h.actor for h in at9.hops] == [
        "api",
        "controller",
        "controller",
        "handler@node-1",
        "handler@node-1",
    ]


@pytest.mark.parametrize("linked", [True, False])
async def test_why_a_vmi_failed_names_the_silent_node(
    nats_server: NatsServer, stream_settings: StreamSettings, store: JetStreamStore, linked: bool
) -> None:
    script = node_failure(linked=linked)
    await append(store, script)
    chain = lines(await cli(nats_server, stream_settings, "why", "vmi/default/vmi2", "-o", "json"))[
        0
    ]
    hops = chain["hops"]
    assert [h["type"] for h in hops] == ["Heartbeat", "NodeUnresponsive", "VMIFailed"]
    assert hops[0]["aggregate"] == "node/node-3" and hops[0]["seq"] == 0
    assert hops[1]["link"] == ("causation" if linked else "inferred")
    assert hops[1]["latency"] == pytest.approx(50.0, abs=1e-6)  # silent for 50 s
    assert chain["hops"][chain["slowest"]]["type"] == "NodeUnresponsive"
    text = (await cli(nats_server, stream_settings, "why", "vmi/default/vmi2")).stdout
    assert "last heartbeat of node-3" in text and "NodeUnresponsive" in text


async def test_why_finds_causes_outside_the_related_aggregates(
    nats_server: NatsServer, stream_settings: StreamSettings, store: JetStreamStore
) -> None:
    """A cause on another aggregate, with an id that holds no sequence: found by the
    backwards scan."""
    s = Script()
    from events.catalog import NodeCordoned, VMStartRequested

    root = s.emit(NodeCordoned, Kind.NODE, "node-9", by="api")
    s.emit(VMStartRequested, Kind.VM, "far", by="controller", cause=root, event_id="controller/x")
    await append(store, s)
    chain = await causality.why(store, Aggregate(kind=Kind.VM, namespace="default", name="far"))
    assert [h.type for h in chain.hops] == ["NodeCordoned", "VMStartRequested"]
    assert chain.complete
