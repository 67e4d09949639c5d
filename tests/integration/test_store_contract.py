"""The `EventLog` port's contract, run against both adapters: JetStream on a real
nats-server, and memory.

Every shared test types the store as the port: what passes here is what services may rely
on (and what lets a test run a service on the in-memory log). The JetStream-only tests at
the end cover what the server itself keeps."""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections.abc import Iterator
from pathlib import Path

import msgspec
import nats
import pytest

from events import subjects
from events.catalog import MigrationRequested, VMCreated, VMStartRequested, VMStopRequested
from events.meta import Aggregate, Kind
from eventstore import archive, direct
from eventstore.floor import PendingEnd
from eventstore.index import Indexer, stream_name
from eventstore.jetstream import JetStreamStore
from eventstore.memory import MemoryLog
from eventstore.port import ConcurrencyConflict, EventLog, Refused, Unavailable, Undecodable
from ops.nats_server import NatsServer
from tests.conftest import unique
from tests.factories import meta


@pytest.fixture(params=["jetstream", "memory"])
def log(request: pytest.FixtureRequest) -> EventLog:
    """The port, by each adapter: the test's stream on the real server, or a fresh log in
    memory."""
    if request.param == "memory":
        return MemoryLog()
    store: JetStreamStore = request.getfixturevalue("store")
    return store


async def poison(log: EventLog, name: str) -> int:
    """A message on an aggregate's subject that is no event of the catalog."""
    subject = f"virt.vm.default.{name}.VMStartRequested._"
    data = b'{"type": "Nonsense"}'
    if isinstance(log, MemoryLog):
        return log.store_raw(subject, data)
    assert isinstance(log, JetStreamStore)
    ack = await log.js.publish(subject, data, stream=log.stream)
    return int(ack.seq)


async def test_racing_writers_exactly_one_wins(log: EventLog) -> None:
    store = log
    name = unique("vm")
    first = await store.append(VMCreated(meta=meta(name=name), manifest={}), expected=0)
    racers = [
        store.append(VMStartRequested(meta=meta(name=name)), expected=first.seq),
        store.append(VMStopRequested(meta=meta(name=name)), expected=first.seq),
    ]
    results = await asyncio.gather(*racers, return_exceptions=True)
    wins = [r for r in results if not isinstance(r, BaseException)]
    losses = [r for r in results if isinstance(r, ConcurrencyConflict)]
    assert len(wins) == 1 and len(losses) == 1
    assert losses[0].expected == first.seq
    assert losses[0].actual == wins[0].seq
    agg = Aggregate(kind=Kind.VM, namespace="default", name=name)
    assert len(await store.load(agg)) == 2


async def test_create_only_append_fails_when_aggregate_exists(log: EventLog) -> None:
    store = log
    name = unique("vm")
    await store.append(VMCreated(meta=meta(name=name), manifest={}), expected=0)
    with pytest.raises(ConcurrencyConflict) as err:
        await store.append(VMCreated(meta=meta(name=name), manifest={}), expected=0)
    assert err.value.expected == 0 and err.value.actual > 0


async def test_duplicate_append_is_dropped(log: EventLog) -> None:
    store = log
    name = unique("vm")
    ev = VMStartRequested(meta=meta(name=name, event_id="fixed-id"))
    a = await store.append(ev)
    b = await store.append(ev)
    assert not a.duplicate and b.duplicate and a.seq == b.seq
    agg = Aggregate(kind=Kind.VM, namespace="default", name=name)
    assert [s.seq for s in await store.load(agg)] == [a.seq]


async def test_reappend_with_stale_expectation_is_a_duplicate_not_a_conflict(
    log: EventLog,
) -> None:
    """A service that crashed after appending re-appends with the version it had then."""
    store = log
    name = unique("vm")
    created = await store.append(VMCreated(meta=meta(name=name), manifest={}), expected=0)
    ev = VMStartRequested(meta=meta(name=name, event_id="once"))
    a = await store.append(ev, expected=created.seq)
    b = await store.append(ev, expected=created.seq)
    assert b.duplicate and b.seq == a.seq


async def test_load_reads_only_one_aggregate(log: EventLog) -> None:
    store = log
    a, b = unique("vm"), unique("vm")
    for i in range(3):
        await store.append(VMStartRequested(meta=meta(name=a)))
        await store.append(VMStartRequested(meta=meta(name=b, namespace=f"ns{i}")))
    got = await store.load(Aggregate(kind=Kind.VM, namespace="default", name=a))
    assert len(got) == 3 and all(s.event.meta.aggregate.name == a for s in got)
    assert await store.load(Aggregate(kind=Kind.VM, namespace="default", name="none")) == []
    assert await store.last_seq(Aggregate(kind=Kind.VM, namespace="default", name=a)) == got[-1].seq


async def test_replay_from_sequence_and_from_time(log: EventLog) -> None:
    store = log
    name = unique("vm")
    seqs = []
    for _ in range(5):
        seqs.append((await store.append(VMStartRequested(meta=meta(name=name)))).seq)
    await asyncio.sleep(0.05)
    cut = time.time()
    await asyncio.sleep(0.05)
    for _ in range(3):
        seqs.append((await store.append(VMStopRequested(meta=meta(name=name)))).seq)

    from_seq = [s.seq async for s in store.replay(start_seq=seqs[2])]
    assert from_seq == seqs[2:]
    from_time = [s async for s in store.replay(start_time=cut)]
    assert [s.seq for s in from_time] == seqs[5:]
    assert all(isinstance(s.event, VMStopRequested) for s in from_time)
    until = [s.seq async for s in store.replay(start_seq=seqs[1], until_seq=seqs[3])]
    assert until == seqs[1:4]
    assert [s.seq async for s in store.replay(start_seq=seqs[-1] + 1)] == []


async def test_get_and_time_lookup(log: EventLog) -> None:
    name = unique("vm")
    first = await log.append(VMStartRequested(meta=meta(name=name)))
    got = await log.get(first.seq)
    assert got is not None and got.seq == first.seq and got.event.meta.aggregate.name == name
    assert await log.get(first.seq + 1000) is None
    bad = await poison(log, name)
    assert await log.get(bad) is None  # undecodable reads as absent
    await asyncio.sleep(0.05)
    cut = time.time()
    await asyncio.sleep(0.05)
    later = await log.append(VMStopRequested(meta=meta(name=name)))
    assert await log.seq_at_time(cut) == bad  # the last one stored at or before the time
    assert await log.seq_at_time(time.time() + 60) == later.seq == await log.stream_last_seq()


async def test_poison_is_skipped_on_request_and_reported_otherwise(log: EventLog) -> None:
    name = unique("vm")
    a = await log.append(VMStartRequested(meta=meta(name=name)))
    await poison(log, name)
    b = await log.append(VMStopRequested(meta=meta(name=name)))
    assert [s.seq async for s in log.replay(raw=True)] == [a.seq, b.seq]
    with pytest.raises(Undecodable):
        _ = [s async for s in log.replay()]
    agg = Aggregate(kind=Kind.VM, namespace="default", name=name)
    assert [s.seq for s in await log.load(agg)] == [a.seq, b.seq]
    # an OCC append whose expectation is stale looks for its own id past the poison
    ev = VMStartRequested(meta=meta(name=name, event_id="after-poison"))
    c = await log.append(ev, expected=b.seq)
    assert (await log.append(ev, expected=b.seq)).seq == c.seq


async def test_records_are_the_stored_bytes_in_order_with_what_follows(log: EventLog) -> None:
    """What a copier of the log (the index) reads: every message, poison included, as
    stored, and how many follow it."""
    name = unique("vm")
    a = await log.append(VMStartRequested(meta=meta(name=name)))
    bad = await poison(log, name)
    b = await log.append(VMStopRequested(meta=meta(name=name)))
    got = [r async for r in log.records(start_seq=a.seq)]
    assert [r.seq for r in got] == [a.seq, bad, b.seq]
    assert [r.pending for r in got] == [2, 1, 0]
    assert got[1].data == b'{"type": "Nonsense"}' and got[1].subject.startswith("virt.vm.")
    assert msgspec.json.decode(got[2].data)["type"] == "VMStopRequested"
    followed = log.records(start_seq=b.seq + 1, follow=True)
    later = asyncio.ensure_future(anext(aiter(followed)))
    c = await log.append(VMStartRequested(meta=meta(name=name)))
    record = await asyncio.wait_for(later, 5)
    assert record.seq == c.seq and record.pending == 0
    await followed.aclose()  # type: ignore[attr-defined]


async def test_durable_consumer_redelivers_until_acked(log: EventLog) -> None:
    name = unique("vm")
    a = await log.append(VMStartRequested(meta=meta(name=name)))
    bad = await poison(log, name)
    durable = unique("durable")
    consumer = await log.durable(durable, [f"virt.vm.default.{name}.>"], ack_wait=1.0, batch=8)
    got = await consumer.fetch(timeout=2.0)
    assert got[0].seq == a.seq and got[0].decode().event.meta.aggregate.name == name
    await got[0].ack()
    if len(got) == 1:
        got += await consumer.fetch(timeout=2.0)
    assert got[1].seq == bad
    with pytest.raises(Undecodable):
        got[1].decode()
    # not acked: delivered again after ack_wait, also to a consumer bound anew (a restart)
    await consumer.close()
    again = await log.durable(durable, [f"virt.vm.default.{name}.>"], ack_wait=1.0, batch=8)
    redelivered = await again.fetch(timeout=3.0)
    assert [d.seq for d in redelivered] == [bad]
    dl = await log.dead_letter("contract", redelivered[0], "undecodable")
    assert dl > 0
    await redelivered[0].ack()
    with pytest.raises(TimeoutError):
        await again.fetch(timeout=1.5)
    await again.close()


async def test_buckets_keep_the_latest_value_per_key(log: EventLog) -> None:
    name = unique("bucket")
    assert await log.bucket(name, create=False) is None
    made = await log.bucket(name, description="a test's")
    assert made is not None
    assert await made.get("k") is None
    assert await made.keys() == []
    await made.put("k", b"one")
    await made.put("k", b"two")
    await made.put("a", b"other")
    found = await log.bucket(name, create=False)
    assert found is not None and await found.get("k") == b"two"
    assert await found.keys() == ["a", "k"]
    await found.purge("k")
    await found.purge("never-there")
    assert await made.get("k") is None
    assert await made.keys() == ["a"]


async def test_an_unreachable_log_raises_the_ports_error(
    log: EventLog, request: pytest.FixtureRequest
) -> None:
    """Not the client's: `Unavailable`, which an append's caller retries with the same id."""
    away: EventLog
    if isinstance(log, MemoryLog):
        log.connected = False
        away = log
    else:
        assert isinstance(log, JetStreamStore)
        server: NatsServer = request.getfixturevalue("nats_server")
        nc = await nats.connect(server.url)
        away = JetStreamStore(nc, log.settings)
        await nc.close()
    assert not away.connected
    with pytest.raises(Unavailable):
        await away.append(VMStartRequested(meta=meta(name=unique("vm"))))
    with pytest.raises(Unavailable):
        await away.stream_last_seq()
    with pytest.raises(Unavailable):
        _ = [s async for s in away.replay()]
    with pytest.raises(Unavailable):
        _ = [r async for r in away.records()]
    index = away.index()
    if index is not None:  # its lookups are the port's too
        with pytest.raises(Unavailable):
            await index.seqs_of("a-correlation")
        with pytest.raises(Unavailable):
            await index.upto()


async def test_trimming_lets_an_ended_aggregate_leave_the_hot_log_alone(log: EventLog) -> None:
    """The hot log's upkeep (`Trimming`): the floor and its pending work recorded, an
    ended aggregate retired from the hot log, and every reader still reading it (the
    archive); nothing a durable consumer has not acked is under its ack floor."""
    trim = log.trimming()
    assert trim is not None
    if isinstance(log, JetStreamStore):
        await archive.ensure(log.js, log.stream, storage="memory")
    gone, kept = unique("vm"), unique("vm")
    first = await log.append(VMCreated(meta=meta(name=gone), manifest={}))
    end = await log.append(VMStopRequested(meta=meta(name=gone)))
    other = await log.append(VMCreated(meta=meta(name=kept), manifest={}))
    async with asyncio.timeout(10):
        while await trim.archived_upto() < other.seq:  # noqa: ASYNC110
            await asyncio.sleep(0.02)
    assert await trim.trimmable()
    assert (await trim.floor()).floor == 0
    assert await trim.acked_floor() == 2**63  # no durable consumer
    agg = Aggregate(kind=Kind.VM, namespace="default", name=gone)
    pending = PendingEnd.of(agg, end.seq)
    await trim.record_floor(other.seq, [pending])
    recorded = await trim.floor()
    assert (recorded.floor, recorded.pending) == (other.seq, (pending,))
    scope = subjects.aggregate_filter(Kind.VM, "default", gone)
    assert await trim.last_of(scope, 0) == end.seq
    await trim.retire(scope, end.seq)
    assert await trim.last_of(scope, 0) == 0 and await trim.last_of(scope, 7) == 7
    kept_scope = subjects.aggregate_filter(Kind.VM, "default", kept)
    assert await trim.last_of(kept_scope, 0) == other.seq
    assert [s.seq for s in await log.load(agg)] == [first.seq, end.seq]  # read on
    consumer = await log.durable(unique("c"), [kept_scope], ack_wait=5.0, batch=10)
    for delivery in await consumer.fetch(5.0):
        await delivery.ack()
    async with asyncio.timeout(5):
        while await trim.acked_floor() != other.seq:  # noqa: ASYNC110
            await asyncio.sleep(0.02)
    if isinstance(log, JetStreamStore):  # the server is the session's: the mirror goes too
        await log.js.delete_stream(archive.archive_name(log.stream))


# ------------------------------------------------------------- JetStream only
async def test_a_refusal_of_the_server_is_the_ports_error(store: JetStreamStore) -> None:
    gone = JetStreamStore(
        store.nc, msgspec.structs.replace(store.settings, name=f"{store.stream}_NONE")
    )
    with pytest.raises(Refused):
        await gone.stream_last_seq()
    with pytest.raises(Refused):
        await gone.durable(unique("durable"), ["virt.>"], ack_wait=1.0, batch=1)


async def test_history_cannot_be_deleted_or_purged(store: JetStreamStore) -> None:
    """JetStream-specific: the event stream refuses message deletes; its archive (where
    the history lives once ended aggregates leave the hot log) refuses deletes and purges;
    a stream without an archive refuses purges too."""
    from nats.js.errors import APIError

    from eventstore import archive

    name = unique("vm")
    a = await store.append(VMStartRequested(meta=meta(name=name)))
    mirror = await archive.ensure(store.js, store.stream, storage="memory")
    try:
        for stream in (store.stream, mirror):
            with pytest.raises(APIError):
                await store.js.delete_msg(stream, a.seq)
        with pytest.raises(APIError):
            await store.js.purge_stream(mirror)
    finally:
        await store.js.delete_stream(mirror)
    alone = JetStreamStore(
        store.nc,
        msgspec.structs.replace(
            store.settings,
            name=f"{store.stream}_ALONE",
            dlq_name=f"{store.stream}_ALONE_DLQ",
            archive=False,
        ),
    )
    for stream in (store.stream, store.settings.dlq_name):  # one stream per subject space
        await store.js.delete_stream(stream)
    await alone.ensure()
    try:
        b = await alone.append(VMStartRequested(meta=meta(name=name)))
        with pytest.raises(APIError):
            await store.js.purge_stream(alone.stream)
        assert (await alone.get(b.seq)) is not None
    finally:
        for stream in (alone.stream, alone.settings.dlq_name):
            await store.js.delete_stream(stream)


async def test_an_older_stream_gets_the_protections(store: JetStreamStore) -> None:
    from nats.js.api import StreamConfig

    legacy = JetStreamStore(
        store.nc,
        msgspec.structs.replace(
            store.settings, name=f"{store.stream}_OLD", dlq_name=f"{store.stream}_OLD_DLQ"
        ),
    )
    await store.js.add_stream(StreamConfig(name=legacy.stream, subjects=["old.>"]))
    try:
        await legacy._ensure_stream(
            StreamConfig(name=legacy.stream, subjects=["old.>"], deny_delete=True, deny_purge=True)
        )
        cfg = (await store.js.stream_info(legacy.stream)).config
        assert cfg.deny_delete and cfg.deny_purge
    finally:
        await store.js.delete_stream(legacy.stream)


def test_the_servers_files_are_the_owners_alone(nats_server: NatsServer) -> None:
    """The embedded server fsyncs every write and keeps its store and log private."""
    assert 'sync_interval: "always"' in nats_server.config()
    store_dir = nats_server.store_dir
    assert store_dir.stat().st_mode & 0o077 == 0
    modes = dict(_file_modes(store_dir))
    assert modes and all(mode & 0o077 == 0 for mode in modes.values()), [
        (path, oct(mode)) for path, mode in modes.items() if mode & 0o077
    ]


def _file_modes(top: Path) -> Iterator[tuple[str, int]]:
    """Every file's mode; a stream an earlier test deleted may vanish during the walk."""
    for root, _dirs, names in os.walk(top):
        for name in names:
            with contextlib.suppress(FileNotFoundError):
                yield os.path.join(root, name), os.stat(os.path.join(root, name)).st_mode


async def test_the_index_a_log_offers_answers_only_what_it_can_tell(log: EventLog) -> None:
    """The debugging index is a capability of the port, kept by both adapters (JetStream's
    by the upkeep's `Indexer`): it answers nothing for what it never indexed, and finds a
    correlation's events and the migrations that named a VMI once it covers them."""
    index = log.index()
    assert index is not None
    assert await index.seq_of(unique("never-appended")) is None
    vmi = unique("vmi")
    assert await index.migrations_of("default", vmi) == []
    cid = unique("req")
    mig = unique("mig")
    manifest = {"metadata": {"name": mig}, "spec": {"vmiName": vmi}}
    asked = await log.append(
        MigrationRequested(meta=meta(Kind.MIGRATION, mig, correlation_id=cid), manifest=manifest)
    )
    started = await log.append(VMStartRequested(meta=meta(name=vmi, correlation_id=cid)))
    indexer = Indexer(log) if isinstance(log, JetStreamStore) else None
    if indexer is not None:
        await indexer.start()
    try:
        async with asyncio.timeout(10):
            while await index.upto() < started.seq:
                index = log.index()  # a JetStream index reads its coverage once
                assert index is not None
                await asyncio.sleep(0.05)
        assert await index.seqs_of(cid) == [asked.seq, started.seq]
        assert await index.migrations_of("default", vmi) == [mig]
    finally:
        if indexer is not None:
            await indexer.stop()
            # the index stream takes `vidx.>` on the session's server: it goes with the test
            assert isinstance(log, JetStreamStore)
            await log.js.delete_stream(stream_name(log.stream))


async def test_an_aggregates_read_is_what_a_whole_log_replay_holds_of_it(log: EventLog) -> None:
    """One aggregate's read (few events: direct gets on JetStream; many: a consumer goes
    on past `direct.MOST`) holds exactly what a replay of the whole log holds of it: the
    same events, sequences, subjects and times, in order, from a point and up to one."""
    store = log
    few, many = unique("vm"), unique("vm")
    for i in range(direct.MOST + 40):
        await store.append(VMStartRequested(meta=meta(name=many)))
        if i % 100 == 0:
            await store.append(VMStartRequested(meta=meta(name=few)))
    everything = [s async for s in store.replay()]
    for name in (few, many):
        agg = Aggregate(kind=Kind.VM, namespace="default", name=name)
        mine = [s for s in everything if s.event.meta.aggregate.name == name]
        assert await store.load(agg) == mine
        scope = [f"virt.vm.default.{name}.>"]
        start, until = mine[1].seq, mine[-2].seq
        got = [s async for s in store.replay(scope, start_seq=start, until_seq=until)]
        assert got == mine[1:-1]
