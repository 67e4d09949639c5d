"""`virtstream events --correlation ID` on a real nats-server: every event one request
caused, read through the debugging index (eventstore/index.py) up to its `upto`, from the
log after it, and from the archive for a VM retired from the hot log (services/upkeep/retire.py);
without an index, the same answer from a scan."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest
from typer.testing import CliRunner

from events.catalog import MigrationAbortRequested, NodeCordoned, VMDeleted
from events.envelope import Stored
from events.meta import Kind
from eventstore.index import Index
from eventstore.jetstream import JetStreamStore
from eventstore.port import EventLog
from eventstore.settings import StreamSettings
from ops.nats_server import NatsServer
from readside import correlation
from tests.debug_scenario import lifecycle
from tests.integration.test_debug_cli import app, append, cli, lines
from tests.integration.test_history_archive import mirrored, retire_ended
from tests.integration.test_history_index import index_all

START = [4, 5, 6, 7, 8, 9]  # VMStartRequested (req-2) and what it caused: the VM's, VMI's


async def failing(server: NatsServer, settings: StreamSettings, *args: str) -> tuple[int, str]:
    argv = [*args, "--nats-url", server.url, "--stream", settings.name]
    result = await asyncio.to_thread(CliRunner().invoke, app, argv, env={"COLUMNS": "250"})
    return result.exit_code, result.stderr


async def test_events_of_one_correlation_from_the_index_its_tail_and_the_archive(
    nats_server: NatsServer,
    stream_settings: StreamSettings,
    archived: JetStreamStore,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    store = archived
    s = lifecycle()
    s.emit(VMDeleted, Kind.VM, "vm1", by="api", dt=1.0)  # 27: vm1 and its VMI end
    s.emit(MigrationAbortRequested, Kind.MIGRATION, "mig1", by="api", dt=1.0)
    s.emit(NodeCordoned, Kind.NODE, "node-1", by="api", dt=1.0)  # 29: the floor passes them
    await append(store, s)

    scans: list[int | None] = []
    scan = correlation._scan

    async def recorded(
        store: EventLog, filters: list[str], keep: Callable[[Stored], bool], start_seq: int | None
    ) -> list[Stored]:
        scans.append(start_seq)
        return await scan(store, filters, keep, start_seq=start_seq)

    monkeypatch.setattr(correlation, "_scan", recorded)

    async def corr(cid: str, *args: str) -> list[int]:
        argv = ["events", "--correlation", cid, *args, "-o", "json"]
        out = lines(await cli(nats_server, stream_settings, *argv))
        assert {o["correlationId"] for o in out} == {cid}
        return [o["seq"] for o in out]

    # no index yet: the whole log, scanned
    assert await corr("req-2") == START
    assert scans == [None]

    await index_all(store)
    await mirrored(store)
    await retire_ended(store)
    with pytest.raises(Exception):  # noqa: B017  (nats' NotFoundError): archived only
        await store.js.get_msg(store.stream, 5)
    upto = await Index(store).upto()
    assert upto == 29
    # after the index's upto: a late reaction to the request, and another request
    s.emit(NodeCordoned, Kind.NODE, "node-2", by="controller", cause=4, dt=1.0)  # 30
    s.emit(NodeCordoned, Kind.NODE, "node-3", by="api")  # 31
    for ev in s.events[29:]:
        await store.append(ev)

    scans.clear()
    assert await corr("req-2") == [*START, 30]
    assert scans == [upto + 1]  # the index up to its upto, the log after it

    # one line each, as `events` prints them
    everything = (await cli(nats_server, stream_settings, "events")).stdout.splitlines()
    by_seq = {int(row.split()[0]): row for row in everything}
    text = (await cli(nats_server, stream_settings, "events", "--correlation", "req-2")).stdout
    assert text.splitlines() == [by_seq[n] for n in (*START, 30)]

    # the other filters narrow it, client-side
    assert await corr("req-2", "-a", "vmi/default/vm1") == [5, 7, 8, 9]
    assert await corr("req-2", "--type", "DomainStarted") == [9]
    assert await corr("req-2", "--since", "8") == [8, 9, 30]
    assert await corr("req-2", "--limit", "2") == [4, 5]
    assert await corr("req-6") == [21, 22, 23, 24, 25, 26]

    code, err = await failing(nats_server, stream_settings, "events", "--correlation", "req-404")
    assert code == 1
    assert [x for x in err.splitlines() if x.strip()] == [
        "error: no events with correlation req-404"
    ]
    code, err = await failing(
        nats_server, stream_settings, "events", "--correlation", "req-2", "--follow"
    )
    assert code != 0
    assert [x for x in err.splitlines() if x.strip()] == [
        "error: --correlation cannot be combined with --follow"
    ]
