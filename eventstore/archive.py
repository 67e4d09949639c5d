"""The complete archive and the bounded hot log, with JetStream's own tools.

- **Archive** `<stream>_ARCHIVE`: a mirror of the event stream. A mirror keeps the
  origin's sequence numbers, headers and timestamps, so an event is the same event at the
  same sequence in both; it is S2-compressed, has no limits and denies deletes and
  purges: history is never destroyed. A purge in the origin is not mirrored.
- Its subjects are one per aggregate: `virt.<kind>.<ns>.<name>.events` (a subject
  transform, `COLLAPSED`). nats-server restores per-subject state on start, one entry a
  subject: the origin's subjects (one per aggregate, event type and node: 700,288 at
  1,000,000 events) made it the start's cost. `virt.<kind>.<ns>.<name>.>` still selects
  an aggregate; the original subject is computed from the event (`original_subject`)
  where a read lifts it, and a narrower filter reads its aggregate (or wider) filter and
  keeps the matching events by that subject (`served`). A mirror's config cannot change:
  an archive made before keeps the full subjects, and every reader takes both.
- **Hot log** (the event stream): what the services consume and append to. An aggregate
  whose life has ended (a deleted VM, a removed VMI, a finished and deleted migration)
  leaves it: its subjects are purged up to its end (`retire`), once the archive holds
  them and they lie below the **floor**. The floor is recorded (`hot-floor` in the
  checkpoint bucket) before anything under it is purged: the hot log is complete from the
  floor on, and the adapter reads everything before the floor from the archive
  (`JetStreamStore.replay`, `get`, `seq_at_time`), so every reader sees one complete log.
- A stream made before the archive denies purges (JetStream cannot turn that off): it is
  archived all the same and never trimmed (`trimmable`)."""

from __future__ import annotations

import time
from collections.abc import Sequence

import msgspec
from nats.js.api import (
    RetentionPolicy,
    StorageType,
    StoreCompression,
    StreamConfig,
    StreamSource,
    SubjectTransform,
)
from nats.js.client import JetStreamContext
from nats.js.errors import APIError, BucketNotFoundError, KeyNotFoundError, NotFoundError
from nats.js.kv import KeyValue

from events import subjects
from events.catalog import Event
from events.codec import event_type
from eventstore import checkpoints
from eventstore.floor import Floor, PendingEnd
from eventstore.kv import make_bucket
from eventstore.settings import StreamSettings

FLOOR_KEY = "hot-floor"
__all__ = ["Floor", "PendingEnd"]  # eventstore/floor.py's, where the port reads them

COLLAPSED = "events"  # the archive's last subject token, after the aggregate's (no event type)
# every event subject (`events/subjects.py`: six tokens) → its aggregate's and COLLAPSED
TRANSFORM = SubjectTransform(
    src="virt.*.*.*.*.*",
    dest="virt.{{wildcard(1)}}.{{wildcard(2)}}.{{wildcard(3)}}." + COLLAPSED,
)


def archive_name(stream: str) -> str:
    return f"{stream}_ARCHIVE"


def original_subject(subject: str, event: Event) -> str:
    """The subject `event` has in the hot log, computed as an append builds it (a dead
    letter's retry republishes to that same subject): the archive's one-per-aggregate
    subject becomes it again; a full subject (the hot log's, an earlier archive's) stays."""
    if collapsed(subject):
        return subjects.event_subject(event.meta.aggregate, event_type(event), event.meta.node)
    return subject


def collapsed(subject: str) -> bool:
    """An archive's subject of a whole aggregate (not an event's own)."""
    return subject.count(".") == 4 and subject.endswith("." + COLLAPSED)


def served(filters: Sequence[str] | None) -> tuple[list[str] | None, bool]:
    """The filters to read from the archive for `filters`, and whether the events read must
    be kept by their original subject (`original_subject`) matching one of `filters`.

    A filter that selects whole aggregates (`virt.vm.ns.name.>`, `virt.vm.>`, everything)
    is served as it is. A narrower one (an event type, a node) is widened to its first four
    tokens (`virt.<kind>.<ns>.<name>.>`, `virt.<kind>.*.*.>`, at worst everything: a type
    across every kind): the collapsed subjects cannot tell it apart. That is rare where it
    costs: debug reads are per aggregate; the narrow filters are services' catching up
    from before the hot log's floor. Widened filters that overlap (a consumer refuses
    overlapping filters) become the one that covers them, or everything."""
    if not filters or subjects.ALL in filters:
        return None, False
    wide = [_aggregates_of(f) for f in filters]
    if wide == list(filters):
        return list(filters), False
    kept: list[str] = []
    for f in dict.fromkeys(wide):
        if any(_covers(k, f) for k in kept):
            continue
        kept = [k for k in kept if not _covers(f, k)] + [f]
    for i, a in enumerate(kept):
        if any(_overlap(a, b) for b in kept[i + 1 :]):
            return None, True
    return (None if subjects.ALL in kept else kept), True


def _aggregates_of(f: str) -> str:
    """The narrowest filter of whole aggregates that holds every subject `f` matches."""
    tokens = f.split(".")
    if ">" in tokens[:5]:
        return f
    return ".".join(tokens[:4]) + ".>"


def _covers(p: str, q: str) -> bool:
    """Every subject `q` matches, `p` matches."""
    a, b = p.split("."), q.split(".")
    for i, t in enumerate(a):
        if t == ">":
            return len(b) > i
        if i >= len(b) or b[i] == ">" or (t != "*" and (b[i] == "*" or t != b[i])):
            return False
    return len(a) == len(b)


def _overlap(p: str, q: str) -> bool:
    """Some subject matches both."""
    a, b = p.split("."), q.split(".")
    for x, y in zip(a, b, strict=False):
        if ">" in (x, y):
            return True
        if x != y and "*" not in (x, y):
            return False
    return len(a) == len(b)


async def ensure(
    js: JetStreamContext, stream: str, *, replicas: int = 1, storage: str = "file"
) -> str:
    """Create the archive mirror of `stream` (idempotent)."""
    name = archive_name(stream)
    try:
        await js.stream_info(name)
        return name
    except NotFoundError:
        pass
    cfg = StreamConfig(
        name=name,
        description=f"the complete history of {stream} (virtstream)",
        mirror=StreamSource(name=stream, subject_transforms=[TRANSFORM]),
        retention=RetentionPolicy.LIMITS,
        storage=StorageType.FILE if storage == "file" else StorageType.MEMORY,
        num_replicas=replicas,
        compression=StoreCompression.S2 if storage == "file" else StoreCompression.NONE,
        allow_direct=True,
        deny_delete=True,
        deny_purge=True,
    )
    try:
        await js.add_stream(cfg)
    except APIError as e:  # another process created it first
        if e.err_code != 10058:
            raise
    return name


async def archived_upto(js: JetStreamContext, stream: str) -> int:
    """The last sequence the archive holds (0: no archive)."""
    try:
        info = await js.stream_info(archive_name(stream))
    except NotFoundError:
        return 0
    return int(info.state.last_seq)


async def trimmable(js: JetStreamContext, stream: str) -> bool:
    info = await js.stream_info(stream)
    return not info.config.deny_purge


async def read_floor(js: JetStreamContext, stream: str) -> int:
    """The hot log's floor (0: never trimmed: the hot log is complete)."""
    return (await read_floor_record(js, stream)).floor


async def read_floor_record(js: JetStreamContext, stream: str) -> Floor:
    """The floor with the retirer's pending work (floor 0: never trimmed)."""
    try:
        kv = await js.key_value(checkpoints.BUCKET)
    except (BucketNotFoundError, NotFoundError):
        return Floor(stream, 0)
    return await _record_in(kv, stream)


async def floor_in(kv: KeyValue, stream: str) -> int:
    """`read_floor` from the bucket's handle (one get)."""
    return (await _record_in(kv, stream)).floor


async def _record_in(kv: KeyValue, stream: str) -> Floor:
    try:
        entry = await kv.get(f"{FLOOR_KEY}.{stream}")
    except (BucketNotFoundError, KeyNotFoundError, NotFoundError):
        return Floor(stream, 0)
    try:
        f = msgspec.json.decode(entry.value or b"", type=Floor)
    except (msgspec.DecodeError, msgspec.ValidationError):
        return Floor(stream, 0)
    return f if f.stream == stream else Floor(stream, 0)


async def write_floor(
    js: JetStreamContext,
    stream: str,
    floor: int,
    settings: StreamSettings,
    *,
    pending: Sequence[PendingEnd] = (),
) -> None:
    kv = await make_bucket(js, checkpoints.BUCKET, settings, checkpoints.DESCRIPTION)
    record = Floor(stream, floor, time.time(), tuple(pending))
    await kv.put(f"{FLOOR_KEY}.{stream}", msgspec.json.encode(record))


async def retire(js: JetStreamContext, stream: str, aggregate_filter: str, end: int) -> None:
    """Purge one ended aggregate's events up to and including `end` from the hot log (a
    later aggregate of the same name, after `end`, stays)."""
    await js.purge_stream(stream, seq=end + 1, subject=aggregate_filter)


async def acked_floor(js: JetStreamContext, stream: str) -> int:
    """The lowest ack floor of the stream's durable consumers (2**63 without one): a
    service catching up reads the hot log from about there, and nothing it has not passed
    may leave under it. (A node removed for good: delete its consumer, or it holds the
    floor.)"""
    floors = [
        int(c.ack_floor.stream_seq or 0)
        for c in await js.consumers_info(stream)
        if c.config.durable_name and c.ack_floor is not None
    ]
    return min(floors, default=2**63)


async def last_of(js: JetStreamContext, stream: str, scope: str, at_least: int) -> int:
    """The last sequence of the subjects `scope` matches, at least `at_least` (a scope with
    nothing left in the hot log: `at_least`)."""
    try:
        msg = await js.get_last_msg(stream, scope)
    except NotFoundError:
        return at_least
    return max(int(msg.seq or 0), at_least)
