"""Projection snapshots in a JetStream KV bucket, so a restart replays only the tail.

A snapshot is the `Cluster`'s view tables and the stream sequence they cover, msgpack
encoded and zlib-compressed. KV values are limited by the server's max payload (1 MiB by
default), so the body is cut into chunks under `<name>.<seq>.<i>` and a small head record
under `<name>` names them; the head is written last, so a reader never sees half a
snapshot, and the previous snapshot's chunks are deleted after it.

`load_cluster` = latest snapshot + replay from its sequence + 1. A snapshot from another
stream, or newer than the stream (a stream that was recreated), is ignored."""

from __future__ import annotations

import zlib

import msgspec

from events.meta import KindToken
from eventstore.port import Bucket, EventLog
from projections.cluster import Cluster
from projections.kube_events import KubeEvents, KubeEventView
from projections.views import (
    MigrationView,
    NodeView,
    PolicyView,
    ResourceView,
    VMIView,
    VMView,
)

BUCKET = "virt-snapshots"
CHUNK = 512 * 1024  # well under the 1 MiB default max payload, headers included


class Views(msgspec.Struct, frozen=True):
    last_seq: int
    vms: dict[str, VMView]
    vmis: dict[str, VMIView]
    migrations: dict[str, MigrationView]
    nodes: dict[str, NodeView]
    policies: dict[str, PolicyView]
    resources: dict[KindToken, dict[str, ResourceView]] = {}
    # the api's Event records (projections/kube_events.py); None: a fold without them
    kube_events: dict[str, KubeEventView] | None = None


class Head(msgspec.Struct, frozen=True):
    stream: str
    last_seq: int
    chunks: int
    size: int  # compressed bytes
    crc32: int


_views_encoder = msgspec.msgpack.Encoder()
_views_decoder = msgspec.msgpack.Decoder(Views)
_head_decoder = msgspec.json.Decoder(Head)


# ------------------------------------------------------------------ pure
def encode_views(cluster: Cluster) -> bytes:
    """The cluster's views, deterministic for equal views (tables sorted by key): two
    encodings are equal exactly when the views are."""
    return _views_encoder.encode(
        Views(
            last_seq=cluster.last_seq,
            vms=dict(sorted(cluster.vms.items())),
            vmis=dict(sorted(cluster.vmis.items())),
            migrations=dict(sorted(cluster.migrations.items())),
            nodes=dict(sorted(cluster.nodes.items())),
            policies=dict(sorted(cluster.policies.items())),
            resources={k: dict(sorted(t.items())) for k, t in cluster.resources.items()},
            kube_events=(
                dict(sorted(cluster.kube_events.table.items()))
                if cluster.kube_events is not None
                else None
            ),
        )
    )


def decode_views(data: bytes) -> Cluster:
    v = _views_decoder.decode(data)
    c = Cluster()
    c.last_seq = v.last_seq
    c.vms, c.vmis, c.migrations = v.vms, v.vmis, v.migrations
    c.nodes, c.policies = v.nodes, v.policies
    c.resources.update(v.resources)
    if v.kube_events is not None:
        c.kube_events = KubeEvents.of(v.kube_events)
    for k, vmi in c.vmis.items():  # the index is derived, not stored
        if vmi.node:
            c.vmis_by_node.setdefault(vmi.node, set()).add(k)
    return c


# ------------------------------------------------------------------ bucket
async def bucket(store: EventLog, name: str = BUCKET) -> Bucket:
    made = await store.bucket(name, description="projection snapshots (virtstream)")
    assert made is not None, "a bucket asked to be created exists"
    return made


def _chunk_key(name: str, seq: int, i: int) -> str:
    return f"{name}.{seq}.{i}"


async def save(store: EventLog, name: str, cluster: Cluster, *, bucket_name: str = BUCKET) -> Head:
    """Write a snapshot of `cluster` under `name`; returns its head record."""
    kv = await bucket(store, bucket_name)
    body = zlib.compress(encode_views(cluster), 1)
    chunks = [body[i : i + CHUNK] for i in range(0, len(body), CHUNK)] or [b""]
    seq = cluster.last_seq
    for i, part in enumerate(chunks):
        await kv.put(_chunk_key(name, seq, i), part)
    old = await _head(kv, name)
    head = Head(
        stream=store.stream,
        last_seq=seq,
        chunks=len(chunks),
        size=len(body),
        crc32=zlib.crc32(body),
    )
    await kv.put(name, msgspec.json.encode(head))
    if old is not None and old.last_seq != seq:
        for i in range(old.chunks):
            await kv.purge(_chunk_key(name, old.last_seq, i))
    return head


async def _head(kv: Bucket, name: str) -> Head | None:
    value = await kv.get(name)
    if not value:
        return None
    try:
        return _head_decoder.decode(value)
    except msgspec.DecodeError:
        return None


async def load(store: EventLog, name: str, *, bucket_name: str = BUCKET) -> Cluster | None:
    """The latest usable snapshot, or None."""
    kv = await store.bucket(bucket_name, create=False)
    if kv is None:
        return None
    head = await _head(kv, name)
    if head is None or head.stream != store.stream:
        return None
    if head.last_seq > await store.stream_last_seq():
        return None  # the stream was recreated under the snapshot
    parts = []
    for i in range(head.chunks):
        part = await kv.get(_chunk_key(name, head.last_seq, i))
        if part is None:
            return None
        parts.append(part)
    body = b"".join(parts)
    if len(body) != head.size or zlib.crc32(body) != head.crc32:
        return None
    try:
        return decode_views(zlib.decompress(body))
    except msgspec.DecodeError:  # an older view format: replay the stream instead
        return None


class Loaded(msgspec.Struct, frozen=True):
    snapshot_seq: int  # 0: no snapshot was used
    tail_events: int


async def load_cluster(
    store: EventLog,
    name: str,
    *,
    until_seq: int | None = None,
    bucket_name: str = BUCKET,
) -> tuple[Cluster, Loaded]:
    """Snapshot + tail: the projection at the stream's end (or at `until_seq`). A snapshot
    newer than `until_seq` is not used (the views cannot be folded backwards)."""
    cluster = await load(store, name, bucket_name=bucket_name)
    if cluster is None or (until_seq is not None and cluster.last_seq > until_seq):
        cluster = Cluster(kube_events=True)
    snap = cluster.last_seq
    n = 0
    if until_seq is None or until_seq > snap:
        async for s in store.replay(start_seq=snap + 1, until_seq=until_seq, raw=True):
            cluster.apply(s)
            n += 1
    return cluster, Loaded(snapshot_seq=snap, tail_events=n)
