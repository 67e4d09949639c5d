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
a crash). Before its chunks a writer records which it is writing (`<name>.next`), so the
next save purges what a killed writer left behind. The bucket is the port's (`Bucket`):
any adapter of the log holds checkpoints.

A checkpoint is refused, with the reason, when it was written by other code (another
`schema`: the state's shape or its fold changed), for another stream, or past the
stream's end (the stream was recreated under it); the caller rebuilds from the log and
says so in one line. Pure encoding of each state lives beside the state it encodes."""

from __future__ import annotations

import time
import zlib

import msgspec

from eventstore.port import Bucket, EventLog

BUCKET = "virt-checkpoints"
API_VIEWS = "cluster-views"  # the api's views (and what its metrics read off them)
CHUNK = 512 * 1024  # well under the 1 MiB default max payload, headers included
DESCRIPTION = "service checkpoints (virtstream)"


class Head(msgspec.Struct, frozen=True):
    name: str
    schema: str
    stream: str
    last_seq: int
    chunks: int
    size: int  # compressed bytes
    crc32: int
    saved_at: float = 0.0


class Writing(msgspec.Struct, frozen=True):
    """The chunks a save is writing (`<name>.next`), recorded before the first, and the
    previous checkpoint's it purges after the head: a writer killed at any point leaves
    behind only chunks named here."""

    last_seq: int
    chunks: int
    replaces: int = 0
    replaced_chunks: int = 0


class Checkpoint(msgspec.Struct, frozen=True):
    head: Head
    body: bytes  # what the writer saved, decompressed


class Unusable(msgspec.Struct, frozen=True):
    """A checkpoint exists but cannot be used; `reason` is one line for the log."""

    reason: str
    head: Head | None = None


_head_decoder = msgspec.json.Decoder(Head)
_writing_decoder = msgspec.json.Decoder(Writing)


async def bucket(store: EventLog, name: str = BUCKET) -> Bucket:
    """Bind the bucket, creating it when missing (with the stream's storage and replicas)."""
    made = await store.bucket(name, description=DESCRIPTION)
    assert made is not None, "a bucket asked to be created exists"
    return made


async def find(store: EventLog, name: str = BUCKET) -> Bucket | None:
    """The bucket, None when nobody made it yet."""
    return await store.bucket(name, create=False)


def _chunk_key(name: str, seq: int, i: int) -> str:
    return f"{name}.{seq}.{i}"


def _writing_key(name: str) -> str:
    return f"{name}.next"


async def head(kv: Bucket, name: str) -> Head | None:
    value = await kv.get(name)
    if not value:
        return None
    try:
        return _head_decoder.decode(value)
    except (msgspec.DecodeError, msgspec.ValidationError):
        return None


async def _purge_chunks(kv: Bucket, name: str, seq: int, chunks: int) -> None:
    for i in range(chunks):
        await kv.purge(_chunk_key(name, seq, i))


async def save(
    kv: Bucket,
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
    old = await head(kv, name)
    current = old.last_seq if old is not None else None
    stray = await kv.get(_writing_key(name))
    if stray:
        try:
            left: Writing | None = _writing_decoder.decode(stray)
        except (msgspec.DecodeError, msgspec.ValidationError):
            left = None
        if left is not None:  # what a killed writer may have left
            for seq, n in ((left.last_seq, left.chunks), (left.replaces, left.replaced_chunks)):
                if n and seq not in (current, last_seq):
                    await _purge_chunks(kv, name, seq, n)
    writing = Writing(
        last_seq,
        len(chunks),
        replaces=current or 0,
        replaced_chunks=old.chunks if old is not None else 0,
    )
    await kv.put(_writing_key(name), msgspec.json.encode(writing))
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
    if old is not None and old.last_seq != last_seq:
        await _purge_chunks(kv, name, old.last_seq, old.chunks)
    elif old is not None and old.chunks > len(chunks):  # the same sequence, fewer chunks
        for i in range(len(chunks), old.chunks):
            await kv.purge(_chunk_key(name, last_seq, i))
    return new


async def load(
    kv: Bucket, name: str, *, schema: str, stream: str, stream_last_seq: int
) -> Checkpoint | Unusable | None:
    """The newest checkpoint of `name` (None: there is none), or why it cannot be used."""
    h = await head(kv, name)
    if h is None:
        return None
    if h.schema != schema:
        return Unusable(f"written with schema {h.schema}, this code reads {schema}", h)
    if h.stream != stream:
        return Unusable(f"written for stream {h.stream}, not {stream}", h)
    if h.last_seq > stream_last_seq:
        return Unusable(
            f"covers sequence {h.last_seq}, past the stream's last {stream_last_seq} "
            "(the stream was recreated)",
            h,
        )
    parts = []
    for i in range(h.chunks):
        part = await kv.get(_chunk_key(name, h.last_seq, i))
        if part is None:
            return Unusable(f"chunk {i} of {h.chunks} is missing", h)
        parts.append(part)
    packed = b"".join(parts)
    if len(packed) != h.size or zlib.crc32(packed) != h.crc32:
        return Unusable("its chunks do not match the head's size and CRC", h)
    try:
        return Checkpoint(h, zlib.decompress(packed))
    except zlib.error:
        return Unusable("its body does not decompress", h)
