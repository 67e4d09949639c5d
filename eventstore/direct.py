"""Bounded reads of one subject filter by batched direct gets (`$JS.API.DIRECT.GET`, a
`batch` of `next_by_subj`): no consumer is made, so a read of one aggregate costs a
couple of requests however long the stream is.

Each message of a batch carries `Nats-Num-Pending`: how many matching messages follow it
in the stream. The first request asks for one message, the second, from the same start,
for it and exactly what is left. Asking for more than is left is what makes a read grow
with the stream: the server then looks for the next match through every block after the
last one (measured on a 1,000,000-event archive: ~6 ms for an aggregate's ten events with
a batch of 256, ~1.5 ms with ten asked, ~0.5 ms for one); an ephemeral consumer pays the
same search after its last delivery. For the same reason a read should start where its
first match may be: from a later start the server walks the blocks in between.

A direct get may be answered by any replica of a replicated stream, which may lag the
leader by what is in flight: the caller uses it where that cannot matter (the archive,
or a stream of one replica). A mirror answers its origin's direct gets too (the server
turns `mirror_direct` on for a mirror of a stream that allows them: the archive answered
a sixth to a half of the hot log's here), and a mirror lags by what it has not copied
yet: an event just appended, the very one a reader reacts to. An answer that names
another stream than the one asked is therefore not used: the request is sent again, and
after `ATTEMPTS` answers none of which the stream gave, `rest` says where a consumer
(which reads the stream itself) goes on. A "none" names no stream: on a `mirrored`
stream it is asked again the same way."""

from __future__ import annotations

import contextlib
import datetime as dt
import json
from collections.abc import AsyncGenerator

from nats.aio.client import Client as NATS
from nats.aio.msg import Msg
from nats.errors import ConnectionClosedError, NoRespondersError
from nats.js.errors import APIError

MOST = 256  # matching messages left past which a consumer reads on (`Reader.rest`)
TIMEOUT = 5.0  # seconds to wait for each message of a batch
# a request a mirror answered is asked again, at most this often in all (about one answer
# in two was the archive's on an idle server), before a consumer reads instead
ATTEMPTS = 6


class Reader:
    """The stream's messages on `subject_filter` from `start_seq` (up to `until_seq`), in
    order, while what is left is small: when more than `MOST` follow the first, `messages`
    ends after it and `rest` names the sequence a consumer should read on from (a
    consumer streams a long read faster than requests of batches do). So it does when an
    answer may have come from a mirror (`mirrored`: the stream has one that answers its
    direct gets), which may lag. Each message is a `Msg` whose `metadata` names its stream
    sequence and time."""

    def __init__(
        self,
        nc: NATS,
        stream: str,
        subject_filter: str,
        *,
        start_seq: int,
        until_seq: int | None = None,
        mirrored: bool = False,
    ) -> None:
        self.nc, self.stream, self.subject_filter = nc, stream, subject_filter
        self.start_seq, self.until_seq = max(1, start_seq), until_seq
        self.mirrored = mirrored
        self.rest: int | None = None

    async def messages(self) -> AsyncGenerator[Msg, None]:
        first = await self._ask(1)
        if first is None:
            self.rest = self.start_seq
            return
        if not first or self._past(first[0]):
            return
        yield first[0]
        left, seen = first[0].metadata.num_pending, first[0].metadata.sequence.stream
        if left > MOST:
            self.rest = seen + 1
            return
        if left == 0:
            return
        # the rest is asked from the same start, the first again with it: the server counts
        # what matches from the stream's first sequence on through its per-subject index,
        # but from a later one by loading blocks (from a start in the stream's second half,
        # every block after it: ~2.6 s at 1,000,000 events with the blocks not in memory)
        more = await self._ask(left + 1)
        if more is None:
            self.rest = seen + 1
            return
        for msg in more:
            if msg.metadata.sequence.stream <= seen:
                continue
            if self._past(msg):
                return
            yield msg

    async def _ask(self, batch: int) -> list[Msg] | None:
        """One request's messages as the stream itself gave them, asked again when a mirror
        answered; None when none of `ATTEMPTS` answers can be trusted (on a `mirrored`
        stream a "none" may be the mirror's too: it names no stream)."""
        for _ in range(ATTEMPTS):
            try:
                async with contextlib.aclosing(self._batch(batch)) as msgs:
                    got = [msg async for msg in msgs]
            except _Elsewhere:
                continue
            if got or not self.mirrored:
                return got
        return None

    def _batch(self, batch: int) -> AsyncGenerator[Msg, None]:
        return _batch(self.nc, self.stream, self.subject_filter, self.start_seq, batch)

    def _past(self, msg: Msg) -> bool:
        return self.until_seq is not None and msg.metadata.sequence.stream > self.until_seq


class _Elsewhere(Exception):
    """A direct get was answered by another stream than the one asked: a mirror of it."""


async def _batch(
    nc: NATS, stream: str, subject_filter: str, seq: int, batch: int
) -> AsyncGenerator[Msg, None]:
    inbox = nc.new_inbox()
    sub = await nc.subscribe(inbox)
    try:
        request = {"seq": seq, "next_by_subj": subject_filter, "batch": batch}
        await nc.publish(f"$JS.API.DIRECT.GET.{stream}", json.dumps(request).encode(), reply=inbox)
        while True:
            reply = await sub.next_msg(timeout=TIMEOUT)
            headers = reply.headers or {}
            status = headers.get("Status", "")
            if status == "404" or (status == "204" and not reply.data):  # none / end of batch
                return
            if status == "503":  # no such stream (nobody answers its direct gets)
                raise NoRespondersError
            if status:
                raise APIError(code=int(status), description=headers.get("Description", ""))
            if headers.get("Nats-Stream", stream) != stream:
                raise _Elsewhere  # a mirror answered: it may not hold what was just appended
            yield _lifted(reply, headers, stream)
    finally:
        # a read closed after its connection has nothing left to unsubscribe from
        with contextlib.suppress(ConnectionClosedError):
            await sub.unsubscribe()


def _lifted(reply: Msg, headers: dict[str, str], stream: str) -> Msg:
    """A stored message as a consumer would deliver it: its subject, data, own headers, and
    metadata with its stream sequence, time and what follows it."""
    seq = int(headers["Nats-Sequence"])
    when = dt.datetime.fromtimestamp(_nanos(headers["Nats-Time-Stamp"]) / 1e9, dt.UTC)
    own = {k: v for k, v in headers.items() if k not in _SERVED}
    return Msg(
        _client=reply._client,
        subject=headers["Nats-Subject"],
        data=reply.data,
        headers=own or None,
        _metadata=Msg.Metadata(
            sequence=Msg.Metadata.SequencePair(consumer=0, stream=seq),
            num_pending=int(headers.get("Nats-Num-Pending", "0")),
            num_delivered=1,
            timestamp=when,
            stream=stream,
            consumer="",
        ),
    )


def _nanos(stamp: str) -> int:
    """Nanoseconds since the epoch of the server's RFC 3339 UTC time (`...T08:16:04.41Z`):
    the time a consumer's delivery carries as an integer, and read the same way."""
    whole, _, fraction = stamp.rstrip("Z").partition(".")
    seconds = int(dt.datetime.fromisoformat(whole).replace(tzinfo=dt.UTC).timestamp())
    return seconds * 1_000_000_000 + int(fraction.ljust(9, "0")[:9] or 0)


# the headers the server adds to a direct get's answer (the message's own are kept)
_SERVED = frozenset(
    {
        "Nats-Stream",
        "Nats-Subject",
        "Nats-Sequence",
        "Nats-Time-Stamp",
        "Nats-Num-Pending",
        "Nats-Last-Sequence",
    }
)
