"""One way every service runs its main coroutine: on uvloop when it is installed, and a
failure the operator fixes (NATS unreachable, a port taken) as one line and exit 1.

The services are CPU-bound on the event loop itself (nats-py's reads, flushes and acks,
timers, tasks); uvloop's C loop and transports cut that share (bench/bench_api.py,
bench/bench_exec.py's CPU per VMI)."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Coroutine
from typing import Any, TypeVar

from eventstore.connection import Unreachable

T = TypeVar("T")


class StartError(Exception):
    """A failure the operator fixes (a port taken, ...): one line on stderr, exit 1."""


class Restart(Exception):
    """The process must start afresh (its supervisor restarts it): one line, exit 1."""


def run(main: Coroutine[Any, Any, T], name: str) -> T:
    try:
        try:
            import uvloop
        except ImportError:
            return asyncio.run(main)
        return uvloop.run(main)
    except StartError as e:
        print(f"{name}: error: {e}", file=sys.stderr)
    except Restart as e:
        print(f"{name}: restarting: {e}", file=sys.stderr)
    except Unreachable as e:
        print(
            f"{name}: error: {e} (is NATS running? --nats-url names its servers)", file=sys.stderr
        )
    raise SystemExit(1)
