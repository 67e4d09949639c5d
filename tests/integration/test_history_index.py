"""The debugging indexes (eventstore/index.py) on a real nats-server: correlation id →
sequences, a VMI's migrations; `why`, `replay` and one object's `get --at` read through
them and answer as the full reads did. No event id → sequence entries are written (an
effect carries its cause's sequence, and `why` follows that, into the archive too); an
older index's id entries are still read for events written before that."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import pytest

from events.catalog import (
    Event,
    MigrationAbortRequested,
    MigrationRequested,
    NodeCordoned,
    VMDeleted,
    VMStartRequested,
)
from events.envelope import seq_hint
from events.meta import Aggregate, Kind
from eventstore import archive
from eventstore.index import (
    PREFIX,
    Index,
    Indexer,
    ensure,
    entry_headers,
    id_subject,
    stream_name,
)
from eventstore.jetstream import JetStreamStore
from projections.replay import related_filters, render_object, replay_steps
from readside import causality, timetravel
from tests.debug_scenario import NS, Script, lifecycle
from tests.integration.test_history_archive import mirrored, retire_ended

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


async def id_entries(store: JetStreamStore) -> dict[str, int]:
    """The index's `vidx.id.*` subjects and their counts."""
    info = await store.js.stream_info(stream_name(store.stream), subjects_filter=f"{PREFIX}.id.>")
    return dict(info.state.subjects or {})


async def index_as_before(store: JetStreamStore, events: list[Event]) -> None:
    """The id entries an index written by earlier code holds: event id → sequence for
    every id that names no cause sequence, as its indexer wrote them (the event's entry
    0, before its correlation entry)."""
    name = await ensure(store)
    for seq, ev in enumerate(events, 1):
        if seq_hint(ev.meta.event_id) is None:
            subject, headers = id_subject(ev.meta.event_id), entry_headers(seq, 0)
            await store.js.publish(subject, b"", stream=name, headers=headers)


def no_scan(monkeypatch: pytest.MonkeyPatch) -> None:
    async def scan(*_: object) -> None:
        raise AssertionError("scanned the stream")

    monkeypatch.setattr(causality.EventIndex, "_scan", scan)


def no_lookup_but_by_sequence(monkeypatch: pytest.MonkeyPatch) -> None:
    """`why` may find a cause only among what it read and by the sequence the effect
    carries: no index of ids, no scan."""

    async def indexed(*_: object) -> None:
        raise AssertionError("looked an id up in the index")

    no_scan(monkeypatch)
    monkeypatch.setattr(causality.EventIndex, "_indexed", indexed)


def other_vmis_migration(s: Script, name: str, vmi: str) -> None:
    manifest = {
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachineInstanceMigration",
        "metadata": {"name": name, "namespace": NS, "uid": f"uid-{name}"},
        "spec": {"vmiName": vmi},
    }
    s.emit(MigrationRequested, Kind.MIGRATION, name, by="api", manifest=manifest)


async def test_the_index_answers_correlations_and_a_vmis_migrations_and_keeps_no_ids(
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
    assert await id_entries(store) == {}  # an effect names its cause's sequence itself
    for ev in s.events:
        assert await index.seq_of(ev.meta.event_id) is None
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


async def test_why_follows_keyed_effects_to_their_causes_by_sequence_into_the_archive(
    archived: JetStreamStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A chain of effects whose ids name no sequence (keyed, as the controller's are),
    through aggregates `why` does not read, the oldest cause retired to the archive: each
    cause is one get by the sequence its effect carries."""
    store = archived
    s = lifecycle()
    gone = s.emit(VMDeleted, Kind.VM, "vm1", by="api", dt=1.0)  # the root: an api request
    s.emit(MigrationAbortRequested, Kind.MIGRATION, "mig1", by="api", dt=1.0)
    cordon = s.emit(
        NodeCordoned,
        Kind.NODE,
        "node-1",
        by="virt-controller",
        cause=gone,
        event_id="virt-controller/cordon/node-1/1",
        dt=1.0,
    )  # the floor passes the ends
    started = s.emit(
        VMStartRequested,
        Kind.VM,
        "far",
        by="virt-controller",
        cause=cordon,
        event_id="virt-controller/start/far/1",
    )
    for ev in s.events:
        await store.append(ev)
    await mirrored(store)
    await retire_ended(store, lambda cluster: "default/vm1" not in cluster.vms)
    store._floor = (0.0, 0)  # read the floor now
    assert await store.floor() > gone
    with pytest.raises(Exception):  # noqa: B017  (nats' NotFoundError): only in the archive
        await store.js.get_msg(store.stream, gone)
    await store.js.get_msg(archive.archive_name(store.stream), gone)
    await index_all(store)
    assert await id_entries(store) == {}

    no_lookup_but_by_sequence(monkeypatch)
    chain = await causality.why(store, Aggregate(kind=Kind.VM, namespace=NS, name="far"))
    assert [(h.seq, h.type, h.link) for h in chain.hops] == [
        (gone, "VMDeleted", "causation"),
        (cordon, "NodeCordoned", "causation"),
        (started, "VMStartRequested", "anchor"),
    ]
    assert chain.complete and not chain.missing


async def test_why_follows_an_event_written_before_cause_sequences_by_an_older_index(
    indexed: JetStreamStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A log written and indexed by earlier code: its effects carry no cause sequence and
    its index holds id entries, which `why` still reads (no scan)."""
    store = indexed
    s = Script(causation_seqs=False)
    root = s.emit(NodeCordoned, Kind.NODE, "node-9", by="api")
    s.emit(VMStartRequested, Kind.VM, "far", by="controller", cause=root, event_id="controller/x")
    assert not any(ev.meta.causation_seq for ev in s.events)
    for ev in s.events:
        await store.append(ev)
    await index_as_before(store, s.events)
    assert await Index(store).seq_of("controller/x") == 2
    assert await Index(store).seq_of(s.events[0].meta.event_id) == 1

    no_scan(monkeypatch)
    chain = await causality.why(store, Aggregate(kind=Kind.VM, namespace=NS, name="far"))
    assert [h.type for h in chain.hops] == ["NodeCordoned", "VMStartRequested"]
    assert chain.complete
