"""Connecting to NATS: one server or a cluster, given as one URL or a comma-separated list.

Services reconnect forever (a restarted server or a cluster failover must never end a
service); one-shot commands give up at once so a user hears about it within seconds."""

from __future__ import annotations

import asyncio
import contextlib

import nats
from nats.aio.client import Client as NATS


def servers(urls: str) -> list[str]:
    """`nats://a:4222,nats://b:4222` (or separated by spaces) → the list nats-py takes."""
    found = [u.strip() for u in urls.replace(" ", ",").split(",") if u.strip()]
    if not found:
        raise ValueError("no NATS server given")
    return found


async def connect_service(urls: str, name: str) -> NATS:
    """A long-running service's connection: every server of the list, reconnecting forever."""
    return await nats.connect(
        servers=servers(urls),
        name=name,
        max_reconnect_attempts=-1,
        reconnect_time_wait=0.25,
        connect_timeout=5,
    )


class Unreachable(ConnectionError):
    """No server of the list answered in time."""


async def _quiet(_: Exception) -> None:
    """nats-py's default error callback prints a traceback per failed attempt."""


async def connect_once(urls: str, name: str = "virtstream-cli", timeout: float = 3.0) -> NATS:
    """A command's connection: one clear failure within `timeout` instead of retrying.
    (nats-py keeps retrying the initial connection even with reconnects off, so the
    deadline is ours.)"""
    nc = NATS()
    try:
        await asyncio.wait_for(
            nc.connect(
                servers=servers(urls),
                name=name,
                connect_timeout=max(1, int(timeout)),
                max_reconnect_attempts=0,
                allow_reconnect=False,
                error_cb=_quiet,
            ),
            timeout,
        )
    except (TimeoutError, OSError, nats.errors.Error) as e:
        with contextlib.suppress(Exception):
            await nc.close()
        raise Unreachable(f"no NATS server answered at {urls}") from e
    return nc
