"""The archive's subjects (eventstore/archive.py) on a real nats-server: a new archive
holds one subject per aggregate, and an ended VM read from it (`events` with each of its
filters, `replay`, `why`, `get --at`, the full rebuild `verify --full` folds, single
gets) gives the same events with the same subjects as the hot log gave before it was
retired; an archive made with the full subjects (by earlier code) reads the same."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from nats.js.api import StorageType, StreamConfig, StreamSource

from events import subjects
from events.codec import event_type
from events.meta import Kind
from eventstore import archive
from eventstore.jetstream import JetStreamStore
from projections.replay import event_filters
from projections.views_codec import encode_views
from readside import causality, timetravel
from tests.debug_scenario import NS, lifecycle
from tests.integration.conftest import archiving
from tests.integration.test_history_archive import (
    VM1,
    VMI1,
    append_ended,
    mirrored,
    retire_ended,
)


@pytest.fixture(params=["collapsed", "full"])
async def either(
    request: pytest.FixtureRequest, store: JetStreamStore
) -> AsyncIterator[tuple[JetStreamStore, str]]:
    """The test's stream with an archive as this code makes it, or as earlier code did:
    a mirror without the subject transform (a mirror's config cannot change)."""
    if request.param == "full":
        await store.js.add_stream(
            StreamConfig(
                name=archive.archive_name(store.stream),
                mirror=StreamSource(name=store.stream),
                storage=StorageType.MEMORY,
                allow_direct=True,
                deny_delete=True,
                deny_purge=True,
            )
        )
    async with archiving(store):
        yield store, str(request.param)


async def reads(store: JetStreamStore) -> dict[str, Any]:
    """What the debugging commands read of the scenario, each event with its subject."""

    async def replay(filters: list[str] | None, **kw: Any) -> list[tuple[int, str, str]]:
        return [
            (s.seq, s.subject, s.event.meta.event_id)
            async for s in store.replay(filters, raw=True, **kw)
        ]

    last = await store.stream_last_seq()
    gets = [await store.get(seq) for seq in range(1, last + 1)]
    return {
        "the indexer's": [  # messages, not events: the indexer parses their subjects
            (m.metadata.sequence.stream, m.subject)
            async for m in store._replay_msgs(until_seq=last)
        ],
        "events": await replay(None),
        "events --aggregate": await replay(event_filters(VM1)),
        "events --aggregate --type": await replay(event_filters(VM1, "VMStartRequested")),
        "events --type": await replay(event_filters(None, "PodScheduled")),
        "events --type --since": await replay(event_filters(None, "VMCreated"), start_seq=2),
        "a node's": await replay([subjects.node_filter(Kind.VMI, "node-1")]),
        "a handler's": await replay(
            [
                subjects.node_filter(Kind.VMI, "node-1"),
                subjects.type_filter(Kind.MIGRATION, "MigrationAbortRequested"),
            ]
        ),
        "one type of a kind, narrowly": await replay(
            [subjects.type_filter(Kind.VMI, "PodScheduled", "node-1")], until_seq=last
        ),
        "load vm": await store.load(VM1),
        "load vmi": await store.load(VMI1),
        "get": gets,
        "why": await causality.why(store, VM1),
        "replay": await timetravel.aggregate_replay(store, VM1),
        "get --at": encode_views(await timetravel.cluster_at(store, seq=15)),
        "verify --full": encode_views(await timetravel.cluster_at(store)),
    }


async def test_an_archived_vm_reads_with_its_events_subjects_from_either_archive(
    either: tuple[JetStreamStore, str],
) -> None:
    store, made = either
    events = await append_ended(store)

    full = {subjects.event_subject(e.meta.aggregate, event_type(e), e.meta.node) for e in events}
    aggregates = {
        subjects.aggregate_filter(a.kind, a.namespace, a.name)[:-1] + archive.COLLAPSED
        for a in (e.meta.aggregate for e in events)
    }
    info = await store.js.stream_info(archive.archive_name(store.stream), subjects_filter=">")
    assert set(info.state.subjects or {}) == (aggregates if made == "collapsed" else full)
    assert len(aggregates) < len(full)

    before = await reads(store)
    assert {x[1] for x in before["events"]} == full
    assert before["events --type"] and before["a node's"] and before["a handler's"]
    await retire_ended(store, lambda cluster: f"{NS}/vm1" not in cluster.vms)
    store._floor = (0.0, 0)  # read the floor now
    assert await store.floor() > 0
    hot = await store.js.stream_info(store.stream)
    assert hot.state.messages < len(events) // 3  # the VM's life is read from the archive

    after = await reads(store)
    for name, value in before.items():
        assert after[name] == value, name


async def test_the_hot_logs_narrow_reads_are_its_own_though_the_archive_answers_direct_gets(
    archived: JetStreamStore,
) -> None:
    """nats-server has a mirror that allows direct gets answer its origin's too, from its
    own copy: the archive's subjects would make a hot-log read by event type or node find
    nothing (and its lag, miss the newest events). Each read, repeated (the server picks
    one responder each time), gives what a consumer of the hot log gives."""
    store = archived
    for ev in lifecycle().events:
        await store.append(ev)
    await mirrored(store)
    assert await store.floor() == 0  # nothing retired: every read is the hot log's
    for f in (
        subjects.node_filter(Kind.VMI, "node-1"),
        subjects.type_filter(Kind.VMI, "PodScheduled"),
        subjects.aggregate_filter(Kind.VM, NS, "vm1"),
        "virt.vm.default.nobody.>",
    ):
        expected = [
            (m.metadata.sequence.stream, m.subject)
            async for m in store._stream_msgs(store.stream, [f])
        ]
        assert expected or f.endswith("nobody.>")
        for _ in range(12):
            assert [(s.seq, s.subject) async for s in store.replay([f])] == expected, f
