"""Checkpoints of the projection: the `Cluster`'s views as a checkpoint
(`eventstore/checkpoints.py`), so a restart replays only the tail.

One is the view tables and the stream sequence they cover, msgpack encoded (the
checkpoint store compresses and chunks it, writes its head last and refuses a checkpoint
of another schema, stream or a recreated stream). `SCHEMA` names the views' shape and the
fold's version.

`load_cluster` = latest checkpoint + replay from its sequence + 1."""

from __future__ import annotations

import msgspec

from eventstore import checkpoints
from eventstore.port import Bucket, EventLog
from projections.cluster import Cluster
from projections.views_codec import SCHEMA, Views, decode_views, encode_views

__all__ = ["SCHEMA", "Views", "decode_views", "encode_views"]

BUCKET = checkpoints.BUCKET


# ------------------------------------------------------------------ bucket
async def bucket(store: EventLog, name: str = BUCKET) -> Bucket:
    return await checkpoints.bucket(store, name)


def encode(cluster: Cluster) -> bytes:
    """`cluster`'s views as a checkpoint's body, at the sequence it has folded."""
    return encode_views(cluster)


async def write(
    store: EventLog, name: str, last_seq: int, body: bytes, *, bucket_name: str = BUCKET
) -> checkpoints.Head:
    """Store views encoded at `last_seq` under `name`; returns the head record."""
    kv = await bucket(store, bucket_name)
    return await checkpoints.save(
        kv, name, schema=SCHEMA, stream=store.stream, last_seq=last_seq, body=body
    )


async def save(
    store: EventLog, name: str, cluster: Cluster, *, bucket_name: str = BUCKET
) -> checkpoints.Head:
    """Write a checkpoint of `cluster`'s views under `name`; returns its head record."""
    seq, body = cluster.last_seq, encode(cluster)  # before the first await: one point
    return await write(store, name, seq, body, bucket_name=bucket_name)


async def load_checked(
    store: EventLog, name: str, *, bucket_name: str = BUCKET
) -> Cluster | checkpoints.Unusable | None:
    """The latest checkpoint of the views, why it cannot be used, or None (there is none)."""
    kv = await checkpoints.find(store, bucket_name)
    if kv is None:
        return None
    found = await checkpoints.load(
        kv, name, schema=SCHEMA, stream=store.stream, stream_last_seq=await store.stream_last_seq()
    )
    if not isinstance(found, checkpoints.Checkpoint):
        return found
    try:
        return decode_views(found.body)
    except (msgspec.DecodeError, msgspec.ValidationError) as e:
        return checkpoints.Unusable(f"its views do not decode ({e})", found.head)


async def load(store: EventLog, name: str, *, bucket_name: str = BUCKET) -> Cluster | None:
    """The latest usable checkpoint of the views, or None."""
    found = await load_checked(store, name, bucket_name=bucket_name)
    return found if isinstance(found, Cluster) else None


class Rebuilt(msgspec.Struct, frozen=True):
    """How `load_cluster` rebuilt the views: from which checkpoint, with how many events."""

    checkpoint_seq: int  # 0: no checkpoint was used
    tail_events: int


async def load_cluster(
    store: EventLog,
    name: str,
    *,
    until_seq: int | None = None,
    bucket_name: str = BUCKET,
) -> tuple[Cluster, Rebuilt]:
    """Checkpoint + tail: the projection at the stream's end (or at `until_seq`). A
    checkpoint newer than `until_seq` is not used (the views cannot be folded backwards)."""
    cluster = await load(store, name, bucket_name=bucket_name)
    if cluster is None or (until_seq is not None and cluster.last_seq > until_seq):
        cluster = Cluster(kube_events=True)
    snap = cluster.last_seq
    n = 0
    if until_seq is None or until_seq > snap:
        async for s in store.replay(start_seq=snap + 1, until_seq=until_seq, raw=True):
            cluster.apply(s)
            n += 1
    return cluster, Rebuilt(checkpoint_seq=snap, tail_events=n)
