"""The debugging indexes (eventstore/index.py) on a real nats-server: event id → sequence,
correlation id → sequences, a VMI's migrations; `why`, `replay` and one object's
`get --at` read through them and answer as the full reads did."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import pytest

from events.catalog import MigrationRequested, NodeCordoned, VMStartRequested
from events.envelope import seq_hint
from events.meta import Aggregate, Kind
from eventstore.index import Index, Indexer, stream_name
from eventstore.jetstream import JetStreamStore
from projections.replay import related_filters, render_object, replay_steps
from readside import causality, timetravel
from tests.debug_scenario import NS, Script, lifecycle

VM1 = Aggregate(kind=Kind.VM, namespace=NS, name="vm1")


@pytest.fixture
async def indexed(store: JetStreamStore) -> AsyncIterator[JetStreamStore]:
    yield store
    with contextlib.suppress(Exception):
        await store.js.delete_stream(stream_name(store.stream))


async def index_all(store: JetStreamStore) -> None:
    indexer = Indexer(store)
    await indexer.start()
    last = await store.stream_last_seq()
    try:
        async with asyncio.timeout(20):
            while indexer.upto < last:  # noqa: ASYNC110  (the indexer has no event for it)
                await asyncio.sleep(0.02)
    finally:
        await indexer.stop()


def other_vmis_migration(s: Script, name: str, vmi: str) -> None:
    manifest = {
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachineInstanceMigration",
        "metadata": {"name": name, "namespace": NS, "uid": f"uid-{name}"},
        "spec": {"vmiName": vmi},
    }
    s.emit(MigrationRequested, Kind.MIGRATION, name, by="api", manifest=manifest)


async def test_the_index_answers_ids_correlations_and_a_vmis_migrations(
    indexed: JetStreamStore,
) -> None:
    store = indexed
    s = lifecycle()
    for i in range(5):
        other_vmis_migration(s, f"other-{i}", f"vm-other-{i}")
    for ev in s.events:
        await store.append(ev)
    await index_all(store)
    index = Index(store)
    assert await index.upto() == len(s.events)
    for seq, ev in enumerate(s.events, 1):
        if seq_hint(ev.meta.event_id) is None:  # the others name their cause
            assert await index.seq_of(ev.meta.event_id) == seq
    by_corr: dict[str, list[int]] = {}
    for seq, ev in enumerate(s.events, 1):
        by_corr.setdefault(ev.meta.correlation_id, []).append(seq)
    for corr, seqs in by_corr.items():
        assert await index.seqs_of(corr) == seqs
    assert await index.migrations_of(NS, "vm1") == ["mig1"]
    assert await index.migrations_of(NS, "vm-other-3") == ["other-3"]
    assert await index.seq_of("nothing/1/0") is None

    # replay and get --at of one object: as from every migration of the namespace
    everything = await timetravel.read(store, related_filters(VM1))
    related = await timetravel.related(store, VM1)
    assert len(related) < len(everything)  # the other VMIs' migrations are not read
    assert [(st.stored.seq, st.changes) for st in replay_steps(related, VM1)] == [
        (st.stored.seq, st.changes) for st in replay_steps(everything, VM1)
    ]
    for seq in range(0, len(s.events) + 1):
        one = await timetravel.object_at(store, VM1, seq)
        full = await timetravel.cluster_at(store, seq=seq)
        for kind, k in ((Kind.VM, "default/vm1"), (Kind.VMI, "default/vm1")):
            assert render_object(one, kind, k, 1e9) == render_object(full, kind, k, 1e9), seq

    # events the index has not covered yet are read as before
    later = Script(t0=s.t + 10)
    manifest = {
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachineInstanceMigration",
        "metadata": {"name": "mig-late", "namespace": NS, "uid": "uid-late"},
        "spec": {"vmiName": "vm1"},
    }
    later.emit(
        MigrationRequested, Kind.MIGRATION, "mig-late", by="api", manifest=manifest, event_id="late"
    )
    await store.append(later.events[0])
    related = await timetravel.related(store, VM1)
    assert related[-1].event.meta.aggregate.name == "mig-late"


async def test_why_follows_a_cause_outside_the_related_aggregates_by_the_index(
    indexed: JetStreamStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = indexed
    s = Script()
    root = s.emit(NodeCordoned, Kind.NODE, "node-9", by="api")
    s.emit(VMStartRequested, Kind.VM, "far", by="controller", cause=root, event_id="controller/x")
    for ev in s.events:
        await store.append(ev)
    await index_all(store)

    async def no_scan(*_: object) -> None:
        raise AssertionError("scanned the stream")

    monkeypatch.setattr(causality.EventIndex, "_scan", no_scan)
    chain = await causality.why(store, Aggregate(kind=Kind.VM, namespace=NS, name="far"))
    assert [h.type for h in chain.hops] == ["NodeCordoned", "VMStartRequested"]
    assert chain.complete
