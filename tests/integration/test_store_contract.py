"""The `EventLog` port's contract, against its JetStream adapter on a real nats-server.

Every test types the store as the port: what passes here is what services may rely on."""

from __future__ import annotations

import asyncio
import time

import msgspec
import pytest

from events.catalog import VMCreated, VMStartRequested, VMStopRequested
from events.envelope import ConcurrencyConflict, Undecodable
from events.meta import Aggregate, Kind
from eventstore.jetstream import JetStreamStore
from eventstore.port import EventLog
from ops.nats_server import NatsServer
from tests.conftest import unique
from tests.factories import meta


async def test_racing_writers_exactly_one_wins(store: EventLog) -> None:
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


async def test_create_only_append_fails_when_aggregate_exists(store: EventLog) -> None:
    name = unique("vm")
    await store.append(VMCreated(meta=meta(name=name), manifest={}), expected=0)
    with pytest.raises(ConcurrencyConflict) as err:
        await store.append(VMCreated(meta=meta(name=name), manifest={}), expected=0)
    assert err.value.expected == 0 and err.value.actual > 0


async def test_duplicate_append_is_dropped(store: EventLog) -> None:
    name = unique("vm")
    ev = VMStartRequested(meta=meta(name=name, event_id="fixed-id"))
    a = await store.append(ev)
    b = await store.append(ev)
    assert not a.duplicate and b.duplicate and a.seq == b.seq
    agg = Aggregate(kind=Kind.VM, namespace="default", name=name)
    assert [s.seq for s in await store.load(agg)] == [a.seq]


async def test_reappend_with_stale_expectation_is_a_duplicate_not_a_conflict(
    store: EventLog,
) -> None:
    """A service that crashed after appending re-appends with the version it had then."""
    name = unique("vm")
    created = await store.append(VMCreated(meta=meta(name=name), manifest={}), expected=0)
    ev = VMStartRequested(meta=meta(name=name, event_id="once"))
    a = await store.append(ev, expected=created.seq)
    b = await store.append(ev, expected=created.seq)
    assert b.duplicate and b.seq == a.seq


async def test_load_reads_only_one_aggregate(store: EventLog) -> None:
    a, b = unique("vm"), unique("vm")
    for i in range(3):
        await store.append(VMStartRequested(meta=meta(name=a)))
        await store.append(VMStartRequested(meta=meta(name=b, namespace=f"ns{i}")))
    got = await store.load(Aggregate(kind=Kind.VM, namespace="default", name=a))
    assert len(got) == 3 and all(s.event.meta.aggregate.name == a for s in got)
    assert await store.load(Aggregate(kind=Kind.VM, namespace="default", name="none")) == []
    assert await store.last_seq(Aggregate(kind=Kind.VM, namespace="default", name=a)) == got[-1].seq


async def test_replay_from_sequence_and_from_time(store: EventLog) -> None:
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


async def poison(store: JetStreamStore, name: str) -> int:
    """A message on an aggregate's subject that is no event of the catalog."""
    ack = await store.js.publish(
        f"virt.vm.default.{name}.VMStartRequested._", b'{"type": "Nonsense"}', stream=store.stream
    )
    return int(ack.seq)


async def test_get_and_time_lookup(store: JetStreamStore) -> None:
    log: EventLog = store
    name = unique("vm")
    first = await log.append(VMStartRequested(meta=meta(name=name)))
    got = await log.get(first.seq)
    assert got is not None and got.seq == first.seq and got.event.meta.aggregate.name == name
    assert await log.get(first.seq + 1000) is None
    bad = await poison(store, name)
    assert await log.get(bad) is None  # undecodable reads as absent
    await asyncio.sleep(0.05)
    cut = time.time()
    await asyncio.sleep(0.05)
    later = await log.append(VMStopRequested(meta=meta(name=name)))
    assert await log.seq_at_time(cut) == bad  # the last one stored at or before the time
    assert await log.seq_at_time(time.time() + 60) == later.seq == await log.stream_last_seq()


async def test_poison_is_skipped_on_request_and_reported_otherwise(store: JetStreamStore) -> None:
    log: EventLog = store
    name = unique("vm")
    a = await log.append(VMStartRequested(meta=meta(name=name)))
    await poison(store, name)
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


async def test_durable_consumer_redelivers_until_acked(store: JetStreamStore) -> None:
    log: EventLog = store
    name = unique("vm")
    a = await log.append(VMStartRequested(meta=meta(name=name)))
    bad = await poison(store, name)
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
    files = [p for p in store_dir.rglob("*") if p.is_file()]
    assert files and all(p.stat().st_mode & 0o077 == 0 for p in files), [
        (str(p), oct(p.stat().st_mode)) for p in files if p.stat().st_mode & 0o077
    ]
