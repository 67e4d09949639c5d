"""One way every service runs its main coroutine: on uvloop when it is installed.

The services are CPU-bound on the event loop itself (nats-py's reads, flushes and acks,
timers, tasks); uvloop's C loop and transports cut that share (bench/bench_api.py,
bench/bench_exec.py's CPU per VMI)."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


def run(main: Coroutine[Any, Any, T]) -> T:
    try:
        import uvloop
    except ImportError:
        return asyncio.run(main)
    return uvloop.run(main)
