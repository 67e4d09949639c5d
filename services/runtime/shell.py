"""The service shell: one durable pull consumer, fold, decide, append, ack.

Start-up rebuilds the state from the stream with an ordered consumer (fast), then consumes
the durable consumer. A message already folded during catch-up is not folded twice (per
aggregate, by stream sequence) but is still decided on: deciders are level-triggered
against state, so deciding again is harmless, and the deterministic event ids make a
repeated append a duplicate. The ack comes only after the decision's events are appended.

The pieces: the fold and its bookkeeping (`folding.py`), appending decisions and retrying
conflicts (`appends.py`), how a delivery ends (`acks.py`), and two delivery loops: the
sequential one (`sequential.py`), and with a `window` > 1 (the controller) the pipelined
one (`pipelined.py`), which decides the next delivery while earlier ones' appends are in
flight and acks each once its own appends have landed.

A reactor with an `Observer` (the handler, the controller) has a second input:
observations put into the `Inbox` (by its executor, or beside the shell: the
controller's heartbeats). Bus messages, observations and ticks are decided one at a time
(a lock: they interleave only at awaits); each decision first folds the observations made
so far. Its effects go to the executor, then it is decided again on what they changed,
until it asks for nothing more.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Generic, Never, Protocol

import structlog
from typing_extensions import TypeVar

from events import subjects
from events.envelope import Context, Decision, Stored
from eventstore.connection import connect_service
from eventstore.jetstream import JetStreamStore
from eventstore.port import Consumer, EventLog, Undecodable
from eventstore.port import Delivery as Message
from eventstore.settings import StreamSettings
from eventstore.tasks import finish
from services.runtime import metrics as m
from services.runtime.acks import INFRASTRUCTURE, Acks
from services.runtime.append_window import AppendWindow
from services.runtime.appends import Appends, GaveUp
from services.runtime.checkpointing import Checkpointer
from services.runtime.failover import riding_out
from services.runtime.folding import Ahead, Folding, Unordered
from services.runtime.inbox import Inbox
from services.runtime.metrics_access import MetricsAccess
from services.runtime.pipelined import Pipelined
from services.runtime.reactor import Delivering, Executor, Note, Observer, Reactor
from services.runtime.sequential import Sequential
from services.runtime.tick_failures import TickFailures

S = TypeVar("S")
A = TypeVar("A", default=Never)  # effects for the executor
Ob = TypeVar("Ob", default=Never)  # observations from it
log = structlog.get_logger()

MIN_WAKEUP_GAP = 0.01  # a wakeup the decider keeps in the past cannot spin the timer
# how long an idle consumer's pull waits at the server: each expiry is a request and a
# wakeup on both sides, so a cluster at rest costs what its services' polls cost (a stop
# cancels the wait)
IDLE_FETCH = 5.0

__all__ = ["ServiceShell", "Unordered", "finish", "run_process", "serve"]


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
        assert window == 1 or executor is None, "a pipelined shell carries out no effects"
        self.reactor = reactor
        self.store = store
        self.node = node
        self.batch = batch
        self.tick_interval = tick_interval
        self.tick_failures = TickFailures(tick_interval)  # the timer's backoff after failures
        # how soon a message delivered to a crashed incarnation is delivered again
        self.ack_wait = ack_wait
        self.clock = clock
        self.observer = observer
        self.executor = executor
        self.inbox: Inbox[Ob] = inbox if inbox is not None else Inbox()
        self.filters = list(reactor.filters())
        self.ready = False
        self._stop = asyncio.Event()
        self._waiting: asyncio.Future[list[Message]] | None = None  # an idle fetch
        self._lock = asyncio.Lock()  # one decision at a time
        self.log = log.bind(service=reactor.name, node=node or None)
        self.folding = Folding(reactor.evolve, reactor.initial_state(), self.log)
        self.appends = Appends(reactor.name, store, self.folding, self.filters, self.log)
        self.acks = Acks(reactor.name, store, self.log)
        self.sequential = Sequential(
            reactor,
            self.folding,
            self.appends,
            self.acks,
            self._lock,
            self.context,
            observer=observer,
            executor=executor,
            inbox=self.inbox,
        )
        # window > 1: decide the next delivery while earlier ones' appends are in flight
        self.delivering: Delivering = (
            Pipelined(
                reactor,
                self.folding,
                self.appends,
                self.acks,
                self._lock,
                self.context,
                window=window,
                before=self.sequential.fold_observations,
                fail=self._fail,
            )
            if window > 1
            else self.sequential
        )
        self.fatal: BaseException | None = None  # an infrastructure error in the window
        # checkpoints (services/runtime/checkpointing.py): taken of the fold of the log
        # alone, which a state holding observations keeps apart (`Folding.log_only`)
        self.checkpoints = checkpoints
        if checkpoints is not None and checkpoints.apart:
            self.folding.log_only = reactor.initial_state()
        self.upto = 0  # every event of our filters up to here is folded

    @property
    def name(self) -> str:
        return self.reactor.name

    @property
    def pipe(self) -> AppendWindow | None:
        pipe = self.delivering.pipe
        assert pipe is None or isinstance(pipe, AppendWindow)
        return pipe

    # ----------------------------------------------------------------- folding
    @property
    def state(self) -> S:
        return self.folding.state

    @property
    def ahead(self) -> dict[str, Ahead]:
        return self.folding.ahead

    def fold(self, stored: Stored, *, own: bool = False) -> bool:
        return self.folding.fold(stored, own=own)

    def start_from(self, state: S, last_seq: int, versions: Mapping[str, int]) -> None:
        """Run from a state that covers the stream up to `last_seq` (a checkpoint): the
        catch-up at start folds from the next sequence. Before `run`."""
        self.folding.start_from(state, last_seq, versions)

    # ---------------------------------------------------------------- deciding
    def context(self, cause: Stored | None) -> Context:
        return Context(self.name, self.node, self.clock(), cause)

    async def apply(
        self,
        decide: Callable[[Context], Sequence[Decision | A | Note[Ob]]],
        cause: Stored | None,
    ) -> None:
        """Run a decision to the end: its appends, notes and effects (the lock held)."""
        await self.sequential.apply(decide, cause)

    # ------------------------------------------------------------------ running
    async def handle(self, msg: Message) -> None:
        started = time.perf_counter()
        try:
            stored = msg.decode()
        except Undecodable as e:
            if msg.seq and msg.subject.startswith(f"{subjects.PREFIX}."):
                self.folding.skip(msg.seq, msg.subject)
            await self.acks.dead_letter(msg, f"undecodable event: {e}")
            return
        meta = stored.event.meta
        structlog.contextvars.bind_contextvars(
            correlation_id=meta.correlation_id, causation_id=meta.event_id, seq=stored.seq
        )
        try:
            await self.delivering.deliver(msg, stored, started)
            self._checkpoint(stored)
        finally:
            structlog.contextvars.unbind_contextvars("correlation_id", "causation_id", "seq")

    async def tick(self) -> None:
        async with self._lock:
            # decide on everything in flight having landed (folded): a tick looks at every
            # object, not only at the ones a delivery named
            await self.delivering.settle_appends()
            self.sequential.fold_observations()
            await self.apply(lambda ctx: self.reactor.tick(self.state, ctx), None)
            self._checkpoint()

    async def _timer(self) -> None:
        """Ticks: every `tick_interval`, and sooner when the observer asks for a wakeup;
        after a failed tick, later and later until one succeeds (`tick_failures.py`)."""
        next_tick = time.monotonic() + (self.tick_interval if self.observer else 0.0)
        last = 0.0
        rearm = self.sequential.rearm
        failures = self.tick_failures
        while True:
            now = time.monotonic()
            due = next_tick
            # a wakeup asks for the tick that is failing: not sooner than its backoff
            if self.observer is not None and not failures.streak:
                at = self.observer.wakeup(self.state)
                if at is not None:
                    due = min(due, max(last + MIN_WAKEUP_GAP, now + at - self.clock()))
            if due > now:
                rearm.clear()
                with contextlib.suppress(TimeoutError):
                    # the one wait_for left: a stop ends this task with finish(), which
                    # copes with the cancel it may lose
                    await asyncio.wait_for(rearm.wait(), due - now)  # noqa: TID251
                continue
            last = now
            if now >= next_tick:
                next_tick = now + self.tick_interval
            try:
                await self.tick()
            except Unordered as e:
                self._fail(e)
                return
            except Exception as e:  # the next tick decides again, after a backoff
                wait = failures.failed()
                next_tick = time.monotonic() + wait
                self.log.error("tick failed", error=repr(e), failed=failures.streak, next_in=wait)
                if isinstance(e, GaveUp):
                    await self._record_give_up(e)
            else:
                failures.succeeded()

    async def _record_give_up(self, e: GaveUp) -> None:
        """A tick that gave up, where the user looks (`virtstream dead-letters`, the
        dead-letter alert), once per streak of failed ticks: a tick has no delivery, so
        the dead letter holds the error alone, and a retry has nothing to send (the next
        tick decides again anyway)."""
        kind = str(e)
        if not self.tick_failures.news(kind):
            return
        try:
            await self.acks.dead_letter(None, f"{type(e).__name__} on a tick: {e}")
        except Exception as err:  # recorded at a later failure of the streak, then
            self.log.warning("give-up not recorded", error=repr(err))
            return
        self.tick_failures.told(kind)

    async def _observations(self) -> None:
        """Decides on each observation, in the order they were folded."""
        assert self.observer is not None
        observer = self.observer
        undecided = self.sequential.undecided
        while True:
            if not undecided:
                await self.inbox.wait()
            async with self._lock:
                self.sequential.fold_observations()
                if not undecided:
                    continue
                obs = undecided.popleft()

                def respond(ctx: Context, obs: Ob = obs) -> Sequence[Decision | A | Note[Ob]]:
                    return observer.respond(self.state, obs, ctx)

                try:
                    if self.delivering.pipe is not None:
                        if not respond(self.context(None)):
                            continue  # nothing to decide (a heartbeat): no wait for the window
                        # what it decides is decided as a tick's: on every append landed
                        await self.delivering.settle_appends()
                    await self.apply(respond, None)
                except Unordered as e:
                    self._fail(e)
                    return
                except INFRASTRUCTURE as e:  # the next tick decides again
                    self.log.warning("decision failed", error=repr(e))
                except Exception as e:
                    self.log.error("decision failed", observation=repr(obs), error=repr(e))

    async def run(self, started: Callable[[], Any] | None = None) -> None:
        await riding_out(self.store.ensure, self.log, "streams")
        consumer = await riding_out(
            lambda: self.store.durable(
                self.name, self.filters, ack_wait=self.ack_wait, batch=self.batch
            ),
            self.log,
            "consumer",
        )
        if self.folding.last_folded == 0:
            await self._load_checkpoint()
        start = self.folding.last_folded + 1
        end = await riding_out(self.store.stream_last_seq, self.log, "last sequence")
        n = await self.appends.catch_up(start_seq=start)
        self.upto = max(self.upto, end)
        self.log.info("caught up", events=n, last_seq=self.folding.last_folded, from_seq=start)
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
                    msgs = await riding_out(lambda: self._fetch(consumer), self.log, "pull")
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
            await self.delivering.drain(self.ack_wait)
            if self.fatal is not None:
                raise self.fatal
        finally:
            self.ready = False
            await self.delivering.drain(0)
            for task in companions:
                await finish(task)
            await consumer.close()
            if self.checkpoints is not None:
                await self.checkpoints.settle()
                if self.fatal is None:
                    self._checkpoint(force=True)
                await self.checkpoints.settle()

    # ------------------------------------------------------------- checkpoints
    async def _load_checkpoint(self) -> None:
        """Start from the newest usable checkpoint, if there is one."""
        if self.checkpoints is None:
            return
        loaded = await self.checkpoints.load()
        if loaded is None:
            return
        self.folding.start_from(
            loaded.state,
            max([loaded.upto, *loaded.versions.values()]),
            loaded.versions,
            loaded.again,
            covered=loaded.upto,
        )
        self.upto = loaded.upto
        self.log.info("checkpoint loaded", seq=loaded.upto, aggregates=len(loaded.versions))

    def _checkpoint(self, stored: Stored | None = None, *, force: bool = False) -> None:
        """Take a checkpoint when one is due and the state is a fold in stream order (no own
        append folded ahead of its delivery). No await: one point of the fold."""
        cp = self.checkpoints
        if cp is None:
            return
        if stored is not None:
            self.upto = max(self.upto, stored.seq)
        if self.ahead or not (force or cp.due(self.upto)):
            return
        if force and self.upto <= cp.saved_upto:
            return
        f = self.folding
        saved = f.log_only if f.log_only is not None else f.state

        def holds(key: str) -> bool:
            return self.reactor.holds(f.state, key) or self.reactor.holds(saved, key)

        f.forget(self.upto, holds)
        cp.take(self.upto, dict(f.versions), saved)

    async def _fetch(self, consumer: Consumer) -> list[Message]:
        """The next deliveries: at once while there is a backlog; else a long wait, which
        a stop ends (a message it had pulled is redelivered to the next incarnation)."""
        if self._stop.is_set():  # (a stop while a failed pull waited to be asked again)
            return []
        if consumer.pending > 0:
            return await consumer.fetch(timeout=min(self.tick_interval, 1.0))
        self._waiting = asyncio.ensure_future(consumer.fetch(timeout=IDLE_FETCH))
        try:
            return await self._waiting
        except asyncio.CancelledError:
            if self._stop.is_set() and self._waiting.cancelled():
                return []
            raise
        finally:
            self._waiting = None

    def _fail(self, e: BaseException) -> None:
        """Stop the process after the message in hand: its restart starts afresh."""
        self.fatal = self.fatal or e
        self.stop()

    def stop(self) -> None:
        self._stop.set()
        if self._waiting is not None:
            self._waiting.cancel()


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
    metrics_access: MetricsAccess | None = None,
) -> None:
    """Run one service until SIGTERM/SIGINT: connect, serve health/metrics (guarded by
    `metrics_access`), consume, then finish the message in hand, drain and close."""
    from services.runtime.http import HealthServer

    nc = await connect_service(nats_url, name)
    store = JetStreamStore(nc, settings)
    service = make(store)
    install_signal_handlers(service.stop)
    health = None
    if metrics_port is not None:
        health = HealthServer(
            "127.0.0.1",
            metrics_port,
            lambda: service.ready and store.connected,
            metrics_access,
        )
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
