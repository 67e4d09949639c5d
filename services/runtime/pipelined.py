"""The shell's pipelined loop (`window` > 1; the controller's): a delivery is folded and
decided at once, its appends start as one chain per aggregate, and the next delivery is
decided while they wait for the log's acks. The delivery is acked once its chains have
landed (each optimistic append folded as it lands); a conflict folds the news and decides
that delivery again. `append_window.py` keeps at most `window` deliveries unacked and one
chain per aggregate in flight. A pipelined reactor returns decisions only."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import Any, Generic, TypeVar

from events import subjects
from events.envelope import Context, Decision, Stored
from eventstore.port import ConcurrencyConflict
from eventstore.port import Delivery as Message
from services.runtime import metrics as m
from services.runtime.acks import STOPS, Acks
from services.runtime.append_window import AppendWindow
from services.runtime.appends import Appends
from services.runtime.folding import Folding
from services.runtime.reactor import Reactor

S = TypeVar("S")


class Pipelined(Generic[S]):
    def __init__(
        self,
        reactor: Reactor[S, Any, Any],
        folding: Folding[S],
        appends: Appends[S],
        acks: Acks,
        lock: asyncio.Lock,
        context: Callable[[Stored | None], Context],
        *,
        window: int,
        before: Callable[[], None],
        fail: Callable[[BaseException], None],
    ) -> None:
        self.reactor = reactor
        self.folding = folding
        self.appends = appends
        self.acks = acks
        self.lock = lock
        self.context = context
        self.window = AppendWindow(window)
        self.before = before  # folds what else came in before each decision (observations)
        self.fail = fail  # stops the process after an error in the background

    async def deliver(self, msg: Message, stored: Stored, started: float) -> None:
        """Fold and decide now; the appends land, the delivery is acked and (on a conflict)
        decided again in the background, at most `window` deliveries at once."""
        await self.window.admit()
        try:
            async with self.lock:
                self.before()
                self.folding.fold(stored)
                chains = await self._issue(stored)
        except STOPS:
            self.window.release()
            raise
        except Exception as e:
            self.window.release()
            await self.acks.refused(msg, stored, e)
            return
        if chains:
            self.window.track(asyncio.create_task(self._settle(msg, stored, chains, started)))
            return
        self.window.release()  # nothing to store: most deliveries
        await self.acks.acked(msg, stored, started)

    async def _issue(self, cause: Stored) -> list[asyncio.Task[None]]:
        """Decide on `cause` and start its appends, one chain per aggregate, without
        waiting for them. A decision naming an aggregate whose appends are still in flight
        was made without them: wait for them (they fold as they land) and decide again."""
        for _ in range(self.window.size + 2):
            ctx = self.context(cause)
            chains: dict[str, list[Decision]] = {}
            for out in self.reactor.react(self.folding.state, cause, ctx):
                assert isinstance(out, Decision), (
                    f"{self.reactor.name}: a pipelined shell only appends"
                )
                if out.event.meta.event_id in self.folding.unconfirmed:
                    continue  # appended already, on its way back to us
                key = subjects.aggregate_key(self.appends.subject(out))
                chains.setdefault(key, []).append(out)
            busy = self.window.busy(chains)
            if not busy:
                # no await from the decision to here: the first append of each chain
                # expects the version the decision saw
                return [
                    self.window.start(key, self._chain(ds, self._first_expected(ds), cause))
                    for key, ds in chains.items()
                ]
            m.PIPELINE_WAITS.labels(self.reactor.name).inc()
            await asyncio.wait(busy)
        raise RuntimeError(f"{self.reactor.name}: decisions kept naming aggregates in flight")

    def _first_expected(self, ds: list[Decision]) -> int | None:
        return self.appends.expected(ds[0], self.appends.subject(ds[0]))

    async def _chain(self, ds: list[Decision], first: int | None, cause: Stored) -> None:
        """One aggregate's appends of one decision, in order; an OCC append after one of
        ours expects that one's sequence."""
        previous: int | None = None  # our last append's sequence, when it was folded
        for i, d in enumerate(ds):
            subject = self.appends.subject(d)
            if i == 0:
                expected = first
            elif previous is not None and d.occ and d.expected is None:
                expected = previous
            else:
                expected = self.appends.expected(d, subject)
            previous = await self.appends.append(d, subject, expected, cause)

    async def _settle(
        self, msg: Message, stored: Stored, chains: list[asyncio.Task[None]], started: float
    ) -> None:
        """Ack once every append of the decision landed; on a conflict fold the aggregate's
        news and decide again."""

        async def landed() -> Sequence[ConcurrencyConflict]:
            outcomes = await asyncio.gather(*chains, return_exceptions=True)
            conflicts = []
            for o in outcomes:
                if isinstance(o, ConcurrencyConflict):
                    conflicts.append(o)
                elif isinstance(o, BaseException):
                    raise o
            return conflicts

        async def again() -> None:
            nonlocal chains
            chains = await self._issue(stored)

        try:
            await self.appends.retry_conflicts(landed, again, self.lock)
            await self.acks.acked(msg, stored, started)
        except STOPS as e:
            self.fail(e)
        except asyncio.CancelledError:
            raise
        except Exception as e:
            await self.acks.refused(msg, stored, e)

    @property
    def pipe(self) -> AppendWindow:
        return self.window

    async def settle_appends(self) -> None:
        """Until every chain in flight has landed (a tick decides on all of them folded)."""
        await self.window.settle_appends()

    async def drain(self, timeout: float) -> None:
        await self.window.drain(timeout)
