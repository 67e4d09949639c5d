"""When a reader of the log takes its next checkpoint (`eventstore/checkpoints.py`): every
`every` events or `seconds` of time, whichever comes first, one write at a time, in the
background. The state is encoded by the caller at once, at one point of its fold; only the
write waits. Shared by the services' shell and the api's projection, which both refuse a
checkpoint the same way (`refused`)."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable

import structlog

log = structlog.get_logger("virtstream.checkpoints")

EVERY = 10_000
SECONDS = 60.0


class Cadence:
    def __init__(self, name: str, *, every: int = EVERY, seconds: float = SECONDS) -> None:
        self.name = name
        self.every = every
        self.seconds = seconds
        self.saved_upto = 0
        self.saved_at = time.monotonic()
        self._saving: asyncio.Task[None] | None = None

    def due(self, upto: int) -> bool:
        """A checkpoint at `upto` is due (and no write is in flight)."""
        if upto <= self.saved_upto or (self._saving is not None and not self._saving.done()):
            return False
        return (
            upto - self.saved_upto >= self.every or time.monotonic() - self.saved_at >= self.seconds
        )

    def loaded(self, upto: int) -> None:
        """The checkpoint a start loaded covers `upto`: the next is counted from it."""
        self.saved_upto = upto

    def taken(self, upto: int, write: Awaitable[None]) -> None:
        """A checkpoint at `upto` was encoded; `write` stores it, in the background."""
        self.saved_upto = upto
        self.saved_at = time.monotonic()
        self._saving = asyncio.ensure_future(write)

    async def settle(self) -> None:
        """Wait for a write in flight (its failure was the writer's to report)."""
        if self._saving is not None:
            with contextlib.suppress(Exception):
                await self._saving


def refused(name: str, reason: str) -> None:
    """A checkpoint that cannot be used, said in one line: the caller rebuilds from the log."""
    log.warning("checkpoint refused: rebuilding from the log", checkpoint=name, reason=reason)
