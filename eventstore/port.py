"""The event log as the services see it: a port, its errors, and two adapters behind it
that pass the same contract suite (`tests/integration/test_store_contract.py`): JetStream
(`eventstore/jetstream.py`, on a real nats-server) and memory (`eventstore/memory.py`, for
tests of whole services in one process).

The port owns its errors: an adapter raises only `EventLogError`s (and `TimeoutError` from
an idle `Consumer.fetch`), translated from its client's at its edge, so no caller knows the
transport."""

from __future__ import annotations

import datetime as dt
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Protocol

from events.catalog import Event
from events.envelope import Appended, Stored
from events.meta import Aggregate
from eventstore.floor import Floor, PendingEnd


class EventLogError(Exception):
    """Every failure the event log reports."""


class ConcurrencyConflict(EventLogError):
    """Another writer appended to the aggregate since the sequence we decided on."""

    def __init__(self, aggregate: str, expected: int, actual: int) -> None:
        super().__init__(f"{aggregate}: expected last sequence {expected}, actual {actual}")
        self.aggregate = aggregate
        self.expected = expected
        self.actual = actual


class Undecodable(EventLogError):
    """A stored message that is not an event of the catalog (poison)."""


class Unavailable(EventLogError):
    """The log did not answer: no connection (lost, reconnecting), no server or stream
    leader responding, a request unanswered in time. Not the caller's fault and usually
    passing. An append that ends with it may or may not be stored: appended again with the
    same `msg_id`, it is stored once."""


class TimedOut(Unavailable, TimeoutError):
    """A request to the log went unanswered in time (still a `TimeoutError`, as a bounded
    wait's is)."""


class Refused(EventLogError):
    """The log answered with an error a retry does not fix (a missing stream, a request
    over its limits, no permission), or the client would not send it."""


class Record:
    """One stored message as its bytes, for a reader that copies the log rather than folds
    it (the debugging index) or decodes it elsewhere (`eventstore/records.py`): its
    sequence, subject, data, how many messages followed it in the log when it was read (0:
    it was the last), when it was stored and the sequence it retries (0: none)."""

    __slots__ = ("data", "pending", "redelivery_of", "seq", "subject", "time")

    def __init__(
        self,
        seq: int,
        subject: str,
        data: bytes,
        pending: int,
        time: float = 0.0,
        redelivery_of: int = 0,
    ) -> None:
        self.seq = seq
        self.subject = subject
        self.data = data
        self.pending = pending
        self.time = time
        self.redelivery_of = redelivery_of


class Delivery(Protocol):
    """One message handed to a durable consumer, decoded or not; acked once handled."""

    @property
    def subject(self) -> str: ...

    @property
    def seq(self) -> int: ...

    @property
    def data(self) -> bytes: ...

    def decode(self) -> Stored:
        """The stored event; raises `Undecodable` for poison."""
        ...

    async def ack(self) -> None: ...


class Consumer(Protocol):
    """A durable consumer: deliveries survive the process; unacked ones come again."""

    @property
    def pending(self) -> int:
        """The backlog as of the last fetch."""
        ...

    async def fetch(self, timeout: float) -> list[Delivery]:
        """The next deliveries; raises TimeoutError when none came within `timeout`."""
        ...

    async def close(self) -> None: ...


class Bucket(Protocol):
    """A key-value bucket beside the log (checkpoints, shadows): the latest value per key,
    each value at most the server's max payload."""

    async def get(self, key: str) -> bytes | None:
        """The value, None when the key is absent."""
        ...

    async def put(self, key: str, value: bytes) -> None: ...

    async def purge(self, key: str) -> None:
        """Forget the key (absent already: nothing happens)."""
        ...

    async def keys(self) -> list[str]:
        """The keys that hold a value, sorted (for small buckets: it reads them all)."""
        ...


class LogIndex(Protocol):
    """The debugging index an adapter keeps beside its log (`eventstore/index.py`): each
    lookup answers None (or nothing) when it cannot tell, and the caller reads the log."""

    async def upto(self) -> int:
        """The last sequence the index covers (0: it covers nothing yet)."""
        ...

    async def seq_of(self, event_id: str) -> int | None: ...

    async def seqs_of(self, correlation_id: str) -> list[int]:
        """The sequences of the correlation's events, ascending (entries after `upto()`
        may be among them: the index is being written)."""
        ...

    async def migrations_of(self, namespace: str, vmi: str) -> list[str]:
        """The names of the migrations that named the VMI, up to `upto()`."""
        ...


class Trimming(Protocol):
    """The hot log's upkeep, where the log keeps a complete archive beside a bounded hot
    log (`eventstore/archive.py`): readers see one complete log either way; this is what
    the retirer needs to let ended aggregates leave the hot log."""

    async def trimmable(self) -> bool:
        """The hot log may be purged (one made before the archive denies it)."""
        ...

    async def floor(self) -> Floor:
        """The recorded floor and the pending work recorded with it (floor 0: never
        trimmed)."""
        ...

    async def record_floor(self, floor: int, pending: Sequence[PendingEnd]) -> None:
        """Record the floor and the work found under it, before anything under it goes."""
        ...

    async def archived_upto(self) -> int:
        """The last sequence the archive holds (0: none)."""
        ...

    async def acked_floor(self) -> int:
        """The lowest ack floor of the durable consumers (2**63 without one): nothing a
        consumer has not passed may leave the hot log."""
        ...

    async def last_of(self, scope: str, at_least: int) -> int:
        """The last sequence in the hot log of the subjects `scope` (an aggregate filter)
        matches, at least `at_least`."""
        ...

    async def retire(self, scope: str, end: int) -> None:
        """One ended aggregate's events up to `end` leave the hot log (the archive keeps
        them; a later aggregate of the same name stays)."""
        ...


class EventLog(Protocol):
    @property
    def stream(self) -> str: ...

    def index(self) -> LogIndex | None:
        """The log's debugging index, None when the adapter keeps none (the readers then
        read the aggregates' subjects alone)."""
        ...

    def trimming(self) -> Trimming | None:
        """The hot log's upkeep, None when the log keeps no archive (then nothing leaves)."""
        ...

    @property
    def connected(self) -> bool:
        """The log is reachable now (False while a connection is down: an append would
        wait for the reconnect)."""
        ...

    async def ensure(self) -> None:
        """Create the event and dead-letter streams (idempotent)."""
        ...

    async def append(
        self, event: Event, *, expected: int | None = None, msg_id: str | None = None
    ) -> Appended:
        """expected: None = no check, 0 = the aggregate must not exist, N = its last
        sequence must be N (else `ConcurrencyConflict`). msg_id (default: the event id) is
        the idempotency key: the same key again is a duplicate, never a second event."""
        ...

    async def last_seq(self, agg: Aggregate) -> int: ...

    async def stream_last_seq(self) -> int: ...

    async def load(self, agg: Aggregate) -> list[Stored]:
        """All decodable events of one aggregate."""
        ...

    async def get(self, seq: int) -> Stored | None:
        """The event at a stream sequence (None when absent or undecodable)."""
        ...

    async def seq_at_time(self, when: float) -> int:
        """The last sequence stored at or before `when` (server time)."""
        ...

    def replay(
        self,
        filters: Sequence[str] | None = None,
        *,
        start_seq: int | None = None,
        start_time: float | dt.datetime | None = None,
        until_seq: int | None = None,
        follow: bool = False,
        raw: bool = False,
        on_skip: Callable[[int, str], None] | None = None,
    ) -> AsyncIterator[Stored]:
        """Events matching `filters` in stream order; ends at the last one that existed
        when it began (or `until_seq`) unless `follow`. Undecodable events raise
        `Undecodable` unless `raw` skips them (telling `on_skip(seq, subject)`, so a fold
        can move past them)."""
        ...

    def records(
        self, *, start_seq: int = 1, follow: bool = False, as_archived: bool = False
    ) -> AsyncIterator[Record]:
        """Every stored message from `start_seq` on, undecoded, in stream order; ends at the
        last one that existed when it began unless `follow`. `as_archived`: an archived
        message keeps the archive's subject (`records.stored` gives it its own as it
        decodes it), for a reader that decodes elsewhere."""
        ...

    async def durable(
        self, name: str, filters: Sequence[str], *, ack_wait: float, batch: int
    ) -> Consumer:
        """Bind (creating it if needed) the durable consumer `name`."""
        ...

    async def dead_letter(
        self, service: str, delivery: Delivery | None, error: str, *, data: bytes = b""
    ) -> int:
        """Park a message a service could not handle, with the error and its origin
        (`data`: the bytes to park when there is no delivery)."""
        ...

    async def bucket(
        self, name: str, *, create: bool = True, description: str = ""
    ) -> Bucket | None:
        """The key-value bucket `name` (made with the stream's storage and replicas when
        `create`; else None when it does not exist)."""
        ...
