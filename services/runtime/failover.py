"""Riding out the event log's failover in a service's reads: a consumer bound, a pull.

A clustered log that loses a server elects new leaders for the stream and its consumers;
meanwhile a request is unanswered or answered "no responders" (`Unavailable`). Stopping
the process there (the supervisor restarts it) costs a rebuild, and several such deaths in
a row grow the supervisor's backoff past the election. These reads are idempotent, so
they are asked again with a growing wait, for `WITHIN` seconds at most: then the error
stands and the process stops as for any other loss of the log (a refusal never becomes a
retry loop)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from eventstore.port import Unavailable

T = TypeVar("T")

WITHIN = 20.0  # seconds a read is asked again, at most (an election takes a few)
FIRST, LONGEST = 0.1, 2.0  # the wait between tries: doubled from FIRST, up to LONGEST


async def riding_out(
    read: Callable[[], Awaitable[T]], log: Any, what: str, within: float = WITHIN
) -> T:
    """`read()`'s result; an `Unavailable` is read again after a wait, until `within`
    seconds have passed (then it is raised). Said once in the log, and once it passed."""
    deadline = time.monotonic() + within
    delay = FIRST
    failed = False
    while True:
        try:
            value = await read()
        except Unavailable as e:
            if time.monotonic() + delay > deadline:
                log.error("event log unavailable: giving up", read=what, error=repr(e))
                raise
            if not failed:
                log.warning("event log unavailable: asking again", read=what, error=repr(e))
                failed = True
            await asyncio.sleep(delay)
            delay = min(delay * 2, LONGEST)
            continue
        if failed:
            log.info("event log answers again", read=what)
        return value
