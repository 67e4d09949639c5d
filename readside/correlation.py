"""`virtstream events --correlation ID`: every event one request caused (the api's own,
then the controller's and the handlers' reactions), in stream order.

The index (`eventstore/index.py`) holds correlation id → sequences up to its `upto()`:
those are one get each (`EventLog.get` reads the archive for retired events), run at
once. What the index has not covered yet (what is in flight: a short tail) is read from
the log after `upto()` and matched here. Without an index the whole log is read and
matched: the answer is the same, only slower."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable

from events.codec import event_type
from events.envelope import Stored
from events.meta import Aggregate
from eventstore.port import EventLog
from projections.replay import Point, event_filters

GETS_AT_ONCE = 64  # gets in flight: enough to hide the round trips, few for the server


def matcher(
    correlation_id: str,
    agg: Aggregate | None = None,
    etype: str | None = None,
    since: Point | None = None,
) -> Callable[[Stored], bool]:
    """Whether an event belongs to the correlation and passes `events`' other filters
    (one object, one event type, from a sequence or a server time on). Pure."""

    def keep(s: Stored) -> bool:
        meta = s.event.meta
        if meta.correlation_id != correlation_id:
            return False
        if agg is not None and meta.aggregate != agg:
            return False
        if etype and event_type(s.event) != etype:
            return False
        if since is not None and since.seq is not None and s.seq < since.seq:
            return False
        return not (since is not None and since.time is not None and s.time < since.time)

    return keep


def merged(indexed: Iterable[Stored], tail: Iterable[Stored], upto: int) -> list[Stored]:
    """The indexed events up to `upto` and the tail's (read from after `upto`), once
    each, in stream order. Pure."""
    by_seq = {s.seq: s for s in indexed if s.seq <= upto}
    by_seq.update((s.seq, s) for s in tail)
    return [by_seq[seq] for seq in sorted(by_seq)]


async def events_of(
    store: EventLog,
    correlation_id: str,
    *,
    agg: Aggregate | None = None,
    etype: str | None = None,
    since: Point | None = None,
) -> list[Stored]:
    """The events of one correlation (narrowed by the other filters), in stream order."""
    keep = matcher(correlation_id, agg, etype, since)
    filters = event_filters(agg, etype or None)  # the scans let the server narrow them
    index = store.index()
    upto = await index.upto() if index is not None else 0
    if index is None or upto == 0:
        return await _scan(store, filters, keep, start_seq=None)
    # `upto` first: entries written after it are read again from the log's tail
    seqs = [seq for seq in await index.seqs_of(correlation_id) if seq <= upto]
    indexed, tail = await asyncio.gather(
        _get_all(store, seqs), _scan(store, filters, keep, start_seq=upto + 1)
    )
    return merged((s for s in indexed if keep(s)), tail, upto)


async def _get_all(store: EventLog, seqs: list[int]) -> list[Stored]:
    gate = asyncio.Semaphore(GETS_AT_ONCE)

    async def one(seq: int) -> Stored | None:
        async with gate:
            return await store.get(seq)

    found = await asyncio.gather(*(one(seq) for seq in seqs))
    return [s for s in found if s is not None]  # None: gone or undecodable


async def _scan(
    store: EventLog, filters: list[str], keep: Callable[[Stored], bool], start_seq: int | None
) -> list[Stored]:
    return [s async for s in store.replay(filters, start_seq=start_seq, raw=True) if keep(s)]
