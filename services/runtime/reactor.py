"""The port a service's pure core implements."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, TypeVar

from events.envelope import Context, Decision, Stored

S = TypeVar("S")


class Reactor(Protocol[S]):
    """`evolve` folds events into state; `react` decides what a delivered event calls for;
    `tick` decides what the passage of time calls for (timeouts, backoff). All pure:
    time and ids come from the Context."""

    name: str

    def filters(self) -> Sequence[str]: ...

    def initial_state(self) -> S: ...

    def evolve(self, state: S, stored: Stored) -> S: ...

    def react(self, state: S, stored: Stored, ctx: Context) -> Sequence[Decision]: ...

    def tick(self, state: S, ctx: Context) -> Sequence[Decision]: ...
