"""The read side: folds the stream into a `Cluster` and fans changes out to watchers.

One ordered push consumer follows the whole stream. For every folded event the touched
objects are rendered and recorded as `Change`s (resourceVersion = the stream sequence) in
a bounded history, so a watch can resume from any resourceVersion the history still
covers; an older one gets 410 Gone ("too old resource version"), as in Kubernetes.
`wait_for(seq)` gives read-your-writes to the api: it answers once its own projection has
folded the event it appended."""

from __future__ import annotations

import asyncio
import operator
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

import structlog

from events.envelope import Stored
from events.meta import Kind, KindToken
from eventstore import cadence, follow
from eventstore.checkpoints import Unusable
from eventstore.port import EventLog
from eventstore.tasks import finish
from kinds.registry import REGISTRY, Registry
from projections import kube_events
from projections.cluster import Cluster, view_key
from projections.kube_events import KubeEvents
from projections.replay import gone
from projections.views import (
    MigrationView,
    NodeView,
    PolicyView,
    ResourceView,
    VMIView,
    VMView,
)
from readside import view_checkpoints
from readside.metrics import ProjectionMetrics
from readside.watch import Change, EventType, Selector, TooOldResourceVersion, Watcher
from readside.watch_history import WatchHistory

log = structlog.get_logger()
LIST_BODIES = 16  # encoded list responses kept, one per selector, for the current version
FRESH_RENDERS = 256  # objects kept rendered for the responses that follow their events
JSON = dict[str, Any]
View = VMView | VMIView | MigrationView | NodeView | PolicyView | ResourceView


# Changes kept for resuming watches: ~45 s of the bench's create phase, ~1-2 MiB compressed
# (Kubernetes' watch cache starts at 100 events per resource and grows to cover ~75 s).
WATCH_HISTORY = 20_000

Items = list[JSON]  # a list response's items (the class below has a method named list)


class ProjectionRunner:
    def __init__(
        self,
        store: EventLog,
        *,
        history: int = WATCH_HISTORY,
        clock: Callable[[], float] = time.time,
        checkpoint_name: str | None = None,
        checkpoint_every: int = cadence.EVERY,
        checkpoint_seconds: float = cadence.SECONDS,
        kinds: Registry = REGISTRY,
    ) -> None:
        self.store = store
        self.kinds = kinds  # how each kind renders
        self.cluster = Cluster(kube_events=True)
        self.clock = clock
        # KubeVirt's metrics are read off this fold (one registration per process)
        self.metrics = ProjectionMetrics(self.cluster, clock=clock).register()
        # the rendered changes a watch can resume from, as compressed blocks (only a resuming
        # watch reads them back)
        self.history = WatchHistory(history)
        # The newest seq whose changes fell out of the history: watches from rv ≥ this resume.
        self.history_floor = 0
        self._fresh: OrderedDict[tuple[KindToken, str], tuple[Any, object, JSON]] = OrderedDict()
        self._lists: OrderedDict[Selector, tuple[int, tuple[object, ...], bytes]] = OrderedDict()
        self.watchers: set[Watcher] = set()
        self.caught_up_to = 0  # the stream's last seq when the runner started
        self._waiters: list[tuple[int, asyncio.Future[None]]] = []
        self._task: asyncio.Task[None] | None = None
        # Checkpoints of the views (readside/view_checkpoints.py) bound the restart cost to
        # the events since the last one: start from it, fold the tail, take one every N
        # events and at least once a minute while events come (a quiet cluster's restart
        # then folds at most a minute of events)
        self.checkpoint_name = checkpoint_name
        self.cadence = cadence.Cadence(
            checkpoint_name or "", every=checkpoint_every, seconds=checkpoint_seconds
        )

    # ------------------------------------------------------------- lifecycle
    @property
    def last_seq(self) -> int:
        return self.cluster.last_seq

    @property
    def ready(self) -> bool:
        return (
            self._task is not None and not self._task.done() and self.last_seq >= self.caught_up_to
        )

    async def start(self, *, wait: bool = True, timeout: float = 30.0) -> None:
        self.caught_up_to = await self.store.stream_last_seq()
        if self.checkpoint_name and self.cluster.last_seq == 0:
            loaded = await view_checkpoints.load_checked(self.store, self.checkpoint_name)
            if isinstance(loaded, Unusable):
                cadence.refused(self.checkpoint_name, loaded.reason)
            elif loaded is not None:
                if loaded.kube_events is None:  # a checkpoint of a fold without the records
                    loaded.kube_events = KubeEvents()
                self.cluster = loaded
                self.cadence.loaded(loaded.last_seq)
                # watches cannot resume from before the checkpoint: they get 410 and re-list
                self.history_floor = loaded.last_seq
                self.metrics.unregister()
                self.metrics = ProjectionMetrics(self.cluster, clock=self.clock).register()
                log.info("projection checkpoint loaded", seq=loaded.last_seq)
        self._task = asyncio.create_task(self._run(), name="projection-runner")
        if wait:
            await self.wait_for(self.caught_up_to, timeout)

    async def stop(self) -> None:
        if self._task is not None:
            await finish(self._task)
        await self.cadence.settle()
        if self.checkpoint_name and self.last_seq > self.checkpoint_seq:
            self._checkpoint()
            await self.cadence.settle()
        for w in list(self.watchers):
            w.close()
        self.watchers.clear()

    async def _run(self) -> None:
        """Follow the stream for good: a lost connection or a server restart ends one
        replay, and the next resumes after the last folded sequence."""
        await follow.resuming(self._follow, "projection follow", lambda: self.last_seq)

    async def _follow(self) -> None:
        async for stored in self.store.replay(
            start_seq=self.last_seq + 1, follow=True, raw=True, on_skip=self.skip
        ):
            self._fold_guarded(stored)

    def _fold_guarded(self, stored: Stored) -> None:
        """An event whose fold raises is skipped like poison (logged once, here): one bad
        event must not stop the read side every request is answered from."""
        try:
            self.fold(stored)
        except Exception:
            log.exception("event skipped: its fold failed", seq=stored.seq, subject=stored.subject)
            self.skip(stored.seq, stored.subject)

    def skip(self, seq: int, subject: str) -> None:
        """An event no fold can read: the aggregate moves past it (see `Cluster.skip`)."""
        if seq <= self.cluster.last_seq:
            return
        self.cluster.skip(seq, subject)
        self._wake()

    @property
    def checkpoint_seq(self) -> int:
        """The sequence the last checkpoint taken (or loaded) covers."""
        return self.cadence.saved_upto

    def _checkpoint(self) -> None:
        """Encode the views now (one point of the fold), write them in the background."""
        assert self.checkpoint_name is not None
        seq, body = self.last_seq, view_checkpoints.encode(self.cluster)
        self.cadence.taken(seq, self._write_checkpoint(seq, body))

    async def _write_checkpoint(self, seq: int, body: bytes) -> None:
        assert self.checkpoint_name is not None
        try:
            await view_checkpoints.write(self.store, self.checkpoint_name, seq, body)
        except Exception as e:  # the next one is due soon; the previous stays usable
            log.warning("checkpoint not saved", checkpoint=self.checkpoint_name, error=repr(e))

    # --------------------------------------------------------------- folding
    def fold(self, s: Stored) -> list[Change]:
        """Fold one event, record and fan out the changes it made."""
        if s.seq <= self.cluster.last_seq:
            return []
        agg = s.event.meta.aggregate
        k = view_key(agg)
        before = {kind: self._view(kind, k) for kind in (*Kind, agg.kind)}
        touched = self.cluster.apply(s)
        self.metrics.observe(s, touched, replaying=s.seq <= self.caught_up_to)
        if self.checkpoint_name and self.cadence.due(s.seq):
            self._checkpoint()
        changes: list[Change] = []
        for kind, tk in dict.fromkeys(touched):
            new = self._view(kind, tk)
            new = None if new is None or gone(new) else new
            if tk == k:
                old = before[kind]
                old = None if old is None or gone(old) else old
            elif kind == kube_events.KIND:  # a record made now, or one counted on again
                old = None if new is None or new.created_seq == s.seq else new
            else:
                old = new  # other keys are only ever modified by a cross-aggregate effect
            if new is not None:
                obj = self._render(kind, new)
                self._remember(kind, tk, new, obj)
                obj = dict(obj)  # the history's copy gets its own metadata below
                ctype = EventType.MODIFIED if old is not None else EventType.ADDED
            elif old is not None:
                obj = self._render(kind, old)
                ctype = EventType.DELETED
            else:
                continue
            obj["metadata"] = {**obj.get("metadata", {}), "resourceVersion": str(s.seq)}
            changes.append(Change(s.seq, ctype, kind, tk, obj))
        for change in changes:
            self.history.append(change)
            for w in list(self.watchers):
                w.offer(change)
                if w.closed:
                    self.watchers.discard(w)
        if self.history.floor > self.history_floor:
            self.history_floor = self.history.floor
        self._wake()
        return changes

    def _wake(self) -> None:
        if not self._waiters:
            return
        seq = self.cluster.last_seq
        keep = []
        for target, fut in self._waiters:
            if target <= seq:
                if not fut.done():
                    fut.set_result(None)
            else:
                keep.append((target, fut))
        self._waiters = keep

    async def wait_for(self, seq: int, timeout: float = 10.0) -> bool:
        """True once the projection has folded `seq` (read-your-writes); False on timeout."""
        if self.cluster.last_seq >= seq:
            return True
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append((seq, fut))
        try:
            async with asyncio.timeout(timeout):
                await fut
        except TimeoutError:
            return False
        return True

    # ----------------------------------------------------------------- reads
    def _table(self, kind: KindToken) -> dict[str, Any]:
        return self.cluster.table(kind)

    def _view(self, kind: KindToken, k: str) -> Any:
        return self.cluster.table(kind).get(k)

    def _render(self, kind: KindToken, view: Any) -> JSON:
        return self.kinds.of(kind).render(self.cluster, view, self.clock())

    def _remember(self, kind: KindToken, k: str, view: Any, obj: JSON) -> None:
        """Keep the object just rendered for this exact view: the api's response to the
        request that caused the event renders it again otherwise (measured: one of the two
        renders per create). Views are immutable and replaced on every change, joins
        included, so identity is freshness; clock-dependent renders are not kept."""
        if kind == Kind.NODE or (kind == Kind.VM and view.start_failure is not None):
            return
        self._fresh[(kind, k)] = (view, self._joined(kind, view), obj)
        self._fresh.move_to_end((kind, k))
        if len(self._fresh) > FRESH_RENDERS:
            self._fresh.popitem(last=False)  # O(1), unlike deleting a plain dict's first key

    def _joined(self, kind: KindToken, view: Any) -> object:
        """The other view a rendering reads (a VM's VMI, a VMI's migration)."""
        if kind == Kind.VM:
            return self.cluster.vmi_of_vm(view)
        if kind == Kind.VMI and view.migration:
            return self.cluster.migrations.get(f"{view.namespace}/{view.migration}")
        return None

    def get(self, kind: KindToken, k: str) -> JSON | None:
        """The rendered object at key ("ns/name", or the name of a node or policy).
        Shared with the render cache: callers encode it, never mutate it."""
        view = self._view(kind, k)
        if view is None or gone(view) or self._expired(kind, view):
            return None
        hit = self._fresh.get((kind, k))
        if hit is not None and hit[0] is view and hit[1] is self._joined(kind, view):
            return hit[2]
        return self._render(kind, view)

    def _expired(self, kind: KindToken, view: Any) -> bool:
        """An Event record past the API server's TTL is not served (the fold drops it
        when the log moves on; without new events, the clock decides)."""
        return kind == kube_events.KIND and view.last_at < self.clock() - kube_events.WINDOW

    def list(self, selector: Selector) -> list[JSON]:
        out = []
        for k in sorted(self._table(selector.kind)):
            obj = self.get(selector.kind, k)
            if obj is not None and selector.matches(selector.kind, obj):
                out.append(obj)
        return out

    def list_body(self, selector: Selector, encode: Callable[[Items], bytes]) -> bytes:
        """`encode(self.list(selector))`, kept while nothing changed: a list renders every
        object the fresh renders do not hold (most of them, past a few hundred) and encodes
        them all, and clients poll the same list many times between two events. Fresh
        while the version and every view of the kind are the same objects (views are
        replaced on each change: identity is freshness, as for the fresh renders). Only for
        kinds whose rendering reads no clock."""
        if not clock_free(selector.kind):
            return encode(self.list(selector))
        views = tuple(self._table(selector.kind).values())
        hit = self._lists.get(selector)
        if (
            hit is not None
            and hit[0] == self.last_seq
            and len(hit[1]) == len(views)
            and all(map(operator.is_, hit[1], views))
        ):
            self._lists.move_to_end(selector)
            return hit[2]
        body = encode(self.list(selector))
        self._lists[selector] = (self.last_seq, views, body)
        self._lists.move_to_end(selector)
        if len(self._lists) > LIST_BODIES:
            self._lists.popitem(last=False)
        return body

    # --------------------------------------------------------------- watches
    def watch(
        self,
        selector: Selector,
        resource_version: int | None,
        convert: Callable[[JSON], JSON] | None = None,
    ) -> Watcher:
        """Open a watch. Without a resourceVersion (or 0) it starts with ADDED events for
        every matching object, then follows; with one it replays the kept changes after
        it. Registration and replay happen without awaiting, so no change is missed.
        `convert`: the objects in another version's shape (selected in that shape)."""
        watcher = Watcher(selector, convert=convert)
        if not resource_version:
            for k in sorted(self._table(selector.kind)):
                obj = self.get(selector.kind, k)
                if obj is None:
                    continue
                if selector.matches(selector.kind, convert(obj) if convert else obj):
                    watcher.initial(k, obj)
        else:
            if resource_version < self.history_floor:
                raise TooOldResourceVersion(resource_version, self.history_floor)
            for change in self.history.after(resource_version):
                watcher.offer(change)
        self.watchers.add(watcher)
        return watcher

    def unwatch(self, watcher: Watcher) -> None:
        self.watchers.discard(watcher)
        watcher.close()


def clock_free(kind: KindToken) -> bool:
    """Whether every object of the kind renders the same at any time: a node's readiness
    ages with its heartbeat, a VM's start backoff counts down, an Event's TTL runs out."""
    return kind not in (Kind.NODE, Kind.VM, kube_events.KIND)
