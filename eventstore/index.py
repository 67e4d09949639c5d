"""Indexes over the event log, so debugging costs the same on a cluster's first day and
after a year: one direct get instead of a scan.

The event stream already indexes by aggregate (a subject filter `virt.<kind>.<ns>.<name>.>`
reads one aggregate without a scan). What it cannot answer by subject is kept here, in a
stream of its own (`<stream>_INDEX`, subjects `vidx.>`), small messages whose body names
the events' stream sequences (or, for migrations, the migration's name). Written now:

- `vidx.corr.<correlation id>`: correlation id → sequences (every event one request
  caused, read with one subject-filtered consumer), one message per request per batch of
  events (`Batch`; an entry of earlier code has an empty body and its `Virt-Seq`);
- `vidx.mig.<namespace>.<vmi>`: the migrations that named a VMI (`replay`, `why` and
  `get --at` of a VM read those migrations' subjects, not all of the namespace's).

Event ids are not indexed: an effect carries its cause's sequence (`Meta.causation_seq`),
so `why` gets a cause in one direct get without an index. An id entry per event was a
subject per event, and nats-server restores a stream's per-subject state at every start
in time that follows the subjects: at 1,000,000 events the id entries were ~1,000,000 of
the index's 1,025,486 subjects and its 1.31 s restore (docs/DECISIONS.md). The
`vidx.id.<event id>` entries an index written by earlier code holds are still read
(`Index.seq_of`), for events written before `causation_seq` existed.

Values are written as subject tokens (`events/subjects.py: token`). Each entry carries
`Virt-Seq` (its last event's sequence): the `Indexer` resumes after the last one it wrote
and its `Nats-Msg-Id` makes a repeat after a crash a duplicate (a batch formed otherwise
after a crash repeats sequences, which readers take once). The index lags the stream by
what is in flight, so readers use it up to `Index.upto()` and read the rest as before.

The `Indexer` runs in the upkeep service (`services/upkeep/service.py`), following the
stream with its own ordered consumer; caught up, it lets the next events gather a moment
and writes them as one batch."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator
from typing import Protocol

import structlog
from nats.aio.client import Client as NATS
from nats.errors import NoRespondersError
from nats.js.api import RetentionPolicy, StorageType, StreamConfig
from nats.js.client import JetStreamContext
from nats.js.errors import APIError, NotFoundError

from eventstore import direct, follow
from eventstore.index_entries import (
    CORRELATION_PREFIX,
    PREFIX,
    correlation_subject,
    entries,
    entry_seqs,
    grouped_body,
    id_subject,
    migrations_subject,
)
from eventstore.nats_errors import translated
from eventstore.port import Record
from eventstore.settings import StreamSettings
from eventstore.tasks import finish

log = structlog.get_logger()
SEQ_HEADER = "Virt-Seq"
MSG_ID = "Nats-Msg-Id"
BATCH = 500  # events indexed before waiting for their entries' acks
# while catching up, a pause after each batch: every entry is a write the server fsyncs
# (`sync_interval: always`), and a catch-up over a long log must not starve the services'
# own requests
CATCH_UP_PAUSE = 0.1
# caught up, the indexer waits this long before reading on: events that come meanwhile are
# indexed as one batch (readers read what the index does not cover yet from the log)
LINGER = 0.25


class JetStreamLog(Protocol):
    """What the index needs of JetStream's event log adapter (`eventstore/jetstream.py`,
    which offers this index as its `index()`)."""

    nc: NATS
    js: JetStreamContext
    settings: StreamSettings

    @property
    def stream(self) -> str: ...

    def records(
        self, *, start_seq: int = 1, follow: bool = False
    ) -> AsyncGenerator[Record, None]: ...


def stream_name(events: str) -> str:
    return f"{events}_INDEX"


def entry_headers(seq: int, n: int) -> dict[str, str]:
    """The `n`th entry of the event at `seq`: its sequence, and an id that makes a repeat
    a duplicate."""
    return {SEQ_HEADER: str(seq), MSG_ID: f"vidx/{seq}/{n}"}


async def ensure(store: JetStreamLog) -> str:
    s = store.settings
    name = stream_name(s.name)
    cfg = StreamConfig(
        name=name,
        subjects=[f"{PREFIX}.>"],
        retention=RetentionPolicy.LIMITS,
        storage=StorageType.FILE if s.storage == "file" else StorageType.MEMORY,
        num_replicas=s.replicas,
        duplicate_window=s.duplicate_window_seconds,
        allow_direct=True,
    )
    try:
        await store.js.stream_info(name)
    except NotFoundError:
        with contextlib.suppress(APIError):  # another process created it first
            await store.js.add_stream(cfg)
    return name


class Index:
    """Lookups; every one answers None (or nothing) when the index cannot tell, and the
    caller reads the log as before."""

    def __init__(self, store: JetStreamLog) -> None:
        self.store = store
        self.stream = stream_name(store.stream)
        self._upto: int | None = None

    # The lookups raise the port's errors (`Unavailable` while the server is away), never
    # the client's: the index is a capability of the port.
    async def upto(self) -> int:
        """The last event sequence the index covers (0: no index)."""
        if self._upto is None:
            with translated():
                self._upto = await last_indexed(self.store)
        return self._upto

    async def seq_of(self, event_id: str) -> int | None:
        """The sequence an older index's id entry holds for `event_id` (None: none)."""
        with translated():
            try:
                msg = await self.store.js.get_last_msg(self.stream, id_subject(event_id))
            except (NotFoundError, APIError):
                return None
        seq = (msg.headers or {}).get(SEQ_HEADER, "")
        return int(seq) if seq.isdigit() else None

    async def seqs_of(self, correlation_id: str) -> list[int]:
        with translated():
            found = await self._all(correlation_subject(correlation_id))
        return sorted({seq for v, body in found for seq in entry_seqs(v, body)})

    async def migrations_of(self, namespace: str, vmi: str) -> list[str]:
        with translated():
            found = await self._all(migrations_subject(namespace, vmi))
        return list(dict.fromkeys(body.decode() for _, body in found))

    async def _all(self, subject: str) -> list[tuple[str, bytes]]:
        """(Virt-Seq, body) of every entry on one subject: by direct gets from a stream of
        one replica (where they cannot lag the leader), else by a consumer."""
        if self.store.settings.replicas == 1:
            reader = direct.Reader(self.store.nc, self.stream, subject, start_seq=1)
            try:
                few = [
                    ((msg.headers or {}).get(SEQ_HEADER, ""), msg.data)
                    async for msg in reader.messages()
                ]
            except (APIError, NoRespondersError):  # no index stream (yet)
                return []
            if reader.rest is None:  # else many: a consumer reads them all
                return [(s, b) for s, b in few if s.isdigit()]
        js = self.store.js
        try:
            info = await js.stream_info(self.stream, subjects_filter=subject)
        except (NotFoundError, APIError):
            return []
        if not info.state.subjects:
            return []
        count = sum(info.state.subjects.values()) if info.state.subjects else 0
        out: list[tuple[str, bytes]] = []
        sub = await js.subscribe(subject, stream=self.stream, ordered_consumer=True)
        try:
            for _ in range(count):
                msg = await sub.next_msg(timeout=5.0)
                out.append(((msg.headers or {}).get(SEQ_HEADER, ""), msg.data))
        finally:
            with contextlib.suppress(Exception):
                await sub.unsubscribe()
        return [(s, b) for s, b in out if s.isdigit()]


async def last_indexed(store: JetStreamLog) -> int:
    """The event sequence of the index's last entry (0: none, or no index). Two requests:
    a get of the last message on `vidx.>` walks every subject the index holds."""
    js = store.js
    name = stream_name(store.stream)
    try:
        info = await js.stream_info(name)
    except NotFoundError:
        return 0
    if not info.state.last_seq:
        return 0
    try:
        msg = await js.get_msg(name, info.state.last_seq)
    except NotFoundError:
        return 0
    seq = (msg.headers or {}).get(SEQ_HEADER, "")
    return int(seq) if seq.isdigit() else 0


class Batch:
    """The entries of a batch of events, as few messages as say the same: one per
    correlation id with every sequence of it in the batch (a request's events mostly come
    together: one write where there were ten), each other entry as it is. The messages go
    out in the order of their last sequence, so the index's last message names the last
    event indexed (`last_indexed`)."""

    def __init__(self) -> None:
        self.events = 0
        self._by_correlation: dict[str, list[int]] = {}
        self._others: list[tuple[int, str, bytes]] = []

    def add(self, seq: int, found: list[tuple[str, bytes]]) -> None:
        self.events += 1
        for subject, body in found:
            if subject.startswith(CORRELATION_PREFIX) and not body:
                self._by_correlation.setdefault(subject, []).append(seq)
            else:
                self._others.append((seq, subject, body))

    def messages(self) -> list[tuple[str, bytes, dict[str, str]]]:
        out: list[tuple[int, str, bytes, dict[str, str]]] = []
        for subject, seqs in self._by_correlation.items():
            body = grouped_body(seqs)
            msg_id = f"vidx/{seqs[-1]}/g{seqs[0]}"
            out.append((seqs[-1], subject, body, {SEQ_HEADER: str(seqs[-1]), MSG_ID: msg_id}))
        for n, (seq, subject, body) in enumerate(self._others):
            out.append((seq, subject, body, {SEQ_HEADER: str(seq), MSG_ID: f"vidx/{seq}/o{n}"}))
        out.sort(key=lambda m: m[0])
        return [(subject, body, headers) for _, subject, body, headers in out]


class Indexer:
    """Follows the event stream from after the last indexed event and writes its entries."""

    def __init__(
        self, store: JetStreamLog, *, pace: float = CATCH_UP_PAUSE, linger: float = LINGER
    ) -> None:
        self.store = store
        self.pace = pace
        self.linger = linger
        self.upto = 0
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        """The follower starts in the background: a server slow to answer (loading a long
        log after its own restart) delays the index, not the process that keeps it."""
        self._task = asyncio.create_task(self._run(), name="indexer")

    async def stop(self) -> None:
        if self._task is not None:
            await finish(self._task)

    async def _run(self) -> None:
        started = False

        async def read() -> None:
            nonlocal started
            if not started:
                await ensure(self.store)
                self.upto = await last_indexed(self.store)
                started = True
            await self._follow()

        await follow.resuming(read, "indexer", lambda: self.upto)

    async def _follow(self) -> None:
        js = self.store.js
        name = stream_name(self.store.stream)
        batch = Batch()
        records = self.store.records(start_seq=self.upto + 1, follow=True)
        async with contextlib.aclosing(records):
            async for record in records:
                batch.add(record.seq, entries(record.subject, record.data))
                if batch.events >= BATCH or record.pending == 0:
                    for subject, body, headers in batch.messages():
                        await js.publish_async(subject, body, stream=name, headers=headers)
                    await js.publish_async_completed()
                    self.upto = record.seq
                    batch = Batch()
                    if record.pending > 0 and self.pace:
                        await asyncio.sleep(self.pace)
                    elif record.pending == 0 and self.linger:
                        # caught up: let the next events gather, to write them as a batch
                        # (one wakeup and one wait for acks a batch, not an event)
                        await asyncio.sleep(self.linger)
