"""The event store against a real nats-server."""

from __future__ import annotations

import asyncio
import time

import pytest

from events.catalog import VMCreated, VMStartRequested, VMStopRequested
from events.envelope import ConcurrencyConflict
from events.meta import Aggregate, Kind
from eventstore.jetstream import JetStreamStore
from tests.conftest import unique
from tests.factories import meta


async def test_racing_writers_exactly_one_wins(store: JetStreamStore) -> None:
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


async def test_create_only_append_fails_when_aggregate_exists(store: JetStreamStore) -> None:
    name = unique("vm")
    await store.append(VMCreated(meta=meta(name=name), manifest={}), expected=0)
    with pytest.raises(ConcurrencyConflict) as err:
        await store.append(VMCreated(meta=meta(name=name), manifest={}), expected=0)
    assert err.value.expected == 0 and err.value.actual > 0


async def test_duplicate_append_is_dropped(store: JetStreamStore) -> None:
    name = unique("vm")
    ev = VMStartRequested(meta=meta(name=name, event_id="fixed-id"))
    a = await store.append(ev)
    b = await store.append(ev)
    assert not a.duplicate and b.duplicate and a.seq == b.seq
    agg = Aggregate(kind=Kind.VM, namespace="default", name=name)
    assert [s.seq for s in await store.load(agg)] == [a.seq]


async def test_reappend_with_stale_expectation_is_a_duplicate_not_a_conflict(
    store: JetStreamStore,
) -> None:
    """A service that crashed after appending re-appends with the version it had then."""
    name = unique("vm")
    created = await store.append(VMCreated(meta=meta(name=name), manifest={}), expected=0)
    ev = VMStartRequested(meta=meta(name=name, event_id="once"))
    a = await store.append(ev, expected=created.seq)
    b = await store.append(ev, expected=created.seq)
    assert b.duplicate and b.seq == a.seq


async def test_load_reads_only_one_aggregate(store: JetStreamStore) -> None:
    a, b = unique("vm"), unique("vm")
    for i in range(3):
        await store.append(VMStartRequested(meta=meta(name=a)))
        await store.append(VMStartRequested(meta=meta(name=b, namespace=f"ns{i}")))
    got = await store.load(Aggregate(kind=Kind.VM, namespace="default", name=a))
    assert len(got) == 3 and all(s.event.meta.aggregate.name == a for s in got)
    assert await store.load(Aggregate(kind=Kind.VM, namespace="default", name="none")) == []
    assert await store.last_seq(Aggregate(kind=Kind.VM, namespace="default", name=a)) == got[-1].seq


async def test_replay_from_sequence_and_from_time(store: JetStreamStore) -> None:
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
