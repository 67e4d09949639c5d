"""The archive and the bounded hot log (eventstore/archive.py, services/upkeep/retire.py) on a real
nats-server: an ended VM's events leave the hot log, the archive keeps them, and `why`,
`replay`, `events --aggregate` (load), time travel and a full rebuild (what `verify
--full` folds) read them transparently and answer as before."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest

from events import subjects
from events.catalog import (
    Event,
    MigrationAbortRequested,
    NodeCordoned,
    VMCreated,
    VMDeleted,
    VMStartRequested,
)
from events.meta import Aggregate, Kind
from eventstore import archive, direct
from eventstore.jetstream import JetStreamStore
from projections.cluster import Cluster
from projections.views_codec import encode_views
from readside import causality, timetravel
from readside.runner import ProjectionRunner
from services.upkeep import retire
from services.upkeep.retire import ClusterViews, Retirer
from tests.debug_scenario import NS, Script, lifecycle
from tests.factories import meta, vm_manifest

VM1 = Aggregate(kind=Kind.VM, namespace=NS, name="vm1")
VMI1 = Aggregate(kind=Kind.VMI, namespace=NS, name="vm1")


async def mirrored(store: JetStreamStore) -> None:
    last = await store.stream_last_seq()
    async with asyncio.timeout(10):
        while await archive.archived_upto(store.js, store.stream) < last:  # noqa: ASYNC110
            await asyncio.sleep(0.02)


async def append_ended(store: JetStreamStore) -> list[Event]:
    """The scenario's lifecycle with its VM deleted and its migration ended, appended and
    mirrored into the archive; its events."""
    s = lifecycle()
    s.emit(VMDeleted, Kind.VM, "vm1", by="api", dt=1.0)
    s.emit(MigrationAbortRequested, Kind.MIGRATION, "mig1", by="api", dt=1.0)
    s.emit(NodeCordoned, Kind.NODE, "node-1", by="api", dt=1.0)  # the floor passes the ends
    for ev in s.events:
        await store.append(ev)
    await mirrored(store)
    return s.events


async def retire_ended(
    store: JetStreamStore, before: Callable[[Cluster], bool] = lambda cluster: True
) -> None:
    """The scenario's ended aggregates retired from the hot log by a retirer, on
    the views a projection folds (`before`: what must hold of them first)."""
    runner = ProjectionRunner(store)
    await runner.start()
    try:
        assert before(runner.cluster)
        retirer = Retirer(store, ClusterViews(lambda: runner.cluster), window=0, step=1)
        await retirer.start()
        await retirer.stop()  # its rounds are driven here
        assert await retirer.round() == 3  # the VM, its VMI's life, the migration
    finally:
        await runner.stop()


async def vm1_reads(store: JetStreamStore) -> dict[str, object]:
    """What the debugging reads say of vm1's life: the same before and after it is archived."""
    return {
        "why": await causality.why(store, VM1),
        "replay": await timetravel.aggregate_replay(store, VM1),
        "vmi": [x.seq for x in await store.load(VMI1)],
        "full": encode_views(await timetravel.cluster_at(store)),
        "at": encode_views(await timetravel.cluster_at(store, seq=15)),
        "get": await store.get(3),
    }


async def test_an_ended_vm_leaves_the_hot_log_and_is_read_from_the_archive(
    archived: JetStreamStore,
) -> None:
    store = archived
    events = await append_ended(store)
    before = await vm1_reads(store)
    await retire_ended(store, lambda cluster: "default/vm1" not in cluster.vms)  # ended
    hot = await store.js.stream_info(store.stream)
    assert hot.state.messages < len(events) // 3  # only the nodes' events are left
    assert (await store.js.stream_info(archive.archive_name(store.stream))).state.messages == len(
        events
    )
    for agg in (VM1, VMI1):
        scope = subjects.aggregate_filter(agg.kind, agg.namespace, agg.name)
        with pytest.raises(Exception):  # noqa: B017  (nats' NotFoundError)
            await store.js.get_last_msg(store.stream, scope)
    assert await store.last_seq(VM1) == 0  # a new VM of that name starts afresh
    store._floor = (0.0, 0)  # read the floor now
    assert await store.floor() > 0
    after = await vm1_reads(store)
    assert after == before


async def test_a_long_lived_aggregate_reads_whole_across_the_archive_and_the_hot_log(
    archived: JetStreamStore,
) -> None:
    """A live VM with more events than a read takes by direct gets (`direct.MOST`), part
    of them before the hot log's floor: its read starts in the archive, goes on with a
    consumer there, and ends in the hot log, each event once, as a whole-log replay has
    them."""
    store = archived
    agg = Aggregate(kind=Kind.VM, namespace=NS, name="long")
    for _ in range(direct.MOST + 20):
        await store.append(VMStartRequested(meta=meta(name="long", namespace=NS)))
    await mirrored(store)
    floor = (await store.stream_last_seq()) - 10  # the last ten are past the floor
    await archive.write_floor(store.js, store.stream, floor, store.settings)
    store._floor = (0.0, 0)  # read the floor now
    assert await store.floor() == floor
    everything = [s async for s in store.replay()]
    assert len(everything) == direct.MOST + 20
    assert await store.load(agg) == everything
    scope = [subjects.aggregate_filter(Kind.VM, NS, "long")]
    got = [s async for s in store.replay(scope, start_seq=everything[5].seq)]
    assert got == everything[5:]


async def test_a_long_way_for_the_floor_is_gone_in_moves_each_recorded_small(
    archived: JetStreamStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ended aggregates by the thousand under the floor at once (a retirer down for long)
    are taken on a move at a time, each floor record holding at most a move's: the record
    is one message, under the server's payload limit, however long the way."""
    store = archived
    monkeypatch.setattr(retire, "MOVE", 3)
    s = Script()
    for i in range(10):
        s.emit(VMCreated, Kind.VM, f"old{i}", by="api", manifest=vm_manifest(f"old{i}"))
        s.emit(VMDeleted, Kind.VM, f"old{i}", by="api")
    s.emit(NodeCordoned, Kind.NODE, "node-1", by="api", dt=1.0)  # the floor passes the ends
    for ev in s.events:
        await store.append(ev)
    await mirrored(store)
    runner = ProjectionRunner(store)
    await runner.start()
    try:
        retirer = Retirer(store, ClusterViews(lambda: runner.cluster), window=0, step=1)
        await retirer.start()
        await retirer.stop()  # its rounds are driven here
        trim = store.trimming()
        assert trim is not None
        moves = []
        while True:
            await retirer.round()
            recorded = await trim.floor()
            assert len(recorded.pending) <= 3
            moves.append(recorded.floor)
            if not retirer.behind:
                break
    finally:
        await runner.stop()
    assert len(moves) >= 4 and moves == sorted(moves)
    assert retirer.retired == 10
    assert (await store.js.stream_info(store.stream)).state.messages == 1  # the node's
