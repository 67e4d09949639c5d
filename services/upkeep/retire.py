"""Ended aggregates leave the hot log (`eventstore/archive.py`): a writer of the log's
upkeep, run by the upkeep service (`services/upkeep/service.py`), over the port (its
`Trimming`, any adapter that keeps an archive).

A round, every few seconds:
1. the new floor: the lowest of the archive's last sequence, what the views the retirer
   asks have folded and the durable consumers' ack floors, less the hot window (`window`
   events stay in the hot log whatever they are);
2. the ended aggregates whose terminal events lie between the old floor and the new one
   are found (at most `MOVE` a round: a longer way is several moves), and the floor is
   recorded with every one of them not yet retired (its `pending`), so a restart resumes
   them; then those that have ended are purged from the hot log up to their end.
   "Ended" is read from the subjects, whose last token but one is the event type, so
   finding them reads only the terminal events between the two floors: a VMI's life ends
   at `VMIRemoved`; a VM at `VMDeleted` once the VM is gone from the views; a migration,
   a policy or another resource once its deletion was requested and the object is gone
   (a migration deleted while it runs ends when it is final: it waits in `pending` until
   then). Each check asks the views (`Views`), folded past the floor.

A hot log that denies purges (made before the archive) is never trimmed; one line says
so."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, Protocol

import structlog

from events import subjects
from events.meta import Aggregate, Kind
from eventstore.floor import PendingEnd
from eventstore.port import EventLog, Trimming
from eventstore.tasks import finish
from projections.cluster import Cluster, view_key
from projections.replay import gone

log = structlog.get_logger()
WINDOW = 10_000  # events the hot log keeps whatever they are
INTERVAL = 5.0  # seconds between rounds
STEP = 1_000  # the floor moves in steps at least this large
# a pause after each purge: a purge is a write the server fsyncs, and a round after a long
# time (an upgrade) purges thousands; the services' own requests go first
PACE = 0.005

# the ended aggregates one floor move takes on at most: the floor is recorded with them in
# one message (~150 bytes each, under the server's payload limit); a longer way (a retirer
# that was down for long, a year set up at once) is gone in several moves
MOVE = 2_000

# the terminal event types, as subject filters
TERMINAL = [
    f"{subjects.PREFIX}.{Kind.VMI}.*.*.VMIRemoved.*",
    f"{subjects.PREFIX}.{Kind.VM}.*.*.VMDeleted.*",
    f"{subjects.PREFIX}.{Kind.MIGRATION}.*.*.MigrationAbortRequested.*",
    f"{subjects.PREFIX}.{Kind.POLICY}.*.*.PolicyDeleted.*",
    f"{subjects.PREFIX}.*.*.*.ResourceDeleted.*",  # every generic kind's
]


class Views(Protocol):
    """What the retirer asks of the views: how far they have folded, and one aggregate's
    view as folded (None: nothing of that name)."""

    def upto(self) -> int: ...

    async def view(self, agg: Aggregate) -> Any: ...


class ClusterViews:
    """The views of a `Cluster` folded in the same process (tests, benchmarks)."""

    def __init__(self, cluster: Callable[[], Cluster]) -> None:
        self.cluster = cluster

    def upto(self) -> int:
        return self.cluster().last_seq

    async def view(self, agg: Aggregate) -> Any:
        return self.cluster().table(agg.kind).get(view_key(agg))


class LoadedViews:
    """One aggregate's view folded from its own events, on demand: the upkeep service folds
    no cluster (a check costs one aggregate's load, made only for an ended candidate and
    again only once the aggregate has new events). A VM's view is folded with its VMI's
    events: the VMI's removal is what lets a deleted VM go; every other kind's end is in
    its own events."""

    def __init__(self, store: EventLog, upto: Callable[[], int]) -> None:
        self.store = store
        self._upto = upto

    def upto(self) -> int:
        return self._upto()

    async def view(self, agg: Aggregate) -> Any:
        events = await self.store.load(agg)
        if agg.kind == Kind.VM:  # a VM's view joins its VMI's life (deleted: gone with it)
            vmi = Aggregate(kind=Kind.VMI, namespace=agg.namespace, name=agg.name)
            events = sorted([*events, *await self.store.load(vmi)], key=lambda s: s.seq)
        c = Cluster()
        for s in events:
            c.apply(s)
        return c.table(agg.kind).get(view_key(agg))


def ended(view: Any, agg: Aggregate, uid: str) -> str:
    """Whether the object whose terminal event was seen has ended: "" (not yet),
    "replaced" (another of the same name lives: its life ended at the terminal event) or
    "gone" (nothing of that name: the aggregate's last event ends it; a later one of the
    same name lands after everything folded so far). A VMI's life ends at its removal (the
    next VMI of a VM has the same name)."""
    if agg.kind == Kind.VMI:
        return "replaced"
    if view is None or gone(view):
        return "gone"
    return "replaced" if uid and getattr(view, "uid", uid) != uid else ""


class Retirer:
    def __init__(
        self,
        store: EventLog,
        views: Views,
        *,
        window: int = WINDOW,
        interval: float = INTERVAL,
        step: int = STEP,
        pace: float = PACE,
    ) -> None:
        self.store = store
        self.trim: Trimming | None = None  # the log's, once started
        self.views = views
        self.window = window
        self.interval = interval
        self.step = step
        self.pace = pace
        self.floor = 0
        self.retired = 0
        self.pending: dict[str, PendingEnd] = {}  # aggregate filter → its terminal event
        # aggregate filter → its last sequence when last found not ended: asked again
        # only once the aggregate has news
        self._checked: dict[str, int] = {}
        self._seen = -1  # what the views had folded at the last round
        self.behind = False  # the last round moved the floor short of where it may go
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> bool:
        """Resume from the recorded floor and its pending work; False when the log keeps no
        archive or its hot log denies purges (then nothing runs)."""
        self.trim = self.store.trimming()
        if self.trim is None:
            return False
        if not await self.trim.trimmable():
            log.warning(
                "the event stream denies purges (made before the archive): it is archived "
                "but not trimmed",
                stream=self.store.stream,
            )
            return False
        recorded = await self.trim.floor()
        self.floor = recorded.floor
        self.pending = {p.scope: p for p in recorded.pending}
        self._task = asyncio.create_task(self._run(), name="retirer")
        return True

    async def stop(self) -> None:
        if self._task is not None:
            await finish(self._task)

    async def _run(self) -> None:
        while True:
            try:
                await self.round()
            except asyncio.CancelledError:
                raise
            except Exception as e:  # the next round tries again
                log.warning("retiring ended aggregates failed", error=repr(e))
                self.behind = False
            if not self.behind:
                await asyncio.sleep(self.interval)

    async def round(self, folded: int | None = None) -> int:
        """One round; returns how many aggregates left the hot log."""
        trim = self.trim
        assert trim is not None
        folded_now = self.views.upto()
        if folded_now == self._seen and not self.pending and folded is None:
            return 0  # nothing new since the last round: a cluster at rest asks nothing
        upto = min(await trim.archived_upto(), folded_now, await trim.acked_floor())
        if folded is not None:
            upto = min(upto, folded)
        new = upto - self.window
        self.behind = False
        if new >= self.floor + self.step or (new > self.floor and self.pending):
            found = 0
            terminal = self.store.replay(
                TERMINAL, start_seq=max(1, self.floor), until_seq=new - 1, raw=True
            )
            try:
                async for s in terminal:
                    p = PendingEnd.of(s.event.meta.aggregate, s.seq)
                    self.pending[p.scope] = p
                    found += 1
                    if found >= MOVE and s.seq + 1 < new:
                        new, self.behind = s.seq + 1, True  # the rest on the next move
                        break
            finally:  # a read left early lets go of its subscription now
                close = getattr(terminal, "aclose", None)
                if close is not None:
                    await close()
            self.floor = new
            # the floor and the work under it, before anything under it is purged
            await trim.record_floor(new, list(self.pending.values()))
        retired = 0
        for scope, p in list(self.pending.items()):
            agg = p.aggregate
            if agg.kind != Kind.VMI:
                last = await self._last(scope, p.seq)
                news = await self._news(agg, last)
                if self._checked.get(scope) == news:
                    continue  # not ended when last asked, and nothing new since
                how = ended(await self.views.view(agg), agg, p.uid)
            else:
                last, news, how = p.seq, 0, "replaced"
            if not how:
                self._checked[scope] = news
                continue
            end = p.seq if how == "replaced" else last
            if end >= self.floor:
                continue  # its last events are still in the window: a later round
            await trim.retire(scope, end)
            del self.pending[scope]
            self._checked.pop(scope, None)
            retired += 1
            await asyncio.sleep(self.pace)
        # the views bound the floor and nothing is pending: the next round waits for news
        self._seen = folded_now if upto == folded_now and not self.behind else -1
        if retired:  # the record holds only what is left to do
            await trim.record_floor(self.floor, list(self.pending.values()))
        self.retired += retired
        return retired

    async def _news(self, agg: Aggregate, last: int) -> int:
        """What changes when the aggregate's view may have: its last sequence, and for a VM
        its VMI's too (whose removal lets a deleted VM go)."""
        if agg.kind != Kind.VM:
            return last
        vmi = subjects.aggregate_filter(Kind.VMI, agg.namespace, agg.name)
        return max(last, await self._last(vmi, 0))

    async def _last(self, scope: str, at_least: int) -> int:
        """The aggregate's last sequence (its deletion's when it is the last)."""
        assert self.trim is not None
        return await self.trim.last_of(scope, at_least)
