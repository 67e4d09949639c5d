"""Snapshots: snapshot + tail equals a full rebuild (50,000 events), chunked KV values."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

import pytest
from nats.aio.client import Client as NATS

from bench.bench_replay import fill
from eventstore import checkpoints
from eventstore.jetstream import JetStreamStore
from projections.cluster import Cluster
from readside import timetravel, view_checkpoints
from tests.conftest import unique
from tests.debug_scenario import lifecycle


@pytest.fixture
async def bucket(nc: NATS) -> AsyncIterator[str]:
    name = unique("snap")
    yield name
    with contextlib.suppress(Exception):
        await nc.jetstream().delete_key_value(name)


async def full_rebuild(store: JetStreamStore, until: int | None = None) -> Cluster:
    return await timetravel.cluster_at(store, seq=until)


async def test_snapshot_plus_tail_equals_a_full_rebuild_of_50k_events(
    store: JetStreamStore, bucket: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    last = await fill(store, 50_000)
    assert last == 50_000
    monkeypatch.setattr(checkpoints, "CHUNK", 64 * 1024)  # force several KV values
    at_40k = await full_rebuild(store, 40_000)
    head = await view_checkpoints.save(store, "api", at_40k, bucket_name=bucket)
    assert head.last_seq == 40_000 and head.chunks > 1

    loaded, info = await view_checkpoints.load_cluster(store, "api", bucket_name=bucket)
    assert (info.checkpoint_seq, info.tail_events) == (40_000, 10_000)
    full = await full_rebuild(store)
    assert full.last_seq == loaded.last_seq == 50_000
    assert view_checkpoints.encode_views(loaded) == view_checkpoints.encode_views(full)
    assert loaded.vmis_by_node.keys() <= full.vmis_by_node.keys()
    for node, keys in loaded.vmis_by_node.items():
        assert keys == full.vmis_by_node[node]

    # a newer snapshot replaces the old one and deletes its chunks
    head2 = await view_checkpoints.save(store, "api", full, bucket_name=bucket)
    kv = await store.js.key_value(bucket)
    keys = set(await kv.keys())
    assert keys == {"api", "api.next"} | {f"api.50000.{i}" for i in range(head2.chunks)}


async def test_snapshots_newer_than_asked_or_than_the_stream_are_not_used(
    store: JetStreamStore, bucket: str
) -> None:
    for ev in lifecycle().events:
        await store.append(ev)
    at20 = await full_rebuild(store, 20)
    await view_checkpoints.save(store, "api", at20, bucket_name=bucket)
    # time travel to before the snapshot folds from the start
    past, info = await view_checkpoints.load_cluster(store, "api", until_seq=11, bucket_name=bucket)
    assert info.checkpoint_seq == 0 and past.last_seq == 11
    assert view_checkpoints.encode_views(past) == view_checkpoints.encode_views(
        await full_rebuild(store, 11)
    )
    # cluster_at with snapshots uses it when it can
    now = await timetravel.cluster_at(store, checkpoint="api", bucket=bucket)
    assert view_checkpoints.encode_views(now) == view_checkpoints.encode_views(
        await full_rebuild(store)
    )
    at15 = await timetravel.cluster_at(store, seq=15, checkpoint="api", bucket=bucket)
    assert view_checkpoints.encode_views(at15) == view_checkpoints.encode_views(
        await full_rebuild(store, 15)
    )
    # a snapshot of a longer stream (the stream was recreated) is ignored
    fake = Cluster()
    fake.last_seq = 10_000
    await view_checkpoints.save(store, "api", fake, bucket_name=bucket)
    assert await view_checkpoints.load(store, "api", bucket_name=bucket) is None
    # another stream's snapshot is not this one's
    assert await view_checkpoints.load(store, "nothing", bucket_name=bucket) is None
