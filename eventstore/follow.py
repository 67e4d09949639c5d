"""Following the log for good: a reader of the whole log (the api's projection, the
debugging index) reads on from where it stands after anything ends its read (a lost
connection, a server restart, a stream leader moving), backing off while it makes no
progress, so a log that stays away costs a wakeup every couple of seconds, not a loop."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import structlog

log = structlog.get_logger("virtstream.follow")

FIRST_DELAY = 0.1
MAX_DELAY = 2.0


async def resuming(read: Callable[[], Awaitable[None]], what: str, at: Callable[[], int]) -> None:
    """Run `read` again and again, forever (until cancelled): each run reads on from `at()`
    (the last sequence it handled); one that raised is logged with where it stood. The
    pause before the next run doubles from 0.1 s to 2 s while runs make no progress."""
    delay = FIRST_DELAY
    while True:
        before = at()
        try:
            await read()
        except asyncio.CancelledError:
            raise
        except Exception as e:
            log.warning(f"{what} interrupted; resuming", seq=at(), error=repr(e))
        if at() > before:
            delay = FIRST_DELAY
        await asyncio.sleep(delay)
        delay = min(delay * 2, MAX_DELAY)
