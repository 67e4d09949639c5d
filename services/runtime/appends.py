"""Appending a service's decisions, the same in both delivery loops of the shell: the
version each optimistic append expects, the metrics, our own optimistic appends folded at
once, and, when an append conflicts, the aggregate's news folded and the decision made
again."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from contextlib import AbstractAsyncContextManager
from typing import Any, Generic, TypeVar

from events import subjects
from events.codec import event_type
from events.envelope import Decision, Stored
from eventstore.port import ConcurrencyConflict, EventLog
from services.runtime import metrics as m
from services.runtime.folding import Folding

S = TypeVar("S")
MAX_CONFLICT_RETRIES = 8


class GaveUp(RuntimeError):
    """A decision conflicted MAX_CONFLICT_RETRIES times: on `aggregates` the last time."""

    def __init__(self, service: str, aggregates: Sequence[str]) -> None:
        self.aggregates = tuple(sorted(set(aggregates)))
        super().__init__(
            f"{service}: gave up after {MAX_CONFLICT_RETRIES} conflicts"
            f" on {', '.join(self.aggregates)}"
        )


class Appends(Generic[S]):
    def __init__(
        self, name: str, store: EventLog, folding: Folding[S], filters: Sequence[str], log: Any
    ) -> None:
        self.name = name
        self.store = store
        self.folding = folding
        self.filters = list(filters)
        self.log = log

    @staticmethod
    def subject(d: Decision) -> str:
        ev = d.event
        return subjects.event_subject(ev.meta.aggregate, event_type(ev), ev.meta.node)

    def expected(self, d: Decision, subject: str) -> int | None:
        """The folded version of the aggregate, unless the decision opts out of the check
        or names its own."""
        if d.expected is not None:
            return d.expected
        return self.folding.version_of(subject) if d.occ else None

    async def append(
        self, d: Decision, subject: str, expected: int | None, cause: Stored | None
    ) -> int | None:
        """Append one decision; its sequence when it was folded at once (our own OCC
        append), else None."""
        ev = d.event
        etype = event_type(ev)
        ack = await self.store.append(ev, expected=expected)
        if ack.duplicate:
            m.DUPLICATES.labels(self.name).inc()
        else:
            m.EVENTS_APPENDED.labels(self.name, etype).inc()
            if cause is not None:
                hop = f"{event_type(cause.event)}->{etype}"
                m.HOP_SECONDS.labels(hop).observe(
                    max(0.0, ev.meta.occurred_at - cause.event.meta.occurred_at)
                )
        if not any(subjects.matches(f, subject) for f in self.filters):
            return None
        # Our own OCC append is folded now, so the next decision sees it even before the
        # consumer delivers it back; any other append waits for the consumer, since events
        # of that aggregate we have not seen yet may lie before it (an explicit `expected`
        # came from outside our filters: it says nothing about what we have seen).
        if d.occ and d.expected is None:
            stored = Stored(seq=ack.seq, subject=subject, time=ev.meta.occurred_at, event=ev)
            self.folding.fold(stored, own=True)
            return ack.seq
        if ack.seq > self.folding.version_of(subject):
            self.folding.unconfirmed.add(ev.meta.event_id)
        return None

    async def catch_up(self, filters: Sequence[str] | None = None, start_seq: int = 1) -> int:
        """Fold everything matching our filters (or a narrower set) from `start_seq`."""
        n = 0
        # poison is skipped here (the durable consumer delivers it too and dead-letters
        # it once), moving its aggregate's version past it
        async for stored in self.store.replay(
            filters or self.filters, start_seq=start_seq, raw=True, on_skip=self.folding.skip
        ):
            if self.folding.fold(stored):
                n += 1
        return n

    async def retry_conflicts(
        self,
        attempt: Callable[[], Awaitable[Sequence[ConcurrencyConflict]]],
        again: Callable[[], Awaitable[None]],
        lock: AbstractAsyncContextManager[Any],
    ) -> None:
        """`attempt` ends a decision's appends and names those that conflicted. After a
        conflict, under `lock` (the news and the new decision together), fold each
        conflicting aggregate's newer events and let `again` decide anew, for the next
        attempt to end; give up (`GaveUp`) after MAX_CONFLICT_RETRIES attempts."""
        conflicts: Sequence[ConcurrencyConflict] = ()
        for _attempt in range(MAX_CONFLICT_RETRIES):
            conflicts = await attempt()
            if not conflicts:
                return
            async with lock:
                for c in conflicts:
                    m.CONFLICTS.labels(self.name).inc()
                    self.log.info(
                        "conflict", aggregate=c.aggregate, expected=c.expected, actual=c.actual
                    )
                    kind, ns, name = c.aggregate.split("/")
                    scope = subjects.aggregate_filter(kind, ns, name)
                    await self.catch_up([scope], start_seq=c.expected + 1)
                await again()
        raise GaveUp(self.name, [c.aggregate for c in conflicts])
