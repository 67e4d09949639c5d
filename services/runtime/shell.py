"""The service shell: one durable pull consumer, fold, decide, append, ack.

Start-up rebuilds the state from the stream with an ordered consumer (fast), then consumes
the durable consumer. A message already folded during catch-up is not folded twice (per
aggregate, by stream sequence) but is still decided on: deciders are level-triggered
against state, so deciding again is harmless, and the deterministic event ids make a
repeated append a duplicate. The ack comes only after the decision's events are appended.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import time
import traceback
from collections.abc import Callable, Sequence
from typing import Any, Generic, Protocol, TypeVar

import nats
import structlog
from nats.aio.client import Client as NATS

from events import subjects
from events.codec import event_type
from events.envelope import ConcurrencyConflict, Context, Decision, Stored, Undecodable
from eventstore.connection import connect_service
from eventstore.jetstream import JetStreamStore
from eventstore.port import Delivery, EventLog
from eventstore.settings import StreamSettings
from services.runtime import metrics as m
from services.runtime.reactor import Reactor

S = TypeVar("S")
log = structlog.get_logger()

MAX_CONFLICT_RETRIES = 8


async def connect(urls: str, name: str) -> NATS:
    return await connect_service(urls, name)


class ServiceShell(Generic[S]):
    def __init__(
        self,
        reactor: Reactor[S],
        store: EventLog,
        *,
        node: str = "",
        batch: int = 256,
        tick_interval: float = 1.0,
        ack_wait: float = 10.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.reactor = reactor
        self.store = store
        self.node = node
        self.batch = batch
        self.tick_interval = tick_interval
        # how soon a message delivered to a crashed incarnation is delivered again
        self.ack_wait = ack_wait
        self.clock = clock
        self.state: S = reactor.initial_state()
        self.versions: dict[str, int] = {}  # aggregate key → last folded sequence
        self.last_folded = 0
        self.filters = list(reactor.filters())
        self.ready = False
        self._stop = asyncio.Event()
        self.log = log.bind(service=reactor.name, node=node or None)

    @property
    def name(self) -> str:
        return self.reactor.name

    # ----------------------------------------------------------------- folding
    def fold(self, stored: Stored) -> bool:
        key = subjects.aggregate_key(stored.subject)
        if stored.seq <= self.versions.get(key, 0):
            return False
        if stored.redelivery_of:
            # a retried dead letter: its original was folded; only the version moves
            # (the copy is the aggregate's last event now: OCC appends expect it)
            self.versions[key] = stored.seq
            self.last_folded = max(self.last_folded, stored.seq)
            return False
        self.state = self.reactor.evolve(self.state, stored)
        self.versions[key] = stored.seq
        self.last_folded = max(self.last_folded, stored.seq)
        return True

    def version_of(self, subject: str) -> int:
        return self.versions.get(subjects.aggregate_key(subject), 0)

    async def catch_up(self, filters: Sequence[str] | None = None, start_seq: int = 1) -> int:
        """Fold everything matching our filters (or a narrower set) from `start_seq`."""
        n = 0
        # raw: poison is skipped here; the durable consumer delivers it too and
        # dead-letters it once
        async for stored in self.store.replay(
            filters or self.filters, start_seq=start_seq, raw=True
        ):
            if self.fold(stored):
                n += 1
        return n

    # ---------------------------------------------------------------- deciding
    def context(self, cause: Stored | None) -> Context:
        return Context(self.name, self.node, self.clock(), cause)

    async def apply(
        self, decide: Callable[[Context], Sequence[Decision]], cause: Stored | None
    ) -> None:
        """Run a decision and append its events; on a conflict fold the aggregate's news
        and decide again on the fresher state."""
        for _attempt in range(MAX_CONFLICT_RETRIES):
            ctx = self.context(cause)
            decisions = decide(ctx)
            try:
                for d in decisions:
                    await self._append(d, cause)
                return
            except ConcurrencyConflict as c:
                m.CONFLICTS.labels(self.name).inc()
                self.log.info("conflict", aggregate=c.aggregate, expected=c.expected)
                kind, ns, name = c.aggregate.split("/")
                scope = subjects.aggregate_filter(kind, ns, name)
                await self.catch_up([scope], start_seq=c.expected + 1)
        raise RuntimeError(f"{self.name}: gave up after {MAX_CONFLICT_RETRIES} conflicts")

    async def _append(self, d: Decision, cause: Stored | None) -> None:
        ev = d.event
        agg = ev.meta.aggregate
        subject = subjects.event_subject(agg, event_type(ev), ev.meta.node)
        expected = self.version_of(subject) if d.occ else None
        ack = await self.store.append(ev, expected=expected)
        etype = event_type(ev)
        if ack.duplicate:
            m.DUPLICATES.labels(self.name).inc()
        else:
            m.EVENTS_APPENDED.labels(self.name, etype).inc()
            if cause is not None:
                hop = f"{event_type(cause.event)}->{etype}"
                m.HOP_SECONDS.labels(hop).observe(
                    max(0.0, ev.meta.occurred_at - cause.event.meta.occurred_at)
                )
        # Our own OCC append is folded now, so the next decision sees it even before the
        # consumer delivers it back; a non-OCC append waits for the consumer, since events
        # of that aggregate we have not seen yet may lie before it.
        if d.occ and any(subjects.matches(f, subject) for f in self.filters):
            self.fold(Stored(seq=ack.seq, subject=subject, time=ev.meta.occurred_at, event=ev))

    # ------------------------------------------------------------------ running
    async def handle(self, msg: Delivery) -> None:
        started = time.perf_counter()
        try:
            stored = msg.decode()
        except Undecodable as e:
            await self._dead_letter(msg, f"undecodable event: {e}")
            return
        etype = event_type(stored.event)
        meta = stored.event.meta
        structlog.contextvars.bind_contextvars(
            correlation_id=meta.correlation_id, causation_id=meta.event_id, seq=stored.seq
        )
        try:
            self.fold(stored)
            await self.apply(lambda ctx: self.reactor.react(self.state, stored, ctx), stored)
        except (TimeoutError, ConnectionError, nats.errors.Error):
            raise  # infrastructure: not the message's fault; redelivered after reconnect
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
        await self.apply(lambda ctx: self.reactor.tick(self.state, ctx), None)

    async def run(self, started: Callable[[], Any] | None = None) -> None:
        await self.store.ensure()
        consumer = await self.store.durable(
            self.name, self.filters, ack_wait=self.ack_wait, batch=self.batch
        )
        n = await self.catch_up()
        self.log.info("caught up", events=n, last_seq=self.last_folded)
        # export the counters at 0 from the start: increase()/rate() miss a series' first
        # increment, so an alert on the first dead letter needs the 0 sample before it
        for counter in (m.DEAD_LETTERS, m.CONFLICTS, m.DUPLICATES):
            counter.labels(self.name)
        self.ready = True
        if started:
            started()
        next_tick = time.monotonic()
        try:
            while not self._stop.is_set():
                if time.monotonic() >= next_tick:
                    await self.tick()
                    next_tick = time.monotonic() + self.tick_interval
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
        finally:
            self.ready = False
            await consumer.close()

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
    reactor: Reactor[S],
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
