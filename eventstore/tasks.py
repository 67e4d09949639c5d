"""Ending the background tasks of a process (a service's companions, the indexer, the
projection runner, the retirer)."""

from __future__ import annotations

import asyncio


async def finish(task: asyncio.Task[None]) -> None:
    """Cancel `task` and wait until it has ended. Cancelled again while it runs on: on
    Python 3.11 asyncio.wait_for (nats-py's requests use it) swallows a cancel that
    arrives as what it awaits completes (the task goes on as if never cancelled), and a
    single cancel then waited for good: a handler's stop hung on its timer that way, an
    indexer's on a request."""
    while not task.done():
        task.cancel()
        await asyncio.wait({task}, timeout=0.1)
    if not task.cancelled():
        task.exception()  # retrieved: an error of a companion at stop is not news
