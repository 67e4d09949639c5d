"""Event store over one JetStream stream.

Appends are optimistic per aggregate (`Nats-Expected-Last-Subject-Sequence` scoped by
`...-Subject: virt.<kind>.<ns>.<name>.>`) and idempotent (`Nats-Msg-Id` = event id).
The server checks the expected sequence before the duplicate window, so a re-append of an
event that already landed reports a conflict; `append` then looks for its own event id
after the expected sequence and answers "duplicate" instead: exactly-once either way.
"""

from __future__ import annotations

import contextlib
import datetime as dt
from collections.abc import AsyncIterator, Sequence

import msgspec
from nats.aio.client import Client as NATS
from nats.aio.msg import Msg
from nats.js.api import (
    ConsumerConfig,
    DeliverPolicy,
    DiscardPolicy,
    RetentionPolicy,
    StorageType,
    StreamConfig,
)
from nats.js.client import JetStreamContext
from nats.js.errors import APIError, NotFoundError

from events import subjects
from events.catalog import Event
from events.codec import decode, encode, event_type
from events.meta import Aggregate
from eventstore import nats_headers
from eventstore.settings import StreamSettings

WRONG_LAST_SEQUENCE = 10071
nats_headers.install()


class ConcurrencyConflict(Exception):
    """Another writer appended to the aggregate since the sequence we decided on."""

    def __init__(self, aggregate: str, expected: int, actual: int) -> None:
        super().__init__(f"{aggregate}: expected last sequence {expected}, actual {actual}")
        self.aggregate = aggregate
        self.expected = expected
        self.actual = actual


REDELIVERY_HEADER = "Virt-Redelivery-Of"  # the original stream sequence of a retried event


class Stored(msgspec.Struct, frozen=True):
    """An event as stored: its stream sequence, subject and server timestamp.

    `redelivery_of` > 0 marks a dead letter re-appended by `virtstream dead-letters --retry`:
    the original (at that sequence) was folded already, so folds only advance the
    aggregate's version past the copy and services react to it again."""

    seq: int
    subject: str
    time: float
    event: Event
    redelivery_of: int = 0


class Appended(msgspec.Struct, frozen=True):
    seq: int
    duplicate: bool = False


def _stored(msg: Msg) -> Stored:
    md = msg.metadata
    ts = md.timestamp.timestamp() if md.timestamp else 0.0
    again = (msg.headers or {}).get(REDELIVERY_HEADER, "")
    return Stored(
        seq=md.sequence.stream,
        subject=msg.subject,
        time=ts,
        event=decode(msg.data),
        redelivery_of=int(again) if again.isdigit() else 0,
    )


class EventStore:
    def __init__(self, nc: NATS, settings: StreamSettings | None = None) -> None:
        self.nc = nc
        self.js: JetStreamContext = nc.jetstream()
        self.settings = settings or StreamSettings.from_env()

    @property
    def stream(self) -> str:
        return self.settings.name

    async def ensure(self) -> None:
        """Create the event and dead-letter streams (idempotent)."""
        s = self.settings
        storage = StorageType.FILE if s.storage == "file" else StorageType.MEMORY
        await self._ensure_stream(
            StreamConfig(
                name=s.name,
                subjects=[subjects.ALL],
                retention=RetentionPolicy.LIMITS,
                discard=DiscardPolicy.OLD,
                storage=storage,
                num_replicas=s.replicas,
                duplicate_window=s.duplicate_window_seconds,
                allow_direct=True,
            )
        )
        await self._ensure_stream(
            StreamConfig(
                name=s.dlq_name, subjects=["dlq.>"], storage=storage, num_replicas=s.replicas
            )
        )

    async def _ensure_stream(self, cfg: StreamConfig) -> None:
        try:
            await self.js.stream_info(cfg.name or "")
        except NotFoundError:
            try:
                await self.js.add_stream(cfg)
            except APIError as e:  # another process created it first
                if e.err_code != 10058:
                    raise

    # ------------------------------------------------------------------ writes
    async def append(
        self, event: Event, *, expected: int | None = None, msg_id: str | None = None
    ) -> Appended:
        """Append one event.

        expected: None = no concurrency check, 0 = the aggregate must not exist yet,
        N = the aggregate's last sequence must be N. msg_id defaults to the event id.
        """
        agg = event.meta.aggregate
        subject = subjects.event_subject(agg, event_type(event), event.meta.node)
        msg_id = msg_id or event.meta.event_id
        headers = {"Nats-Msg-Id": msg_id}
        scope = subjects.aggregate_filter(agg.kind, agg.namespace, agg.name)
        if expected is not None:
            headers["Nats-Expected-Last-Subject-Sequence"] = str(expected)
            headers["Nats-Expected-Last-Subject-Sequence-Subject"] = scope
        try:
            ack = await self.js.publish(subject, encode(event), stream=self.stream, headers=headers)
        except APIError as e:
            if e.err_code != WRONG_LAST_SEQUENCE or expected is None:
                raise
            actual = int((e.description or "").rsplit(":", 1)[-1].strip() or -1)
            seq = await self._find_event_id(scope, expected, msg_id)
            if seq is not None:
                return Appended(seq=seq, duplicate=True)
            raise ConcurrencyConflict(agg.key, expected, actual) from e
        return Appended(seq=ack.seq, duplicate=bool(ack.duplicate))

    async def _find_event_id(self, scope: str, after: int, event_id: str) -> int | None:
        async for s in self.replay([scope], start_seq=after + 1):
            if s.event.meta.event_id == event_id:
                return s.seq
        return None

    # ------------------------------------------------------------------- reads
    async def last_seq(self, agg: Aggregate) -> int:
        """The aggregate's last sequence, 0 when it has no events."""
        try:
            msg = await self.js.get_last_msg(
                self.stream, subjects.aggregate_filter(agg.kind, agg.namespace, agg.name)
            )
        except NotFoundError:
            return 0
        return int(msg.seq or 0)

    async def stream_last_seq(self) -> int:
        info = await self.js.stream_info(self.stream)
        return int(info.state.last_seq)

    async def load(self, agg: Aggregate) -> list[Stored]:
        """All events of one aggregate, via a server-side subject filter (no scan)."""
        scope = subjects.aggregate_filter(agg.kind, agg.namespace, agg.name)
        return [s async for s in self.replay([scope])]

    async def replay(
        self,
        filters: Sequence[str] | None = None,
        *,
        start_seq: int | None = None,
        start_time: float | dt.datetime | None = None,
        until_seq: int | None = None,
        follow: bool = False,
        raw: bool = False,
    ) -> AsyncIterator[Stored]:
        """Events matching `filters`, in stream order, through an ordered push consumer.

        Without `follow` it ends at the last matching event that existed when it began
        (or at `until_seq`). Undecodable events raise unless `raw` skips them.
        """
        async for msg in self.replay_msgs(
            filters, start_seq=start_seq, start_time=start_time, until_seq=until_seq, follow=follow
        ):
            try:
                yield _stored(msg)
            except (msgspec.DecodeError, msgspec.ValidationError):
                if not raw:
                    raise

    async def replay_msgs(
        self,
        filters: Sequence[str] | None = None,
        *,
        start_seq: int | None = None,
        start_time: float | dt.datetime | None = None,
        until_seq: int | None = None,
        follow: bool = False,
    ) -> AsyncIterator[Msg]:
        filters = list(filters or [subjects.ALL])
        cfg = ConsumerConfig(filter_subjects=filters)
        if start_seq is not None:
            cfg.deliver_policy = DeliverPolicy.BY_START_SEQUENCE
            cfg.opt_start_seq = max(1, start_seq)
        elif start_time is not None:
            when = (
                start_time
                if isinstance(start_time, dt.datetime)
                else dt.datetime.fromtimestamp(start_time, dt.UTC)
            )
            cfg.deliver_policy = DeliverPolicy.BY_START_TIME
            cfg.opt_start_time = when
        if not follow:
            last = await self.stream_last_seq()
            until_seq = last if until_seq is None else min(until_seq, last)
            if until_seq == 0 or (start_seq is not None and start_seq > until_seq):
                return
        sub = await self.js.subscribe(
            "", stream=self.stream, ordered_consumer=True, config=cfg, idle_heartbeat=2.0
        )
        try:
            if not follow:
                info = await sub.consumer_info()
                # the consumer sequence counts deliveries to us; the stream sequence may point
                # past skipped messages even when nothing matched
                if info.num_pending == 0 and not (info.delivered and info.delivered.consumer_seq):
                    return
            while True:
                try:
                    msg = await sub.next_msg(timeout=None if follow else 5.0)
                except TimeoutError:
                    if follow:
                        continue
                    raise
                seq = msg.metadata.sequence.stream
                if until_seq is not None and seq > until_seq:
                    return
                yield msg
                if not follow and (msg.metadata.num_pending == 0 or seq == until_seq):
                    return
        finally:
            await sub.unsubscribe()

    # ------------------------------------------------------------ dead letters
    async def dead_letter(self, service: str, msg: Msg | None, data: bytes, error: str) -> int:
        """Park a message a service could not handle, with the error and its origin."""
        headers = {"Virt-Error": error[:4000], "Virt-Service": service}
        if msg is not None:
            headers["Virt-Original-Subject"] = msg.subject
            # a core-NATS message has no JetStream metadata
            with contextlib.suppress(Exception):
                headers["Virt-Original-Sequence"] = str(msg.metadata.sequence.stream)
        ack = await self.js.publish(
            f"dlq.{service}", data, stream=self.settings.dlq_name, headers=headers
        )
        return int(ack.seq)
