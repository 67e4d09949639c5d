"""The event log's JetStream adapter: one stream, the only module that knows its headers.

Appends are optimistic per aggregate (`Nats-Expected-Last-Subject-Sequence` scoped by
`...-Subject: virt.<kind>.<ns>.<name>.>`) and idempotent (`Nats-Msg-Id` = event id).
The server checks the expected sequence before the duplicate window, so a re-append of an
event that already landed reports a conflict; `append` then looks for its own event id
after the expected sequence and answers "duplicate" instead: exactly-once either way.

nats-py's errors do not pass its public methods: they raise the port's
(`eventstore/nats_errors.py`).
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import time
from collections.abc import AsyncGenerator, Callable, Sequence

import msgspec
from nats.aio.client import Client as NATS
from nats.aio.msg import Msg
from nats.errors import ConnectionClosedError
from nats.js.api import (
    AckPolicy,
    ConsumerConfig,
    DeliverPolicy,
    DiscardPolicy,
    RetentionPolicy,
    StorageType,
    StreamConfig,
)
from nats.js.client import JetStreamContext
from nats.js.errors import APIError, BucketNotFoundError, NotFoundError
from nats.js.kv import KeyValue

from events import subjects
from events.catalog import Event
from events.codec import decode, encode, event_type
from events.envelope import Appended, Stored
from events.meta import Aggregate
from eventstore import archive, checkpoints, direct, nats_headers, push, records, reply
from eventstore.index import Index
from eventstore.kv import JsBucket, find_bucket, make_bucket
from eventstore.nats_errors import translated
from eventstore.port import ConcurrencyConflict, Delivery, LogIndex, Record, Undecodable
from eventstore.pull import Puller
from eventstore.settings import StreamSettings
from eventstore.trimming import JsTrimming

WRONG_LAST_SEQUENCE = 10071
nats_headers.install()


REDELIVERY_HEADER = "Virt-Redelivery-Of"  # the original stream sequence of a retried event
# an idle ordered consumer hears from the server this often; missed beats are how its
# reader learns of a server lost under it (a stream leader killed: the api's fold resumes
# on another within a request's timeout only at 2 s)
IDLE_HEARTBEAT = 2.0


def _record(msg: Msg) -> Record:
    at = reply.position(msg)
    again = (msg.headers or {}).get(REDELIVERY_HEADER, "")
    redelivery_of = int(again) if again.isdigit() else 0
    return Record(at.seq, msg.subject, msg.data, at.pending, at.time, redelivery_of)


def _stored(msg: Msg) -> Stored:
    return records.stored(_record(msg))


def _own_subject(msg: Msg) -> bool:
    """An archived message given its subject in the hot log back, computed from its event
    (`archive.original_subject`); False: undecodable, its subject left as it is."""
    if not archive.collapsed(msg.subject):
        return True
    try:
        msg.subject = archive.original_subject(msg.subject, decode(msg.data))
    except (msgspec.DecodeError, msgspec.ValidationError):
        return False
    return True


def _with_own_subject(msg: Msg) -> bool:
    _own_subject(msg)
    return True  # an undecodable one too: its reader skips or refuses it


def _kept(filters: Sequence[str] | None) -> Callable[[Msg], bool]:
    """Whether an archived message, given its own subject back, matches one of `filters`:
    an undecodable one cannot tell and is left out (an append past it still stands:
    `_after`'s rule for poison)."""
    patterns = list(filters or [subjects.ALL])

    def keep(msg: Msg) -> bool:
        return _own_subject(msg) and any(subjects.matches(p, msg.subject) for p in patterns)

    return keep


class JsDelivery:
    """A durable consumer's message (`Delivery` of the port)."""

    __slots__ = ("msg",)

    def __init__(self, msg: Msg) -> None:
        self.msg = msg

    @property
    def subject(self) -> str:
        return self.msg.subject

    @property
    def seq(self) -> int:
        with contextlib.suppress(Exception):  # a core-NATS message has no metadata
            return int(self.msg.metadata.sequence.stream)
        return 0

    @property
    def data(self) -> bytes:
        return self.msg.data

    def decode(self) -> Stored:
        return _stored(self.msg)

    async def ack(self) -> None:
        with translated():
            await self.msg.ack()


class JsConsumer:
    """A bound durable pull consumer (`Consumer` of the port), pulled without stalls."""

    def __init__(self, psub: JetStreamContext.PullSubscription, batch: int) -> None:
        self.psub = psub
        self.puller = Puller(psub, batch)

    @property
    def pending(self) -> int:
        return self.puller.pending

    async def fetch(self, timeout: float) -> list[Delivery]:
        try:
            with translated():
                msgs = await self.puller.fetch(timeout)
        except TimeoutError as e:  # none came (or the pull went unanswered): idle
            raise TimeoutError from e
        return [JsDelivery(m) for m in msgs]

    async def close(self) -> None:
        with contextlib.suppress(Exception):
            await self.psub.unsubscribe()


class JetStreamStore:
    def __init__(self, nc: NATS, settings: StreamSettings | None = None) -> None:
        self.nc = nc
        self.js: JetStreamContext = nc.jetstream()
        self.settings = settings or StreamSettings.from_env()
        self._floor = (0.0, 0)  # (monotonic time read, the hot log's floor)
        self._floor_kv: KeyValue | None = None  # the bucket holding it, once it exists

    @property
    def archive(self) -> str:
        return archive.archive_name(self.stream)

    async def floor(self) -> int:
        """The hot log's floor (0: complete), read at most once a second: before it, the
        archive holds the events an ended aggregate took out of the hot log."""
        if not self.settings.archive:
            return 0
        read_at, value = self._floor
        if time.monotonic() - read_at > 1.0:
            if self._floor_kv is None:
                try:
                    self._floor_kv = await self.js.key_value(checkpoints.BUCKET)
                except (BucketNotFoundError, NotFoundError):  # no floor written yet
                    self._floor = (time.monotonic(), 0)
                    return 0
            value = await archive.floor_in(self._floor_kv, self.stream)
            self._floor = (time.monotonic(), value)
        return value

    @property
    def stream(self) -> str:
        return self.settings.name

    def index(self) -> LogIndex:
        """The index stream beside the event stream (`eventstore/index.py`; kept by the
        upkeep's `Indexer`, empty until it runs)."""
        return Index(self)

    def trimming(self) -> JsTrimming | None:
        """The hot log's upkeep beside the archive; None for a stream kept without one."""
        return JsTrimming(self) if self.settings.archive else None

    @property
    def connected(self) -> bool:
        return bool(self.nc.is_connected)

    async def ensure(self) -> None:
        """Create the event and dead-letter streams (idempotent). The event stream denies
        message deletes; it denies purges too unless it is the hot log of an archive
        (`eventstore/archive.py`: the archive, a mirror, denies both, and only the
        stream's owner may purge an ended aggregate from the hot log). Dead letters are
        deleted once retried, so their stream allows it."""
        with translated():
            await self._ensure()

    async def _ensure(self) -> None:
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
                deny_delete=True,
                deny_purge=not s.archive,
            )
        )
        await self._ensure_stream(
            StreamConfig(
                name=s.dlq_name, subjects=["dlq.>"], storage=storage, num_replicas=s.replicas
            )
        )

    async def _ensure_stream(self, cfg: StreamConfig) -> None:
        try:
            info = await self.js.stream_info(cfg.name or "")
        except NotFoundError:
            try:
                await self.js.add_stream(cfg)
            except APIError as e:  # another process created it first
                if e.err_code != 10058:
                    raise
            return
        # a stream made before the protections: turn them on (they can never be turned off)
        have = info.config
        if (cfg.deny_delete and not have.deny_delete) or (cfg.deny_purge and not have.deny_purge):
            have.deny_delete = have.deny_delete or cfg.deny_delete
            have.deny_purge = have.deny_purge or cfg.deny_purge
            await self.js.update_stream(have)

    # ------------------------------------------------------------------ writes
    async def append(
        self, event: Event, *, expected: int | None = None, msg_id: str | None = None
    ) -> Appended:
        """Append one event.

        expected: None = no concurrency check, 0 = the aggregate must not exist yet,
        N = the aggregate's last sequence must be N. msg_id defaults to the event id.
        """
        with translated():
            return await self._append(event, expected, msg_id)

    async def _append(self, event: Event, expected: int | None, msg_id: str | None) -> Appended:
        agg = event.meta.aggregate
        subject = subjects.event_subject(agg, event_type(event), event.meta.node)
        msg_id = msg_id or event.meta.event_id
        headers = {"Nats-Msg-Id": msg_id}
        scope = subjects.aggregate_filter(agg.kind, agg.namespace, agg.name)
        if expected is not None:
            headers["Nats-Expected-Last-Subject-Sequence"] = str(expected)
            headers["Nats-Expected-Last-Subject-Sequence-Subject"] = scope
        data = encode(event)
        while True:
            try:
                ack = await self.js.publish(subject, data, stream=self.stream, headers=headers)
            except APIError as e:
                if e.err_code != WRONG_LAST_SEQUENCE or expected is None:
                    raise
                actual = int((e.description or "").rsplit(":", 1)[-1].strip() or -1)
                seq, only_poison = await self._after(scope, expected, msg_id)
                if seq is not None:
                    return Appended(seq=seq, duplicate=True)
                if only_poison and actual > expected:
                    # Every event since `expected` is one no fold can read (and every fold
                    # skips): the aggregate is as it was decided on, so the append stands
                    # on the poison's sequence instead of conflicting forever.
                    expected = actual
                    headers["Nats-Expected-Last-Subject-Sequence"] = str(expected)
                    continue
                raise ConcurrencyConflict(agg.key, expected, actual) from e
            return Appended(seq=ack.seq, duplicate=bool(ack.duplicate))

    async def _after(self, scope: str, after: int, event_id: str) -> tuple[int | None, bool]:
        """The aggregate's events after `after`: the sequence of `event_id` among them (by
        the idempotency header, nothing decoded), else whether all of them are poison
        (decoded only to tell; the lookup stops at the first readable one)."""
        only_poison = True
        async for msg in self._replay_msgs([scope], start_seq=after + 1):
            if (msg.headers or {}).get("Nats-Msg-Id") == event_id:
                return int(msg.metadata.sequence.stream), False
            if only_poison:
                try:
                    decode(msg.data)
                except (msgspec.DecodeError, msgspec.ValidationError):
                    continue
                only_poison = False
        return None, only_poison

    # ------------------------------------------------------------------- reads
    async def last_seq(self, agg: Aggregate) -> int:
        """The aggregate's last sequence, 0 when it has no events."""
        with translated():
            try:
                msg = await self.js.get_last_msg(
                    self.stream, subjects.aggregate_filter(agg.kind, agg.namespace, agg.name)
                )
            except NotFoundError:
                return 0
        return int(msg.seq or 0)

    async def stream_last_seq(self) -> int:
        with translated():
            info = await self.js.stream_info(self.stream)
        return int(info.state.last_seq)

    async def load(self, agg: Aggregate) -> list[Stored]:
        """All events of one aggregate, via a server-side subject filter (no scan)."""
        scope = subjects.aggregate_filter(agg.kind, agg.namespace, agg.name)
        return [s async for s in self.replay([scope], raw=True)]

    async def get(self, seq: int) -> Stored | None:
        with translated():
            try:
                msg = await self.js.get_msg(self.stream, seq)
            except NotFoundError:
                if not await self.floor():
                    return None
                try:  # an ended aggregate's event: in the archive
                    msg = await self.js.get_msg(self.archive, seq)
                except NotFoundError:
                    return None
        try:
            ev = decode(msg.data or b"")
        except (msgspec.DecodeError, msgspec.ValidationError):
            return None
        ts = msg.time.timestamp() if msg.time else 0.0
        subject = archive.original_subject(msg.subject or "", ev)
        return Stored(seq=seq, subject=subject, time=ts, event=ev)

    async def seq_at_time(self, when: float) -> int:
        """The server seeks to the first message after `when`: one message is read (from
        the archive when the hot log lacks ended aggregates' events)."""
        with translated():
            if await self.floor():
                with contextlib.suppress(NotFoundError):
                    async with contextlib.aclosing(
                        self._stream_msgs(self.archive, None, start_time=when + 1e-6)
                    ) as msgs:
                        async for msg in msgs:
                            return int(msg.metadata.sequence.stream) - 1
            async with contextlib.aclosing(self._replay_msgs(start_time=when + 1e-6)) as msgs:
                async for msg in msgs:
                    return int(msg.metadata.sequence.stream) - 1
        return await self.stream_last_seq()

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
        """Events matching `filters`, in stream order, through an ordered push consumer.

        Without `follow` it ends at the last matching event that existed when it began
        (or at `until_seq`). Undecodable events raise `Undecodable` unless `raw` skips them;
        `on_skip(seq, subject)` hears of each skipped one.
        """
        msgs = self._replay_msgs(
            filters,
            start_seq=start_seq,
            start_time=start_time,
            until_seq=until_seq,
            follow=follow,
            own_subjects=False,
        )
        # a caller that stops early unsubscribes now, not when the generator is collected
        with translated():
            async with contextlib.aclosing(msgs):
                async for msg in msgs:
                    try:
                        stored = _stored(msg)
                    except Undecodable:
                        if not raw:
                            raise
                        if on_skip is not None:
                            on_skip(int(msg.metadata.sequence.stream), msg.subject)
                        continue
                    yield stored

    async def records(
        self, *, start_seq: int = 1, follow: bool = False, as_archived: bool = False
    ) -> AsyncGenerator[Record, None]:
        msgs = self._replay_msgs(start_seq=start_seq, follow=follow, own_subjects=not as_archived)
        with translated():
            async with contextlib.aclosing(msgs):
                async for msg in msgs:
                    yield _record(msg)

    async def _replay_msgs(
        self,
        filters: Sequence[str] | None = None,
        *,
        start_seq: int | None = None,
        start_time: float | dt.datetime | None = None,
        until_seq: int | None = None,
        follow: bool = False,
        own_subjects: bool = True,
    ) -> AsyncGenerator[Msg, None]:
        """What starts before the hot log's floor is read from the archive (the same
        sequences: a mirror) as far as it holds, then from the hot log: one consumer
        where the archive has caught up (it usually has), instead of one on each.

        A bounded read of one filter narrower than the whole log (an aggregate, a
        namespace's kind: what debugging and appends read) takes batched direct gets
        instead (`eventstore/direct.py`): a couple of requests, where a consumer's set-up
        and its search past the last match grow with the stream. From the hot log only
        with one replica, where a direct get cannot lag the leader.

        The archive's messages come with their subjects in the hot log (`own_subjects`;
        `replay` gives them in `_stored`, from the event it decodes anyway), and a filter
        narrower than an aggregate is read wider there and kept by them (`archive.served`)."""
        one = filters[0] if filters and len(filters) == 1 else None
        narrow = one is not None and one != subjects.ALL and not follow and start_time is None
        floor = await self.floor()
        if floor and (start_seq or 0) < floor:
            # the archive's subjects are its aggregates' (`archive.served`)
            wide, sift = archive.served(filters)
            keep = _kept(filters) if sift else None
            if keep is None and own_subjects:  # (`replay` decodes anyway: `_stored` does it)
                keep = _with_own_subject
            if narrow and wide is not None and len(wide) == 1:
                # what the archive holds, asked meanwhile: the hot log is read after it
                # (from an earlier start the server would walk its blocks in between)
                holds = asyncio.ensure_future(self.js.stream_info(self.archive))
                try:
                    last = 0
                    async with contextlib.aclosing(
                        self._narrow_msgs(self.archive, wide[0], start_seq or 1, until_seq)
                    ) as old:
                        async for msg in old:
                            last = reply.position(msg).seq
                            if keep is None or keep(msg):
                                yield msg
                    held = int((await holds).state.last_seq)
                finally:
                    holds.cancel()
                start_seq = max(held, last) + 1
                if until_seq is not None and start_seq > until_seq:
                    return
            else:
                held = int((await self.js.stream_info(self.archive)).state.last_seq)
                last = 0
                before = held if until_seq is None else min(held, until_seq)
                async with contextlib.aclosing(
                    self._stream_msgs(
                        self.archive,
                        wide,
                        start_seq=start_seq,
                        start_time=start_time,
                        until_seq=before,
                        last=held,
                    )
                ) as old:
                    async for msg in old:
                        last = reply.position(msg).seq
                        if keep is None or keep(msg):
                            yield msg
                if until_seq is not None and until_seq <= held:
                    return
                start_seq, start_time = max(held, last) + 1, None
        if narrow and one is not None and self.settings.replicas == 1:
            hot = self._narrow_msgs(self.stream, one, start_seq or 1, until_seq)
        else:
            hot = self._stream_msgs(
                self.stream,
                filters,
                start_seq=start_seq,
                start_time=start_time,
                until_seq=until_seq,
                follow=follow,
            )
        async with contextlib.aclosing(hot) as msgs:
            async for msg in msgs:
                yield msg

    async def _narrow_msgs(
        self, stream: str, one: str, start_seq: int, until_seq: int | None
    ) -> AsyncGenerator[Msg, None]:
        """Direct gets while few are left, a consumer for a long rest."""
        # the hot log's direct gets are the archive's to answer too (`direct`)
        mirrored = stream == self.stream and self.settings.archive
        reader = direct.Reader(
            self.nc, stream, one, start_seq=start_seq, until_seq=until_seq, mirrored=mirrored
        )
        async with contextlib.aclosing(reader.messages()) as msgs:
            async for msg in msgs:
                yield msg
        if reader.rest is not None:
            rest = self._stream_msgs(stream, [one], start_seq=reader.rest, until_seq=until_seq)
            async with contextlib.aclosing(rest) as msgs:
                async for msg in msgs:
                    yield msg

    async def _stream_msgs(
        self,
        stream: str,
        filters: Sequence[str] | None = None,
        *,
        start_seq: int | None = None,
        start_time: float | dt.datetime | None = None,
        until_seq: int | None = None,
        follow: bool = False,
        last: int | None = None,
    ) -> AsyncGenerator[Msg, None]:
        """`last`: the stream's last sequence when the caller has just read it."""
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
            if last is None:
                last = int((await self.js.stream_info(stream)).state.last_seq)
            until_seq = last if until_seq is None else min(until_seq, last)
            if until_seq == 0 or (start_seq is not None and start_seq > until_seq):
                return
        # No client-side limit on what waits to be read: nats-py drops a message past its
        # subscription's pending limits (256 MiB by default) after its ordered consumer
        # has counted it as delivered, so the drop goes unnoticed and the event is lost to
        # the reader (seen replaying 1,000,000 events into a fold slower than the server).
        # The server's flow control is what bounds the backlog.
        sub = await self.js.subscribe(
            "",
            stream=stream,
            ordered_consumer=True,
            config=cfg,
            idle_heartbeat=IDLE_HEARTBEAT,
            pending_msgs_limit=0,
            pending_bytes_limit=0,
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
                    msg = await push.next_msg(sub, None if follow else 5.0)
                except TimeoutError:
                    if follow:
                        continue
                    raise
                seq, pending, _ = reply.position(msg)
                if until_seq is not None and seq > until_seq:
                    return
                yield msg
                if not follow and (pending == 0 or seq == until_seq):
                    return
        finally:
            # a generator closed after its connection (a caller's early exit) has nothing left
            # to unsubscribe from
            with contextlib.suppress(ConnectionClosedError):
                await sub.unsubscribe()

    # ------------------------------------------------------------ consumers
    async def durable(
        self, name: str, filters: Sequence[str], *, ack_wait: float = 10.0, batch: int = 256
    ) -> JsConsumer:
        with translated():
            return await self._durable(name, filters, ack_wait, batch)

    async def _durable(
        self, name: str, filters: Sequence[str], ack_wait: float, batch: int
    ) -> JsConsumer:
        cfg = ConsumerConfig(
            durable_name=name,
            filter_subjects=list(filters),
            ack_policy=AckPolicy.EXPLICIT,
            deliver_policy=DeliverPolicy.ALL,
            ack_wait=ack_wait,
            max_ack_pending=4096,
            max_deliver=-1,
        )
        try:
            info = await self.js.consumer_info(self.stream, name)
        except NotFoundError:
            await self.js.add_consumer(self.stream, cfg)
        else:
            had = info.config.filter_subjects or [info.config.filter_subject or subjects.ALL]
            if sorted(had) != sorted(filters):
                # the service's filters changed (an upgrade): the consumer goes on from
                # where it stands with the new ones
                info.config.filter_subjects, info.config.filter_subject = list(filters), None
                await self.js.add_consumer(self.stream, info.config)
        psub = await self.js.pull_subscribe_bind(name, self.stream)
        return JsConsumer(psub, batch)

    # ------------------------------------------------------------ dead letters
    async def dead_letter(
        self, service: str, delivery: Delivery | None, error: str, *, data: bytes = b""
    ) -> int:
        """Park a message a service could not handle, with the error and its origin."""
        headers = {"Virt-Error": error[:4000], "Virt-Service": service}
        if delivery is not None:
            data = delivery.data
            headers["Virt-Original-Subject"] = delivery.subject
            if delivery.seq:
                headers["Virt-Original-Sequence"] = str(delivery.seq)
        with translated():
            ack = await self.js.publish(
                f"dlq.{service}", data, stream=self.settings.dlq_name, headers=headers
            )
        return int(ack.seq)

    # ------------------------------------------------------------- key-value
    async def bucket(
        self, name: str, *, create: bool = True, description: str = ""
    ) -> JsBucket | None:
        """A KV bucket with one value per key, on the stream's storage and replicas."""
        with translated():
            if not create:
                return await find_bucket(self.js, name)
            return await make_bucket(self.js, name, self.settings, description)
