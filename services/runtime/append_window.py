"""The shell's window of deliveries whose appends are in flight.

A pipelined shell decides the next delivery while the previous ones' appends wait for
JetStream's (fsync'd) acks. This holds what makes that safe: at most `size` deliveries
are unacknowledged at once (memory stays flat), and each aggregate has at most one chain
of appends in flight, so its events are stored in the order they were decided and each
optimistic append expects the version the decision saw."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Coroutine, Iterable
from typing import Any


class AppendWindow:
    def __init__(self, size: int) -> None:
        assert size >= 1, "a window holds at least one delivery"
        self.size = size
        self._slots = asyncio.Semaphore(size)
        self._appending: dict[str, asyncio.Task[Any]] = {}  # aggregate key → its chain
        self._deliveries: set[asyncio.Task[None]] = set()
        self.peak = 0  # the most deliveries ever in flight at once

    @property
    def in_flight(self) -> int:
        return len(self._deliveries)

    async def admit(self) -> None:
        """Wait for a free slot; the caller hands it back with `track` or `release`."""
        await self._slots.acquire()

    def release(self) -> None:
        self._slots.release()

    def track(self, task: asyncio.Task[None]) -> None:
        """A delivery settling in the background: its slot frees when it is done."""
        self._deliveries.add(task)
        self.peak = max(self.peak, len(self._deliveries))

        def done(t: asyncio.Task[None]) -> None:
            self._deliveries.discard(t)
            self._slots.release()

        task.add_done_callback(done)

    def busy(self, keys: Iterable[str]) -> list[asyncio.Task[Any]]:
        """The chains still in flight for any of these aggregates."""
        return [t for k in keys if (t := self._appending.get(k)) is not None and not t.done()]

    def start(self, key: str, chain: Coroutine[Any, Any, Any]) -> asyncio.Task[Any]:
        assert not self.busy([key]), f"{key}: a second chain of appends in flight"
        task = asyncio.create_task(chain)
        self._appending[key] = task

        def done(t: asyncio.Task[Any]) -> None:
            if self._appending.get(key) is t:
                del self._appending[key]

        task.add_done_callback(done)
        return task

    async def settle_appends(self) -> None:
        """Every chain in flight has finished (each one's delivery handles its outcome)."""
        chains = list(self._appending.values())
        if chains:
            await asyncio.wait(chains)

    async def drain(self, timeout: float) -> None:
        """Let the deliveries in flight finish (their acks go out); cancel what is left:
        an unacknowledged delivery comes again to the next incarnation."""
        pending = set(self._deliveries)
        if pending:
            _, pending = await asyncio.wait(pending, timeout=timeout)
        for task in pending:
            task.cancel()
        for task in pending:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
