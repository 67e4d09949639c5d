"""The event log in memory: the port's contract (the same suite as the JetStream adapter's,
`tests/integration/test_store_contract.py`) in one process with no server, so the shells,
the deciders and the api's application layer run end to end in milliseconds in tests.

It behaves as the JetStream adapter does where a service can tell: one sequence over the
stream, optimistic appends per aggregate (`virt.<kind>.<ns>.<name>.>`) checked before
duplicates and answered "duplicate" when the event already landed, duplicates dropped
within the stream's window, poison skipped on request, durable consumers that deliver an
unacked message again after `ack_wait` (also to a consumer bound anew), dead letters,
key-value buckets. Events are kept encoded, as the stream keeps them: every reader decodes
its own copy. `connected = False` makes it a log that cannot be reached (`Unavailable`).
Nothing is kept past the process."""

from __future__ import annotations

import asyncio
import datetime as dt
import time
from collections.abc import AsyncGenerator, Callable, Sequence

import msgspec

from events import subjects
from events.catalog import Event
from events.codec import decode, encode, event_type
from events.envelope import Appended, Stored
from events.meta import Aggregate
from eventstore import index_entries
from eventstore.floor import Floor, PendingEnd
from eventstore.port import (
    ConcurrencyConflict,
    Delivery,
    Record,
    Unavailable,
    Undecodable,
)

MAX_ACK_PENDING = 4096  # as the JetStream adapter's durable consumers


class _Message:
    __slots__ = ("data", "headers", "msg_id", "seq", "subject", "time")

    def __init__(
        self, seq: int, subject: str, data: bytes, msg_id: str, headers: dict[str, str], at: float
    ) -> None:
        self.seq = seq
        self.subject = subject
        self.data = data
        self.msg_id = msg_id
        self.headers = headers
        self.time = at


def _decoded(m: _Message) -> Stored:
    try:
        event = decode(m.data)
    except (msgspec.DecodeError, msgspec.ValidationError) as e:
        raise Undecodable(str(e)) from e
    return Stored(seq=m.seq, subject=m.subject, time=m.time, event=event)


def _readable(m: _Message) -> bool:
    try:
        decode(m.data)
    except (msgspec.DecodeError, msgspec.ValidationError):
        return False
    return True


class MemoryDelivery:
    """A durable consumer's message (`Delivery` of the port)."""

    __slots__ = ("_durable", "_log", "_msg")

    def __init__(self, log: MemoryLog, durable: _Durable, msg: _Message) -> None:
        self._log = log
        self._durable = durable
        self._msg = msg

    @property
    def subject(self) -> str:
        return self._msg.subject

    @property
    def seq(self) -> int:
        return self._msg.seq

    @property
    def data(self) -> bytes:
        return self._msg.data

    def decode(self) -> Stored:
        return _decoded(self._msg)

    async def ack(self) -> None:
        self._log.check()
        self._durable.unacked.pop(self._msg.seq, None)


class _Durable:
    """A durable consumer's state, kept by the log under its name: what it delivered and
    when each unacked delivery is due again."""

    def __init__(self, filters: Sequence[str], ack_wait: float) -> None:
        self.filters = list(filters)
        self.ack_wait = ack_wait
        self.next_seq = 1  # the first stream sequence not delivered yet
        self.unacked: dict[int, float] = {}  # stream sequence → monotonic time due again


class MemoryConsumer:
    """A bound durable consumer (`Consumer` of the port)."""

    def __init__(self, log: MemoryLog, durable: _Durable, batch: int) -> None:
        self._log = log
        self._durable = durable
        self._batch = batch

    @property
    def pending(self) -> int:
        d = self._durable
        return sum(
            1
            for m in self._log.messages[d.next_seq - 1 :]
            if any(subjects.matches(f, m.subject) for f in d.filters)
        )

    async def fetch(self, timeout: float) -> list[Delivery]:
        deadline = time.monotonic() + timeout
        while True:
            self._log.check()
            now = time.monotonic()
            got = self._take(now)
            if got:
                return got
            if now >= deadline:
                raise TimeoutError
            wait = min([deadline, *self._durable.unacked.values()]) - now
            await self._log.changed(max(wait, 0.001))

    def _take(self, now: float) -> list[Delivery]:
        d = self._durable
        msgs = self._log.messages
        out: list[Delivery] = []
        for seq in sorted(s for s, due in d.unacked.items() if due <= now):
            if len(out) == self._batch:
                break
            d.unacked[seq] = now + d.ack_wait
            out.append(MemoryDelivery(self._log, d, msgs[seq - 1]))
        while d.next_seq <= len(msgs) and len(out) < self._batch:
            if len(d.unacked) >= MAX_ACK_PENDING:
                break
            m = msgs[d.next_seq - 1]
            d.next_seq += 1
            if any(subjects.matches(f, m.subject) for f in d.filters):
                d.unacked[m.seq] = now + d.ack_wait
                out.append(MemoryDelivery(self._log, d, m))
        return out

    async def close(self) -> None:
        return None


class MemoryBucket:
    """A key-value bucket (`Bucket` of the port)."""

    def __init__(self, log: MemoryLog) -> None:
        self._log = log
        self._values: dict[str, bytes] = {}

    async def get(self, key: str) -> bytes | None:
        self._log.check()
        return self._values.get(key)

    async def put(self, key: str, value: bytes) -> None:
        self._log.check()
        self._values[key] = bytes(value)

    async def purge(self, key: str) -> None:
        self._log.check()
        self._values.pop(key, None)

    async def keys(self) -> list[str]:
        self._log.check()
        return sorted(self._values)


class MemoryIndex:
    """The port's `LogIndex` in memory: the same entries the JetStream index writes
    (`eventstore/index_entries.py`), made from the log on each lookup as far as it has
    grown since the last."""

    def __init__(self, log: MemoryLog) -> None:
        self.log = log
        self._upto = 0
        self._entries: dict[str, list[tuple[int, bytes]]] = {}

    def _catch_up(self) -> None:
        self.log.check()
        for m in self.log.messages[self._upto :]:
            for subject, body in index_entries.entries(m.subject, m.data):
                self._entries.setdefault(subject, []).append((m.seq, body))
            self._upto = m.seq

    async def upto(self) -> int:
        self._catch_up()
        return self._upto

    async def seq_of(self, event_id: str) -> int | None:
        self.log.check()
        return None  # only an index written by earlier code held ids

    async def seqs_of(self, correlation_id: str) -> list[int]:
        self._catch_up()
        found = self._entries.get(index_entries.correlation_subject(correlation_id), [])
        return sorted({seq for seq, _ in found})

    async def migrations_of(self, namespace: str, vmi: str) -> list[str]:
        self._catch_up()
        found = self._entries.get(index_entries.migrations_subject(namespace, vmi), [])
        return list(dict.fromkeys(body.decode() for _, body in found))


class MemoryTrimming:
    """The port's `Trimming` in memory: the log keeps every message (its archive) and
    remembers which left the hot log, which only `last_of` sees: readers read one complete
    log either way, as over JetStream."""

    def __init__(self, log: MemoryLog) -> None:
        self.log = log
        self._floor = Floor(log.stream, 0)
        self.retired: set[int] = set()  # the sequences no longer in the hot log

    async def trimmable(self) -> bool:
        self.log.check()
        return True

    async def floor(self) -> Floor:
        self.log.check()
        return self._floor

    async def record_floor(self, floor: int, pending: Sequence[PendingEnd]) -> None:
        self.log.check()
        self._floor = Floor(self.log.stream, floor, self.log.clock(), tuple(pending))

    async def archived_upto(self) -> int:
        self.log.check()
        return len(self.log.messages)

    async def acked_floor(self) -> int:
        self.log.check()
        floors = [
            (min(d.unacked) - 1) if d.unacked else d.next_seq - 1
            for d in self.log._durables.values()
        ]
        return min(floors, default=2**63)

    async def last_of(self, scope: str, at_least: int) -> int:
        self.log.check()
        last = at_least
        for m in self.log.messages:
            if m.seq not in self.retired and subjects.matches(scope, m.subject):
                last = max(last, m.seq)
        return last

    async def retire(self, scope: str, end: int) -> None:
        self.log.check()
        self.retired |= {
            m.seq for m in self.log.messages[:end] if subjects.matches(scope, m.subject)
        }


class MemoryLog:
    """The `EventLog` port in memory (see the module's docstring)."""

    def __init__(
        self,
        stream: str = "VIRT",
        *,
        duplicate_window: float = 120.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._stream = stream
        self.duplicate_window = duplicate_window
        self.clock = clock
        self.connected = True
        self.messages: list[_Message] = []  # the stream: sequence n at index n - 1
        self.dead_letters: list[_Message] = []  # the dead-letter stream, likewise
        self._aggregates: dict[str, list[int]] = {}  # aggregate key → its sequences
        self._ids: dict[str, tuple[int, float]] = {}  # msg id → (sequence, stored at)
        self._durables: dict[str, _Durable] = {}
        self._buckets: dict[str, MemoryBucket] = {}
        self._grown: asyncio.Event | None = None  # set (and replaced) on every store
        self._trimming = MemoryTrimming(self)
        self._index = MemoryIndex(self)

    @property
    def stream(self) -> str:
        return self._stream

    def index(self) -> MemoryIndex:
        return self._index

    def trimming(self) -> MemoryTrimming:
        return self._trimming

    def check(self) -> None:
        if not self.connected:
            raise Unavailable(f"the in-memory log {self._stream} is disconnected")

    async def changed(self, timeout: float) -> None:
        """Until something is stored, or `timeout` passes."""
        if self._grown is None:
            self._grown = asyncio.Event()
        grown = self._grown
        try:
            async with asyncio.timeout(timeout):
                await grown.wait()
        except TimeoutError:
            pass

    def _store(self, subject: str, data: bytes, msg_id: str, headers: dict[str, str]) -> int:
        seq = len(self.messages) + 1
        at = self.clock()
        self.messages.append(_Message(seq, subject, data, msg_id, headers, at))
        if subject.startswith(f"{subjects.PREFIX}.") and subject.count(".") >= 5:
            self._aggregates.setdefault(subjects.aggregate_key(subject), []).append(seq)
        if msg_id:
            self._ids[msg_id] = (seq, at)
        if self._grown is not None:
            self._grown.set()
            self._grown = None
        return seq

    def store_raw(self, subject: str, data: bytes, headers: dict[str, str] | None = None) -> int:
        """Store bytes that may be no event at all (poison, for tests); their sequence."""
        self.check()
        return self._store(subject, data, "", dict(headers or {}))

    # ------------------------------------------------------------------ writes
    async def ensure(self) -> None:
        self.check()

    async def append(
        self, event: Event, *, expected: int | None = None, msg_id: str | None = None
    ) -> Appended:
        self.check()
        agg = event.meta.aggregate
        subject = subjects.event_subject(agg, event_type(event), event.meta.node)
        msg_id = msg_id or event.meta.event_id
        key = subjects.aggregate_key(subject)
        if expected is not None:
            seqs = self._aggregates.get(key, [])
            actual = seqs[-1] if seqs else 0
            if actual != expected:
                # as JetStream: the expectation is checked before duplicates, so a re-append
                # of an event that landed finds its own id after the expected sequence
                later = [self.messages[s - 1] for s in seqs if s > expected]
                for m in later:
                    if m.msg_id == msg_id:
                        return Appended(seq=m.seq, duplicate=True)
                # every event since `expected` is poison no fold reads: the append stands
                if not (actual > expected and not any(_readable(m) for m in later)):
                    raise ConcurrencyConflict(agg.key, expected, actual)
        seen = self._ids.get(msg_id)
        if seen is not None and self.clock() - seen[1] <= self.duplicate_window:
            return Appended(seq=seen[0], duplicate=True)
        return Appended(seq=self._store(subject, encode(event), msg_id, {}))

    # ------------------------------------------------------------------- reads
    async def last_seq(self, agg: Aggregate) -> int:
        self.check()
        seqs = self._aggregates.get(self._key(agg), [])
        return seqs[-1] if seqs else 0

    @staticmethod
    def _key(agg: Aggregate) -> str:
        return subjects.aggregate_key(subjects.event_subject(agg, "_"))

    async def stream_last_seq(self) -> int:
        self.check()
        return len(self.messages)

    async def load(self, agg: Aggregate) -> list[Stored]:
        self.check()
        out = []
        for seq in self._aggregates.get(self._key(agg), []):
            m = self.messages[seq - 1]
            if _readable(m):
                out.append(_decoded(m))
        return out

    async def get(self, seq: int) -> Stored | None:
        self.check()
        if not 1 <= seq <= len(self.messages):
            return None
        try:
            return _decoded(self.messages[seq - 1])
        except Undecodable:
            return None

    async def seq_at_time(self, when: float) -> int:
        self.check()
        last = 0
        for m in self.messages:
            if m.time > when:
                break
            last = m.seq
        return last

    async def replay(
        self,
        filters: Sequence[str] | None = None,
        *,
        start_seq: int | None = None,
        start_time: float | dt.datetime | None = None,
        until_seq: int | None = None,
        follow: bool = False,
        raw: bool = False,
        on_skip: Callable[[int, str], None] | None = None,
    ) -> AsyncGenerator[Stored, None]:
        self.check()
        patterns = list(filters or [subjects.ALL])
        seq = 1
        if start_seq is not None:
            seq = max(1, start_seq)
        elif start_time is not None:
            t = start_time.timestamp() if isinstance(start_time, dt.datetime) else start_time
            seq = next((m.seq for m in self.messages if m.time >= t), len(self.messages) + 1)
        end = until_seq
        if not follow:
            last = len(self.messages)
            end = last if until_seq is None else min(until_seq, last)
        while True:
            while seq <= len(self.messages) and (end is None or seq <= end):
                m = self.messages[seq - 1]
                seq += 1
                if not any(subjects.matches(p, m.subject) for p in patterns):
                    continue
                try:
                    stored = _decoded(m)
                except Undecodable:
                    if not raw:
                        raise
                    if on_skip is not None:
                        on_skip(m.seq, m.subject)
                    continue
                yield stored
            if not follow or (end is not None and seq > end):
                return
            await self.changed(3600.0)

    async def records(
        self, *, start_seq: int = 1, follow: bool = False, as_archived: bool = False
    ) -> AsyncGenerator[Record, None]:
        self.check()
        seq = max(1, start_seq)
        end = None if follow else len(self.messages)
        while True:
            while seq <= len(self.messages) and (end is None or seq <= end):
                m = self.messages[seq - 1]
                seq += 1
                yield Record(m.seq, m.subject, m.data, len(self.messages) - m.seq, m.time)
            if not follow:
                return
            await self.changed(3600.0)

    # ------------------------------------------------------------ consumers
    async def durable(
        self, name: str, filters: Sequence[str], *, ack_wait: float = 10.0, batch: int = 256
    ) -> MemoryConsumer:
        self.check()
        durable = self._durables.setdefault(name, _Durable(filters, ack_wait))
        return MemoryConsumer(self, durable, batch)

    # ------------------------------------------------------------ dead letters
    async def dead_letter(
        self, service: str, delivery: Delivery | None, error: str, *, data: bytes = b""
    ) -> int:
        self.check()
        headers = {"Virt-Error": error[:4000], "Virt-Service": service}
        if delivery is not None:
            data = delivery.data
            headers["Virt-Original-Subject"] = delivery.subject
            if delivery.seq:
                headers["Virt-Original-Sequence"] = str(delivery.seq)
        seq = len(self.dead_letters) + 1
        self.dead_letters.append(_Message(seq, f"dlq.{service}", data, "", headers, self.clock()))
        return seq

    # ------------------------------------------------------------- key-value
    async def bucket(
        self, name: str, *, create: bool = True, description: str = ""
    ) -> MemoryBucket | None:
        self.check()
        if name not in self._buckets:
            if not create:
                return None
            self._buckets[name] = MemoryBucket(self)
        return self._buckets[name]
