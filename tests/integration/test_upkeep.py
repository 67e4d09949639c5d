"""The upkeep service (services/upkeep/) on a real nats-server: it keeps the index and
retires ended aggregates on views it folds per aggregate (no cluster of its own); a restart
resumes both where they were, the retirement's pending work included; of two running,
one works."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable

from events import subjects
from events.catalog import (
    MigrationAbortRequested,
    MigrationFailed,
    MigrationRequested,
    NodeCordoned,
)
from events.meta import Aggregate, Kind
from eventstore import archive
from eventstore.index import Index
from eventstore.jetstream import JetStreamStore
from eventstore.lease import BUCKET as LEASES
from services.upkeep.service import UpkeepService
from tests.debug_scenario import NS, Script
from tests.integration.test_history_archive import VM1, VMI1, append_ended, mirrored


def fast(store: JetStreamStore, identity: str = "") -> UpkeepService:
    """A service whose retirer keeps no hot window and runs a round every 50 ms."""
    return UpkeepService(store, identity=identity, window=0, step=1, interval=0.05)


@contextlib.asynccontextmanager
async def running(service: UpkeepService) -> AsyncIterator[asyncio.Task[None]]:
    task = asyncio.create_task(service.run())
    try:
        yield task
    finally:
        service.stop()
        async with asyncio.timeout(10):
            await task


async def until(check: Callable[[], bool], timeout: float = 15.0) -> None:
    async with asyncio.timeout(timeout):
        while not check():  # noqa: ASYNC110  (the workers have no event for it)
            await asyncio.sleep(0.02)


async def in_hot_log(store: JetStreamStore, agg: Aggregate) -> bool:
    scope = subjects.aggregate_filter(agg.kind, agg.namespace, agg.name)
    return await archive.last_of(store.js, store.stream, scope, 0) > 0


async def test_it_indexes_and_retires_ended_aggregates_on_views_of_its_own(
    archived: JetStreamStore,
) -> None:
    store = archived
    events = await append_ended(store)
    last = await store.stream_last_seq()
    service = fast(store)
    async with running(service):
        await until(lambda: service.indexer.upto == last and service.retirer.retired == 3)
    assert not await in_hot_log(store, VM1) and not await in_hot_log(store, VMI1)
    assert await archive.read_floor(store.js, store.stream) > 0
    corr = events[2].meta.correlation_id  # the VM's creation
    assert 3 in await Index(store).seqs_of(corr)


def _migration(s: Script, name: str) -> None:
    manifest = {
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachineInstanceMigration",
        "metadata": {"name": name, "namespace": NS, "uid": f"uid-{name}"},
        "spec": {"vmiName": "vm1"},
    }
    s.emit(MigrationRequested, Kind.MIGRATION, name, by="api", manifest=manifest)


async def test_a_restart_resumes_the_index_and_the_pending_retirements(
    archived: JetStreamStore,
) -> None:
    """A migration deleted while it runs is pending until it is final. The first service
    records it with the floor and stops; the migration ends while none runs; the next
    service retires it from the recorded work (no scan finds it again: the floor passed
    its terminal event), and indexes only the events after the last indexed one."""
    store = archived
    s = Script()
    _migration(s, "mig2")
    s.emit(MigrationAbortRequested, Kind.MIGRATION, "mig2", by="api")
    s.emit(NodeCordoned, Kind.NODE, "node-1", by="api")  # the floor passes the abort
    for ev in s.events:
        await store.append(ev)
    await mirrored(store)
    first = fast(store)
    async with running(first):
        await until(lambda: first.retirer.floor >= 3 and bool(first.retirer.pending))
    recorded = await archive.read_floor_record(store.js, store.stream)
    assert [p.aggregate.name for p in recorded.pending] == ["mig2"]
    indexed = first.indexer.upto

    s.emit(MigrationFailed, Kind.MIGRATION, "mig2", by="controller", reason="aborted")
    s.emit(NodeCordoned, Kind.NODE, "node-2", by="api")
    for ev in s.events[3:]:
        await store.append(ev)
    await mirrored(store)
    mig2 = Aggregate(kind=Kind.MIGRATION, namespace=NS, name="mig2")
    assert await in_hot_log(store, mig2)
    second = fast(store)
    async with running(second):
        await until(lambda: second.retirer.retired == 1 and second.indexer.upto == 5)
    assert indexed == 3
    assert not await in_hot_log(store, mig2)
    assert (await archive.read_floor_record(store.js, store.stream)).pending == ()


async def test_of_two_running_one_works(archived: JetStreamStore) -> None:
    store = archived
    await append_ended(store)
    key = f"virt-upkeep-{store.stream}"  # a lease of this test's own
    one = fast(store, "upkeep-1")
    two = fast(store, "upkeep-2")
    one.lease.key = two.lease.key = key  # type: ignore[union-attr]
    try:
        async with running(one):
            await until(lambda: one.active)
            async with running(two):
                await asyncio.sleep(0.5)
                assert one.active and not two.active
                assert two.indexer.upto == 0 and two.retirer.retired == 0
                one.stop()  # the active one stops cleanly: the standby takes over
                await until(lambda: two.active)
    finally:
        with contextlib.suppress(Exception):
            kv = await store.js.key_value(LEASES)
            await kv.delete(key)
