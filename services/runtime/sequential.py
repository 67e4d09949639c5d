"""The shell's sequential loop: one decision at a time, carried out to the end before the
next. A decision's outputs are carried out in order: its events appended, its notes folded
(`Observer.observe`), its effects handed to the executor; while notes or effects changed
the state, it is decided again (at most MAX_PASSES times). The delivery it decided on is
acked after that. Ticks and observations are decided this way in every shell (a pipelined
one first lets its appends in flight land)."""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import Callable, Sequence
from typing import Generic, Never

from typing_extensions import TypeVar

from events.envelope import Context, Decision, Stored
from eventstore.port import ConcurrencyConflict
from eventstore.port import Delivery as Message
from services.runtime.acks import STOPS, Acks
from services.runtime.appends import Appends
from services.runtime.folding import Folding
from services.runtime.inbox import Inbox
from services.runtime.reactor import Executor, Note, Observer, Reactor

S = TypeVar("S")
A = TypeVar("A", default=Never)  # effects for the executor
Ob = TypeVar("Ob", default=Never)  # observations from it

MAX_PASSES = 8  # decide again while effects change the state, at most this often

Decide = Callable[[Context], Sequence[Decision | A | Note[Ob]]]


class Sequential(Generic[S, A, Ob]):
    def __init__(
        self,
        reactor: Reactor[S, A, Ob],
        folding: Folding[S],
        appends: Appends[S],
        acks: Acks,
        lock: asyncio.Lock,
        context: Callable[[Stored | None], Context],
        *,
        observer: Observer[S, A, Ob] | None,
        executor: Executor[A] | None,
        inbox: Inbox[Ob],
    ) -> None:
        self.reactor = reactor
        self.folding = folding
        self.appends = appends
        self.acks = acks
        self.lock = lock  # one decision at a time
        self.context = context
        self.observer = observer
        self.executor = executor
        self.inbox = inbox
        self.undecided: deque[Ob] = deque()  # folded observations not yet decided on
        self.rearm = asyncio.Event()  # a decision may have moved the next wakeup

    async def deliver(self, msg: Message, stored: Stored, started: float) -> None:
        """Fold and decide on one delivery, then ack it (a failed reaction: dead letter)."""
        try:
            async with self.lock:
                self.fold_observations()
                self.folding.fold(stored)
                await self.apply(
                    lambda ctx: self.reactor.react(self.folding.state, stored, ctx), stored
                )
        except STOPS:
            raise
        except Exception as e:
            await self.acks.refused(msg, stored, e)
            return
        await self.acks.acked(msg, stored, started)

    # The delivery strategy's other two steps (`Delivering`): nothing is ever in flight here.
    pipe = None

    async def settle_appends(self) -> None:
        return None

    async def drain(self, timeout: float) -> None:
        return None

    def fold_observations(self) -> None:
        """Fold what the executor observed since the last decision (in order); each is
        decided on later, by the shell's observation loop."""
        if self.observer is None:
            return
        for obs in self.inbox.take():
            self.folding.state = self.observer.observe(self.folding.state, obs)
            self.undecided.append(obs)

    async def apply(self, decide: Decide[A, Ob], cause: Stored | None) -> None:
        """Run a decision to the end (the lock held). On a conflict fold the aggregate's
        news and decide again on the fresher state."""

        async def attempt() -> Sequence[ConcurrencyConflict]:
            try:
                await self._passes(decide, cause)
            except ConcurrencyConflict as c:
                return (c,)
            return ()

        await self.appends.retry_conflicts(attempt, _nothing, contextlib.nullcontext())
        if self.observer is not None:
            self.rearm.set()  # the decision may have moved the next wakeup

    async def _passes(self, decide: Decide[A, Ob], cause: Stored | None) -> None:
        for _pass in range(MAX_PASSES):
            acted = False
            for out in decide(self.context(cause)):
                acted = await self._carry_out(out, cause) or acted
            if not acted:
                return
            self.fold_observations()

    async def _carry_out(self, out: Decision | A | Note[Ob], cause: Stored | None) -> bool:
        """One output; True when it changed the state (a note, an effect)."""
        if isinstance(out, Decision):
            await self._append(out, cause)
            return False
        if isinstance(out, Note):
            assert self.observer is not None, f"{self.reactor.name}: a note without an observer"
            self.folding.state = self.observer.observe(self.folding.state, out.observation)
            return True
        assert self.executor is not None, f"{self.reactor.name}: an effect without an executor"
        await self.executor.execute(out)
        return True

    async def _append(self, d: Decision, cause: Stored | None) -> None:
        if d.event.meta.event_id in self.folding.unconfirmed:
            return  # appended already, on its way back to us
        subject = self.appends.subject(d)
        await self.appends.append(d, subject, self.appends.expected(d, subject), cause)


async def _nothing() -> None:
    """A sequential decision is made again by its next attempt."""
