"""Ended aggregates leave the hot log (`eventstore/archive.py`).

A round, every few seconds in the api process (which folds every event and owns the
streams):
1. the new floor: the lowest of the archive's last sequence, the api's folded one and the
   durable consumers' ack floors, less the hot window (`window` events stay in the hot
   log whatever they are);
2. the floor is recorded, then the ended aggregates found below it are purged from the
   hot log up to their end. "Ended" is read from the subjects, whose last token but one
   is the event type, so finding them reads only the terminal events between the old
   floor and the new one: a VMI's life ends at `VMIRemoved`; a VM at `VMDeleted` once the
   VM is gone from the views; a migration, a policy or another resource once its deletion
   was requested and the object is gone (a migration deleted while it runs ends when it
   is final: it waits in `pending` until then). Each check is against the api's own
   views, folded past the floor.

A hot log that denies purges (made before the archive) is never trimmed; one line says
so."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import structlog

from events import subjects
from events.meta import Aggregate, Kind
from eventstore import archive
from eventstore.jetstream import JetStreamStore
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

# the terminal event types, as subject filters
TERMINAL = [
    f"{subjects.PREFIX}.{Kind.VMI}.*.*.VMIRemoved.*",
    f"{subjects.PREFIX}.{Kind.VM}.*.*.VMDeleted.*",
    f"{subjects.PREFIX}.{Kind.MIGRATION}.*.*.MigrationAbortRequested.*",
    f"{subjects.PREFIX}.{Kind.POLICY}.*.*.PolicyDeleted.*",
    f"{subjects.PREFIX}.*.*.*.ResourceDeleted.*",  # every generic kind's
]


def aggregate_of(subject: str) -> Aggregate:
    kind, ns, name, _, _ = subjects.parse(subject)
    return Aggregate(kind=kind, namespace=ns, name=name)


def ended(cluster: Cluster, agg: Aggregate, uid: str) -> str:
    """Whether the object whose terminal event was seen has ended: "" (not yet),
    "replaced" (another of the same name lives: its life ended at the terminal event) or
    "gone" (nothing of that name: the aggregate's last event ends it; a later one of the
    same name lands after everything folded so far). A VMI's life ends at its removal (the
    next VMI of a VM has the same name)."""
    if agg.kind == Kind.VMI:
        return "replaced"
    view = cluster.table(agg.kind).get(view_key(agg))
    if view is None or gone(view):
        return "gone"
    return "replaced" if uid and getattr(view, "uid", uid) != uid else ""


class Retirer:
    def __init__(
        self,
        store: JetStreamStore,
        cluster: Callable[[], Cluster],
        *,
        window: int = WINDOW,
        interval: float = INTERVAL,
        step: int = STEP,
        pace: float = PACE,
    ) -> None:
        self.store = store
        self.cluster = cluster  # the api's current views
        self.window = window
        self.interval = interval
        self.step = step
        self.pace = pace
        self.floor = 0
        self.retired = 0
        self.pending: dict[str, tuple[Aggregate, str, int]] = {}  # filter → (agg, uid, seq)
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        js = self.store.js
        if not await archive.trimmable(js, self.store.stream):
            log.warning(
                "the event stream denies purges (made before the archive): it is archived "
                "but not trimmed",
                stream=self.store.stream,
            )
            return
        self.floor = await archive.read_floor(js, self.store.stream)
        self._task = asyncio.create_task(self._run(), name="retirer")

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
            await asyncio.sleep(self.interval)

    async def round(self, folded: int | None = None) -> int:
        """One round; returns how many aggregates left the hot log."""
        js, stream = self.store.js, self.store.stream
        cluster: Cluster = self.cluster()
        upto = min(
            await archive.archived_upto(js, stream),
            cluster.last_seq,
            await archive.acked_floor(js, stream),
        )
        if folded is not None:
            upto = min(upto, folded)
        new = upto - self.window
        retired = 0
        if new >= self.floor + self.step or (new > self.floor and self.pending):
            await archive.write_floor(js, stream, new, self.store.settings)
            async for s in self.store.replay(
                TERMINAL, start_seq=max(1, self.floor), until_seq=new - 1, raw=True
            ):
                agg = s.event.meta.aggregate
                self.pending[subjects.aggregate_filter(agg.kind, agg.namespace, agg.name)] = (
                    agg,
                    agg.uid,
                    s.seq,
                )
            self.floor = new
        for scope, (agg, uid, seq) in list(self.pending.items()):
            how = ended(cluster, agg, uid)
            if not how:
                continue
            end = seq if how == "replaced" else await self._last(scope, seq)
            if end >= self.floor:
                continue  # its last events are still in the window: a later round
            await archive.retire(js, stream, scope, end)
            del self.pending[scope]
            retired += 1
            await asyncio.sleep(self.pace)
        self.retired += retired
        return retired

    async def _last(self, scope: str, at_least: int) -> int:
        """The aggregate's last sequence (its deletion's when it is the last)."""
        return await archive.last_of(self.store.js, self.store.stream, scope, at_least)
