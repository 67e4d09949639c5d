"""A service's stop cancels its companion tasks (the timer) and waits for them. On Python
3.11 asyncio.wait_for swallows a cancel that lands in the turn of the loop where what it
awaits completes: the timer goes on as if never cancelled, and a stop that cancelled once
and waited hung (a handler stopped while its VM reported was killed after 10 s)."""

from __future__ import annotations

import asyncio
import contextlib

from services.runtime.shell import finish


async def _timer(event: asyncio.Event) -> None:
    """The shell's timer loop: wait for a rearm or the next tick."""
    while True:
        event.clear()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(event.wait(), 0.05)


async def test_a_cancel_racing_the_timer_still_ends_it() -> None:
    for _ in range(20):
        event = asyncio.Event()
        task = asyncio.create_task(_timer(event))
        await asyncio.sleep(0.001)
        event.set()
        await asyncio.sleep(0)  # the waiter is woken, not yet run: the cancel races it
        await asyncio.wait_for(finish(task), 1.0)
        assert task.cancelled()


async def test_an_error_of_the_task_is_retrieved_not_raised() -> None:
    async def fails() -> None:
        raise RuntimeError("at stop")

    task = asyncio.create_task(fails())
    await asyncio.sleep(0)
    await finish(task)
    assert isinstance(task.exception(), RuntimeError)
