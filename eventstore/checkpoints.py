"""Checkpoints: a service's folded state and the stream sequence it covers, in a JetStream
key-value bucket, so a start loads the newest checkpoint and folds only the tail.

One bucket (`virt-checkpoints`, file storage, as many replicas as the event stream) holds
every service's checkpoint under its own name (`virt-controller`, `virt-handler-node-1`,
`cluster-views`, ...). A checkpoint is opaque bytes to this module, zlib-compressed and
cut into chunks `<name>.<seq>.<i>` under the server's max payload; a small head record
under `<name>` names them, with the schema its writer folded with, the stream, the
sequence, the size and a CRC. The head is written last and the previous checkpoint's
chunks are purged only after it: a writer killed at any point (kill -9, a lost server)
leaves the previous head and its chunks intact, and a reader that finds the head never
reads half a checkpoint (a chunk missing or a CRC that does not match is a refusal, never
a crash). Chunks a killed writer left behind are purged by the next save.

A checkpoint is refused, with the reason, when it was written by other code (another
`schema`: the state's shape or its fold changed), for another stream, or past the
stream's end (the stream was recreated under it); the caller rebuilds from the log and
says so in one line. Pure encoding of each state lives beside the state it encodes."""

from __future__ import annotations

import contextlib
import time
import zlib

import msgspec
from nats.js.api import KeyValueConfig, StorageType
from nats.js.client import JetStreamContext
from nats.js.errors import BucketNotFoundError, KeyNotFoundError, NotFoundError
from nats.js.kv import KeyValue

BUCKET = "virt-checkpoints"
API_VIEWS = "cluster-views"  # the api's views (and what its metrics read off them)
CHUNK = 512 * 1024  # well under the 1 MiB default max payload, headers included


class Head(msgspec.Struct, frozen=True):
    name: str
    schema: str
    stream: str
    last_seq: int
    chunks: int
    size: int  # compressed bytes
    crc32: int
    saved_at: float = 0.0


class Checkpoint(msgspec.Struct, frozen=True):
    head: Head
    body: bytes  # what the writer saved, decompressed


class Refused(msgspec.Struct, frozen=True):
    """A checkpoint exists but cannot be used; `reason` is one line for the log."""

    reason: str
    head: Head | None = None


_head_decoder = msgspec.json.Decoder(Head)


async def bucket(
    js: JetStreamContext,
    *,
    replicas: int = 1,
    storage: StorageType = StorageType.FILE,
    name: str = BUCKET,
) -> KeyValue:
    """Bind the bucket, creating it when missing (a concurrent creator is fine)."""
    try:
        return await js.key_value(name)
    except (BucketNotFoundError, NotFoundError):
        pass
    cfg = KeyValueConfig(
        bucket=name,
        history=1,
        storage=storage,
        replicas=replicas,
        description="service checkpoints (virtstream)",
    )
    try:
        return await js.create_key_value(cfg)
    except Exception:  # lost a creation race: bind to the winner's
        return await js.key_value(name)


def _chunk_key(name: str, seq: int, i: int) -> str:
    return f"{name}.{seq}.{i}"


async def head(kv: KeyValue, name: str) -> Head | None:
    try:
        entry = await kv.get(name)
    except (KeyNotFoundError, NotFoundError):
        return None
    if not entry.value:
        return None
    try:
        return _head_decoder.decode(entry.value)
    except (msgspec.DecodeError, msgspec.ValidationError):
        return None


async def save(
    kv: KeyValue,
    name: str,
    *,
    schema: str,
    stream: str,
    last_seq: int,
    body: bytes,
    level: int = 1,
) -> Head:
    """Write a checkpoint: the chunks, then the head, then the previous chunks go."""
    packed = zlib.compress(body, level)
    chunks = [packed[i : i + CHUNK] for i in range(0, len(packed), CHUNK)] or [b""]
    for i, part in enumerate(chunks):
        await kv.put(_chunk_key(name, last_seq, i), part)
    new = Head(
        name=name,
        schema=schema,
        stream=stream,
        last_seq=last_seq,
        chunks=len(chunks),
        size=len(packed),
        crc32=zlib.crc32(packed),
        saved_at=time.time(),
    )
    await kv.put(name, msgspec.json.encode(new))
    await _purge_others(kv, name, keep=last_seq)
    return new


async def _purge_others(kv: KeyValue, name: str, keep: int) -> None:
    """Every chunk of `name` but the current checkpoint's: the previous one's, and any a
    killed writer left."""
    try:
        keys = await kv.keys()  # (nats-py's `filters` match substrings, not subjects)
    except Exception:  # nats-py's NoKeysError: nothing to purge
        return
    mine, prefix = f"{name}.", f"{name}.{keep}."
    for k in keys:
        if k.startswith(mine) and not k.startswith(prefix):
            with contextlib.suppress(KeyNotFoundError, NotFoundError):
                await kv.purge(k)


async def load(
    kv: KeyValue, name: str, *, schema: str, stream: str, stream_last_seq: int
) -> Checkpoint | Refused | None:
    """The newest checkpoint of `name` (None: there is none), or why it cannot be used."""
    h = await head(kv, name)
    if h is None:
        return None
    if h.schema != schema:
        return Refused(f"written with schema {h.schema}, this code reads {schema}", h)
    if h.stream != stream:
        return Refused(f"written for stream {h.stream}, not {stream}", h)
    if h.last_seq > stream_last_seq:
        return Refused(
            f"covers sequence {h.last_seq}, past the stream's last {stream_last_seq} "
            "(the stream was recreated)",
            h,
        )
    parts = []
    for i in range(h.chunks):
        try:
            entry = await kv.get(_chunk_key(name, h.last_seq, i))
        except (KeyNotFoundError, NotFoundError):
            return Refused(f"chunk {i} of {h.chunks} is missing", h)
        parts.append(entry.value or b"")
    packed = b"".join(parts)
    if len(packed) != h.size or zlib.crc32(packed) != h.crc32:
        return Refused("its chunks do not match the head's size and CRC", h)
    try:
        return Checkpoint(h, zlib.decompress(packed))
    except zlib.error:
        return Refused("its body does not decompress", h)
