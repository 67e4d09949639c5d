"""A service's timer waits on an event with a timeout; a stop cancels it. The cancel must
end the wait even when the event is set in the same turn of the loop (asyncio.wait_for on
Python 3.11 swallows that cancel, and a handler stopping with a VM running hung on it)."""

from __future__ import annotations

import asyncio

import pytest

from services.runtime.shell import wait_event


async def _timer(event: asyncio.Event) -> None:
    while True:
        event.clear()
        await wait_event(event, 0.05)


async def test_a_cancel_racing_the_event_ends_the_wait() -> None:
    for _ in range(20):
        event = asyncio.Event()
        task = asyncio.create_task(_timer(event))
        await asyncio.sleep(0.001)
        event.set()
        await asyncio.sleep(0)  # the waiter is woken, not yet run
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await asyncio.wait_for(asyncio.shield(task), 1.0)


async def test_the_wait_ends_at_its_timeout_or_when_set() -> None:
    event = asyncio.Event()
    loop = asyncio.get_running_loop()
    t0 = loop.time()
    await wait_event(event, 0.05)
    assert event.is_set() and loop.time() - t0 >= 0.04
    event.clear()
    loop.call_soon(event.set)
    await asyncio.wait_for(wait_event(event, 30.0), 1.0)
