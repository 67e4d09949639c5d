"""The ports a service's pure core implements, and what its shell hands to executors.

Every service decides with a `Reactor`: bus events in, `Decision`s (appends) out. A service
that also acts outside the bus (the handler: launchers) returns effects of its own type `A`
beside the decisions, which the shell hands to an `Executor`; what those effects see comes
back as observations through an `Inbox` (inbox.py), and an `Observer` folds and decides on
them. Nothing here loads asyncio: the pure deciders import these types.
A `Note` is an observation the decider makes itself, to remember what it did."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Generic, Protocol

from typing_extensions import TypeVar

from events.envelope import Context, Decision, Stored

S = TypeVar("S")
A_co = TypeVar("A_co", covariant=True)
A_contra = TypeVar("A_contra", contravariant=True)
Ob = TypeVar("Ob")
Ob_co = TypeVar("Ob_co", covariant=True)


@dataclass(frozen=True, slots=True)
class Note(Generic[Ob_co]):
    """An observation among a decider's outputs: folded when the shell reaches it, so only
    once every output before it was carried out (an append that raised leaves it unmade)."""

    observation: Ob_co


class Reactor(Protocol[S, A_co, Ob_co]):
    """`evolve` folds events into state; `react` decides what a delivered event calls for;
    `tick` decides what the passage of time calls for (timeouts, backoff). All pure:
    time and ids come from the Context."""

    name: str

    def filters(self) -> Sequence[str]: ...

    def initial_state(self) -> S: ...

    def evolve(self, state: S, stored: Stored) -> S: ...

    def react(
        self, state: S, stored: Stored, ctx: Context
    ) -> Sequence[Decision | A_co | Note[Ob_co]]: ...

    def tick(self, state: S, ctx: Context) -> Sequence[Decision | A_co | Note[Ob_co]]: ...

    def holds(self, state: S, key: str) -> bool:
        """Whether the state still holds the aggregate `key` (`kind/ns/name` as stored):
        while it does the shell keeps the aggregate's version (an append expects it); once
        it does not, a checkpoint covering its last event forgets it. Pure."""
        ...


class Observer(Protocol[S, A_co, Ob]):
    """The second input of a reactor: observations that do not come from the bus.
    `observe` folds one, `respond` decides what it calls for, `wakeup` is the next time
    (the Context's clock) a tick is due before the periodic one. All pure."""

    def observe(self, state: S, obs: Ob) -> S: ...

    def respond(self, state: S, obs: Ob, ctx: Context) -> Sequence[Decision | A_co | Note[Ob]]: ...

    def wakeup(self, state: S) -> float | None: ...


class Delivering(Protocol):
    """How the shell carries a delivery to its ack: sequential.py's one decision at a time,
    or pipelined.py's window of appends in flight. `settle_appends` waits until nothing is
    in flight (a tick, an observation decide on every append landed), `drain` at a stop;
    `pipe` is the window, None without one."""

    @property
    def pipe(self) -> object | None: ...

    async def deliver(self, msg: Any, stored: Stored, started: float) -> None: ...

    async def settle_appends(self) -> None: ...

    async def drain(self, timeout: float) -> None: ...


class Executor(Protocol[A_contra]):
    """Carries out effects; what they change comes back through the shell's Inbox."""

    async def open(self) -> None:
        """Once the state is caught up, before the first decision (re-attach, adopt)."""
        ...

    async def execute(self, action: A_contra) -> None: ...
