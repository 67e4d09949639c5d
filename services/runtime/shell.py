"""The service shell: one durable pull consumer, fold, decide, append, ack.

Start-up rebuilds the state from the stream with an ordered consumer (fast), then consumes
the durable consumer. A message already folded during catch-up is not folded twice (per
aggregate, by stream sequence) but is still decided on: deciders are level-triggered
against state, so deciding again is harmless, and the deterministic event ids make a
repeated append a duplicate. The ack comes only after the decision's events are appended.

With a `window` > 1 (the controller) the appends are pipelined: the next delivery is
decided while earlier ones' appends are in flight (`append_window.py` bounds them and keeps
one chain per aggregate); each delivery is acked once its own appends have landed.

A reactor with an `Observer` (the handler) has a second input: observations its executor
puts into the `Inbox`. Bus messages, observations and ticks are decided one at a time
(a lock: they interleave only at awaits); each decision first folds the observations made
so far. Its effects go to the executor, then it is decided again on what they changed,
until it asks for nothing more.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import time
import traceback
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any, Generic, Never, Protocol

import nats
import structlog
from nats.aio.client import Client as NATS
from typing_extensions import TypeVar

from events import subjects
from events.codec import event_type
from events.envelope import ConcurrencyConflict, Context, Decision, Stored, Undecodable
from eventstore.connection import connect_service
from eventstore.jetstream import JetStreamStore
from eventstore.port import Delivery, EventLog
from eventstore.settings import StreamSettings
from services.runtime import metrics as m
from services.runtime.append_window import AppendWindow
from services.runtime.checkpointing import Checkpointer
from services.runtime.loop import Restart
from services.runtime.reactor import Executor, Inbox, Note, Observer, Reactor

S = TypeVar("S")
A = TypeVar("A", default=Never)  # effects for the executor
Ob = TypeVar("Ob", default=Never)  # observations from it
log = structlog.get_logger()

MAX_CONFLICT_RETRIES = 8
MAX_PASSES = 8  # decide again while effects change the state, at most this often
MIN_WAKEUP_GAP = 0.01  # a wakeup the decider keeps in the past cannot spin the timer
INFRASTRUCTURE = (TimeoutError, ConnectionError, nats.errors.Error)


class Unordered(Restart):
    """The stream holds an event this service never folded before one of its own appends
    that it folded at once. A replicated stream can accept an optimistic append past an
    event that is still being replicated (its expected-last-subject-sequence check runs on
    the leader before replication, per exact subject), so two services' concurrent appends
    to one aggregate can both land. The state misses that event for good; the process
    stops, and its restart folds the stream in order."""


# not the message's fault: the process stops, the delivery comes again (after a reconnect
# or a restart)
STOPS = (*INFRASTRUCTURE, Unordered)


class _Ahead:
    """Our own appends to one aggregate folded before the stream delivered them, and the
    last sequence of that aggregate the stream had delivered when the first was folded."""

    __slots__ = ("floor", "seqs")

    def __init__(self, floor: int) -> None:
        self.floor = floor
        self.seqs: set[int] = set()


async def finish(task: asyncio.Task[None]) -> None:
    """Cancel `task` and wait until it has ended. Cancelled again while it runs on: on
    Python 3.11 asyncio.wait_for swallows a cancel that arrives as what it awaits
    completes (the task goes on as if never cancelled), and a single cancel then waited
    for good; a handler's stop hung on its timer that way."""
    while not task.done():
        task.cancel()
        await asyncio.wait({task}, timeout=0.1)
    if not task.cancelled():
        task.exception()  # retrieved: an error of a companion at stop is not news


async def connect(urls: str, name: str) -> NATS:
    return await connect_service(urls, name)


class ServiceShell(Generic[S, A, Ob]):
    def __init__(
        self,
        reactor: Reactor[S, A, Ob],
        store: EventLog,
        *,
        node: str = "",
        batch: int = 256,
        tick_interval: float = 1.0,
        ack_wait: float = 10.0,
        clock: Callable[[], float] = time.time,
        observer: Observer[S, A, Ob] | None = None,
        executor: Executor[A] | None = None,
        inbox: Inbox[Ob] | None = None,
        window: int = 1,
        checkpoints: Checkpointer[S] | None = None,
    ) -> None:
        assert window == 1 or (observer is None and executor is None), (
            "a pipelined shell decides without effects"
        )
        self.reactor = reactor
        self.store = store
        self.node = node
        self.batch = batch
        self.tick_interval = tick_interval
        # how soon a message delivered to a crashed incarnation is delivered again
        self.ack_wait = ack_wait
        self.clock = clock
        self.observer = observer
        self.executor = executor
        self.inbox: Inbox[Ob] = inbox if inbox is not None else Inbox()
        self.state: S = reactor.initial_state()
        self.versions: dict[str, int] = {}  # aggregate key → last folded sequence
        self.ahead: dict[str, _Ahead] = {}  # aggregate key → own appends not yet delivered
        self.last_folded = 0
        # event ids appended without a concurrency check that the consumer has not
        # delivered back yet: deciding again before they are folded repeats them, and a
        # repeat is dropped here instead of at the server
        self.unconfirmed: set[str] = set()
        self.filters = list(reactor.filters())
        self.ready = False
        self._stop = asyncio.Event()
        self._lock = asyncio.Lock()  # one decision at a time
        self._undecided: deque[Ob] = deque()  # folded observations not yet decided on
        self._rearm = asyncio.Event()  # a decision may have moved the next wakeup
        self.log = log.bind(service=reactor.name, node=node or None)
        # window > 1: decide the next delivery while earlier ones' appends are in flight
        self.pipe = AppendWindow(window) if window > 1 else None
        self.fatal: BaseException | None = None  # an infrastructure error in the window
        # checkpoints (services/runtime/checkpointing.py): what they save is the fold of
        # the log alone, so a reactor with an observer keeps that fold apart from the state
        # its observations also change
        self.checkpoints = checkpoints
        self.folded: S = (
            reactor.initial_state()
            if checkpoints is not None and observer is not None
            else self.state
        )
        self.upto = 0  # every event of our filters up to here is folded

    @property
    def name(self) -> str:
        return self.reactor.name

    # ----------------------------------------------------------------- folding
    def fold(self, stored: Stored, *, own: bool = False) -> bool:
        """Fold one event: from the stream (a delivery, a catch-up) or, `own`, our own
        optimistic append as it was acknowledged."""
        key = subjects.aggregate_key(stored.subject)
        if self.unconfirmed:
            self.unconfirmed.discard(stored.event.meta.event_id)
        if own:
            if key not in self.ahead:  # all earlier own appends are back: the stream's version
                self.ahead[key] = _Ahead(self.versions.get(key, 0))
            self.ahead[key].seqs.add(stored.seq)
        else:
            self._in_order(key, stored)
        if stored.seq <= self.versions.get(key, 0):
            return False
        if stored.redelivery_of:
            # a retried dead letter: its original was folded; only the version moves
            # (the copy is the aggregate's last event now: OCC appends expect it)
            self.versions[key] = stored.seq
            self.last_folded = max(self.last_folded, stored.seq)
            return False
        self.state = self.reactor.evolve(self.state, stored)
        if self.folded is not self.state and self.checkpoints is not None:
            self.folded = self.reactor.evolve(self.folded, stored)
        self.versions[key] = stored.seq
        self.last_folded = max(self.last_folded, stored.seq)
        return True

    def _in_order(self, key: str, stored: Stored) -> None:
        """An event from the stream must not lie between what we had folded of its
        aggregate and one of our own appends folded since: that event was never folded."""
        ahead = self.ahead.get(key)
        if ahead is None:
            return
        last = max(ahead.seqs)
        if ahead.floor < stored.seq < last and stored.seq not in ahead.seqs:
            self.log.error(
                "an event landed before our own append unseen: stopping to fold again",
                subject=stored.subject,
                seq=stored.seq,
                own=sorted(ahead.seqs),
            )
            raise Unordered(f"{stored.subject} at {stored.seq} lies before our own {last}")
        ahead.floor = max(ahead.floor, stored.seq)
        ahead.seqs = {s for s in ahead.seqs if s > stored.seq}
        if not ahead.seqs:
            del self.ahead[key]

    def version_of(self, subject: str) -> int:
        return self.versions.get(subjects.aggregate_key(subject), 0)

    async def catch_up(self, filters: Sequence[str] | None = None, start_seq: int = 1) -> int:
        """Fold everything matching our filters (or a narrower set) from `start_seq`."""
        n = 0
        # poison is skipped here (the durable consumer delivers it too and dead-letters
        # it once), moving its aggregate's version past it
        async for stored in self.store.replay(
            filters or self.filters, start_seq=start_seq, raw=True, on_skip=self.skip
        ):
            if self.fold(stored):
                n += 1
        return n

    def skip(self, seq: int, subject: str) -> None:
        """An event no fold can read: every fold skips it the same way, moving its
        aggregate's version past it, so OCC appends expect the aggregate's real last
        sequence and the aggregate stays operable."""
        key = subjects.aggregate_key(subject)
        self.versions[key] = max(self.versions.get(key, 0), seq)
        self.last_folded = max(self.last_folded, seq)

    def _fold_observations(self) -> None:
        """Fold what the executor observed since the last decision (in order); each is
        decided on later, by the observation loop."""
        if self.observer is None:
            return
        for obs in self.inbox.take():
            self.state = self.observer.observe(self.state, obs)
            self._undecided.append(obs)

    # ---------------------------------------------------------------- deciding
    def context(self, cause: Stored | None) -> Context:
        return Context(self.name, self.node, self.clock(), cause)

    async def apply(
        self,
        decide: Callable[[Context], Sequence[Decision | A | Note[Ob]]],
        cause: Stored | None,
    ) -> None:
        """Run a decision: append its events, fold its notes, hand its effects to the
        executor; while notes or effects changed the state, decide again. On a conflict
        fold the aggregate's news and decide again on the fresher state."""
        for _attempt in range(MAX_CONFLICT_RETRIES):
            try:
                for _pass in range(MAX_PASSES):
                    acted = False
                    for out in decide(self.context(cause)):
                        acted = await self._carry_out(out, cause) or acted
                    if not acted:
                        break
                    self._fold_observations()
                if self.observer is not None:
                    self._rearm.set()  # the decision may have moved the next wakeup
                return
            except ConcurrencyConflict as c:
                m.CONFLICTS.labels(self.name).inc()
                self.log.info("conflict", aggregate=c.aggregate, expected=c.expected)
                kind, ns, name = c.aggregate.split("/")
                scope = subjects.aggregate_filter(kind, ns, name)
                await self.catch_up([scope], start_seq=c.expected + 1)
        raise RuntimeError(f"{self.name}: gave up after {MAX_CONFLICT_RETRIES} conflicts")

    async def _carry_out(self, out: Decision | A | Note[Ob], cause: Stored | None) -> bool:
        """One output; True when it changed the state (a note, an effect)."""
        if isinstance(out, Decision):
            await self._append(out, cause)
            return False
        if isinstance(out, Note):
            assert self.observer is not None, f"{self.name}: a note without an observer"
            self.state = self.observer.observe(self.state, out.observation)
            return True
        assert self.executor is not None, f"{self.name}: an effect without an executor"
        await self.executor.execute(out)
        return True

    async def _append(self, d: Decision, cause: Stored | None) -> None:
        if d.event.meta.event_id in self.unconfirmed:
            return  # appended already, on its way back to us
        subject = self._subject(d)
        await self._store(d, subject, self._expected(d, subject), cause)

    @staticmethod
    def _subject(d: Decision) -> str:
        ev = d.event
        return subjects.event_subject(ev.meta.aggregate, event_type(ev), ev.meta.node)

    def _expected(self, d: Decision, subject: str) -> int | None:
        if d.expected is not None:
            return d.expected
        return self.version_of(subject) if d.occ else None

    async def _store(
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
            self.fold(stored, own=True)
            return ack.seq
        if ack.seq > self.version_of(subject):
            self.unconfirmed.add(ev.meta.event_id)
        return None

    # --------------------------------------------------------------- pipelined
    async def _issue(self, cause: Stored) -> list[asyncio.Task[None]]:
        """Decide on `cause` and start its appends, one chain per aggregate, without
        waiting for them. A decision naming an aggregate whose appends are still in flight
        was made without them: wait for them (they fold as they land) and decide again."""
        assert self.pipe is not None
        for _ in range(self.pipe.size + 2):
            ctx = self.context(cause)
            chains: dict[str, list[Decision]] = {}
            for out in self.reactor.react(self.state, cause, ctx):
                assert isinstance(out, Decision), f"{self.name}: a pipelined shell only appends"
                if out.event.meta.event_id in self.unconfirmed:
                    continue  # appended already, on its way back to us
                chains.setdefault(subjects.aggregate_key(self._subject(out)), []).append(out)
            busy = self.pipe.busy(chains)
            if not busy:
                # no await from the decision to here: the first append of each chain
                # expects the version the decision saw
                return [
                    self.pipe.start(key, self._chain(ds, self._first_expected(ds), cause))
                    for key, ds in chains.items()
                ]
            m.PIPELINE_WAITS.labels(self.name).inc()
            await asyncio.wait(busy)
        raise RuntimeError(f"{self.name}: decisions kept naming aggregates in flight")

    def _first_expected(self, ds: list[Decision]) -> int | None:
        return self._expected(ds[0], self._subject(ds[0]))

    async def _chain(self, ds: list[Decision], first: int | None, cause: Stored) -> None:
        """One aggregate's appends of one decision, in order; an OCC append after one of
        ours expects that one's sequence."""
        previous: int | None = None  # our last append's sequence, when it was folded
        for i, d in enumerate(ds):
            subject = self._subject(d)
            if i == 0:
                expected = first
            elif previous is not None and d.occ and d.expected is None:
                expected = previous
            else:
                expected = self._expected(d, subject)
            previous = await self._store(d, subject, expected, cause)

    async def _handle_pipelined(self, msg: Delivery, stored: Stored, started: float) -> None:
        """Fold and decide now; the appends land, the delivery is acked and (on a conflict)
        decided again in the background, at most `window` deliveries at once."""
        assert self.pipe is not None
        await self.pipe.admit()
        try:
            async with self._lock:
                self.fold(stored)
                chains = await self._issue(stored)
                self._checkpoint(stored)
        except STOPS:
            self.pipe.release()
            raise
        except Exception as e:
            self.pipe.release()
            await self._refused(msg, stored, e)
            return
        if chains:
            self.pipe.track(asyncio.create_task(self._settle(msg, stored, chains, started)))
            return
        self.pipe.release()  # nothing to store: most deliveries
        await self._acked(msg, stored, started)

    async def _settle(
        self, msg: Delivery, stored: Stored, chains: list[asyncio.Task[None]], started: float
    ) -> None:
        """Ack once every append of the decision landed; on a conflict fold the aggregate's
        news and decide again."""
        try:
            for _attempt in range(MAX_CONFLICT_RETRIES):
                outcomes = await asyncio.gather(*chains, return_exceptions=True)
                failures = [o for o in outcomes if isinstance(o, BaseException)]
                if not failures:
                    await self._acked(msg, stored, started)
                    return
                for f in failures:
                    if not isinstance(f, ConcurrencyConflict):
                        raise f
                async with self._lock:
                    for c in failures:
                        assert isinstance(c, ConcurrencyConflict)
                        m.CONFLICTS.labels(self.name).inc()
                        self.log.info("conflict", aggregate=c.aggregate, expected=c.expected)
                        kind, ns, name = c.aggregate.split("/")
                        scope = subjects.aggregate_filter(kind, ns, name)
                        await self.catch_up([scope], start_seq=c.expected + 1)
                    chains = await self._issue(stored)
            raise RuntimeError(f"{self.name}: gave up after {MAX_CONFLICT_RETRIES} conflicts")
        except STOPS as e:
            self._fail(e)
        except asyncio.CancelledError:
            raise
        except Exception as e:
            await self._refused(msg, stored, e)

    async def _acked(self, msg: Delivery, stored: Stored, started: float) -> None:
        await msg.ack()
        etype = event_type(stored.event)
        m.EVENTS_HANDLED.labels(self.name, etype).inc()
        m.HANDLING_SECONDS.labels(self.name, etype).observe(time.perf_counter() - started)

    async def _refused(self, msg: Delivery, stored: Stored, e: Exception) -> None:
        self.log.error("reaction failed", type=event_type(stored.event), error=repr(e))
        await self._dead_letter(msg, f"{type(e).__name__}: {e}\n{traceback.format_exc()}")

    # ------------------------------------------------------------------ running
    async def handle(self, msg: Delivery) -> None:
        started = time.perf_counter()
        try:
            stored = msg.decode()
        except Undecodable as e:
            if msg.seq and msg.subject.startswith(f"{subjects.PREFIX}."):
                self.skip(msg.seq, msg.subject)
            await self._dead_letter(msg, f"undecodable event: {e}")
            return
        etype = event_type(stored.event)
        meta = stored.event.meta
        structlog.contextvars.bind_contextvars(
            correlation_id=meta.correlation_id, causation_id=meta.event_id, seq=stored.seq
        )
        if self.pipe is not None:
            try:
                await self._handle_pipelined(msg, stored, started)
            finally:
                structlog.contextvars.unbind_contextvars("correlation_id", "causation_id", "seq")
            return
        try:
            async with self._lock:
                self._fold_observations()
                self.fold(stored)
                await self.apply(lambda ctx: self.reactor.react(self.state, stored, ctx), stored)
                self._checkpoint(stored)
        except STOPS:
            raise
        except Exception as e:
            self.log.error("reaction failed", type=etype, error=repr(e))
            await self._dead_letter(msg, f"{type(e).__name__}: {e}\n{traceback.format_exc()}")
            return
        finally:
            structlog.contextvars.unbind_contextvars("correlation_id", "causation_id", "seq")
        await msg.ack()
        m.EVENTS_HANDLED.labels(self.name, etype).inc()
        m.HANDLING_SECONDS.labels(self.name, etype).observe(time.perf_counter() - started)

    async def _dead_letter(self, msg: Delivery, error: str) -> None:
        m.DEAD_LETTERS.labels(self.name).inc()
        self.log.warning("dead letter", subject=msg.subject, error=error.splitlines()[0])
        await self.store.dead_letter(self.name, msg, error)
        await msg.ack()

    async def tick(self) -> None:
        async with self._lock:
            if self.pipe is not None:
                # decide on everything in flight having landed (folded): a tick looks at
                # every object, not only at the ones a delivery named
                await self.pipe.settle_appends()
            self._fold_observations()
            await self.apply(lambda ctx: self.reactor.tick(self.state, ctx), None)
            self._checkpoint()

    async def _timer(self) -> None:
        """Ticks: every `tick_interval`, and sooner when the observer asks for a wakeup."""
        next_tick = time.monotonic() + (self.tick_interval if self.observer else 0.0)
        last = 0.0
        while True:
            now = time.monotonic()
            due = next_tick
            if self.observer is not None:
                at = self.observer.wakeup(self.state)
                if at is not None:
                    due = min(due, max(last + MIN_WAKEUP_GAP, now + at - self.clock()))
            if due > now:
                self._rearm.clear()
                with contextlib.suppress(TimeoutError):
                    # the one wait_for left: a stop ends this task with finish(), which
                    # copes with the cancel it may lose
                    await asyncio.wait_for(self._rearm.wait(), due - now)  # noqa: TID251
                continue
            last = now
            if now >= next_tick:
                next_tick = now + self.tick_interval
            try:
                await self.tick()
            except Unordered as e:
                self._fail(e)
                return
            except Exception as e:  # the next tick decides again
                self.log.error("tick failed", error=repr(e))
                await asyncio.sleep(self.tick_interval)

    async def _observations(self) -> None:
        """Decides on each observation, in the order they were folded."""
        assert self.observer is not None
        observer = self.observer
        while True:
            if not self._undecided:
                await self.inbox.wait()
            async with self._lock:
                self._fold_observations()
                if not self._undecided:
                    continue
                obs = self._undecided.popleft()

                def respond(ctx: Context, obs: Ob = obs) -> Sequence[Decision | A | Note[Ob]]:
                    return observer.respond(self.state, obs, ctx)

                try:
                    await self.apply(respond, None)
                except Unordered as e:
                    self._fail(e)
                    return
                except INFRASTRUCTURE as e:  # the next tick decides again
                    self.log.warning("decision failed", error=repr(e))
                except Exception as e:
                    self.log.error("decision failed", observation=repr(obs), error=repr(e))

    async def run(self, started: Callable[[], Any] | None = None) -> None:
        await self.store.ensure()
        consumer = await self.store.durable(
            self.name, self.filters, ack_wait=self.ack_wait, batch=self.batch
        )
        start = await self._load_checkpoint()
        end = await self.store.stream_last_seq()
        n = await self.catch_up(start_seq=start)
        self.upto = max(self.upto, end)
        self.log.info("caught up", events=n, last_seq=self.last_folded, from_seq=start)
        # export the counters at 0 from the start: increase()/rate() miss a series' first
        # increment, so an alert on the first dead letter needs the 0 sample before it
        for counter in (m.DEAD_LETTERS, m.CONFLICTS, m.DUPLICATES):
            counter.labels(self.name)
        companions: list[asyncio.Task[None]] = []
        try:
            if self.executor is not None:
                await self.executor.open()
            if self.observer is not None:
                await self.tick()  # the first decision over everything, before ready
                companions.append(asyncio.create_task(self._observations()))
            companions.append(asyncio.create_task(self._timer()))
            self.ready = True
            if started:
                started()
            while not self._stop.is_set():
                try:
                    msgs = await consumer.fetch(timeout=min(self.tick_interval, 1.0))
                except TimeoutError:
                    # nothing deliverable: the backlog is empty (and the series exists
                    # from the first idle poll, not only after the first batch)
                    m.CONSUMER_PENDING.labels(self.name).set(0)
                    continue
                for msg in msgs:
                    await self.handle(msg)
                    if self._stop.is_set():
                        break  # the rest are redelivered to the next incarnation
                m.CONSUMER_PENDING.labels(self.name).set(consumer.pending)
            if self.pipe is not None:
                await self.pipe.drain(self.ack_wait)
            if self.fatal is not None:
                raise self.fatal
        finally:
            self.ready = False
            if self.pipe is not None:
                await self.pipe.drain(0)
            for task in companions:
                await finish(task)
            await consumer.close()
            if self.checkpoints is not None:
                if self.fatal is None:
                    self._checkpoint(force=True)
                await self.checkpoints.settle()

    # ------------------------------------------------------------- checkpoints
    async def _load_checkpoint(self) -> int:
        """State and versions from the newest usable checkpoint; the sequence to fold on
        from (1 without one)."""
        if self.checkpoints is None:
            return 1
        loaded = await self.checkpoints.load()
        if loaded is None:
            return 1
        self.state = loaded.state
        self.folded = loaded.again if self.observer is not None else self.state
        self.versions = loaded.versions
        self.upto = loaded.upto
        self.last_folded = max([loaded.upto, *loaded.versions.values()])
        self.log.info("checkpoint loaded", seq=loaded.upto, aggregates=len(loaded.versions))
        return loaded.upto + 1

    def _checkpoint(self, stored: Stored | None = None, *, force: bool = False) -> None:
        """Take a checkpoint when one is due and the state is a fold in stream order (no own
        append folded ahead of its delivery). Called with the decision lock held."""
        if self.checkpoints is None:
            return
        if stored is not None:
            self.upto = max(self.upto, stored.seq)
        if self.ahead or not (force or self.checkpoints.due(self.upto)):
            return
        if force and self.upto <= self.checkpoints.saved_upto:
            return
        self.checkpoints.take(self.upto, dict(self.versions), self.folded)

    def _fail(self, e: BaseException) -> None:
        """Stop the process after the message in hand: its restart starts afresh."""
        self.fatal = self.fatal or e
        self._stop.set()

    def stop(self) -> None:
        self._stop.set()


def install_signal_handlers(stop: Callable[[], None]) -> None:
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop)


class Runnable(Protocol):
    """What a service process runs: a shell, or a shell with companions (heartbeats)."""

    @property
    def ready(self) -> bool: ...

    async def run(self) -> None: ...

    def stop(self) -> None: ...


async def run_process(
    name: str,
    nats_url: str,
    make: Callable[[JetStreamStore], Runnable],
    *,
    metrics_port: int | None = None,
    settings: StreamSettings | None = None,
) -> None:
    """Run one service until SIGTERM/SIGINT: connect, serve health/metrics, consume,
    then finish the message in hand, drain and close."""
    from services.runtime.http import HealthServer

    nc = await connect(nats_url, name)
    service = make(JetStreamStore(nc, settings))
    install_signal_handlers(service.stop)
    health = None
    if metrics_port is not None:
        health = HealthServer("127.0.0.1", metrics_port, lambda: service.ready and nc.is_connected)
        await health.start()
    try:
        await service.run()
    finally:
        if health:
            await health.stop()
        with contextlib.suppress(Exception):
            await nc.drain()


async def serve(
    reactor: Reactor[S, Never, Never],
    nats_url: str,
    *,
    node: str = "",
    metrics_port: int | None = None,
    settings: StreamSettings | None = None,
) -> None:
    """Run a reactor in its shell as a service process."""
    await run_process(
        reactor.name,
        nats_url,
        lambda store: ServiceShell(reactor, store, node=node),
        metrics_port=metrics_port,
        settings=settings,
    )
