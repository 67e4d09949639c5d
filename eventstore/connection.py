"""Connecting to NATS: one server or a cluster, given as one URL or a comma-separated list.

Services reconnect forever (a restarted server or a cluster failover must never end a
service); one-shot commands give up at once so a user hears about it within seconds.

Credentials and TLS are `ConnectOptions` (eventstore/connect_options.py, which loads no
nats: the HTTP client reads them too), the one place every service and command takes
its connection settings from: flags (`add_arguments`) or the environment
(`VIRTSTREAM_NATS_USER` and `_PASSWORD`, which `virtstream up` gives each service;
`VIRTSTREAM_NATS_CREDS`, `_TLS_CA`, `_TLS_CERT`, `_TLS_KEY` for a real install).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
from collections.abc import Awaitable, Callable

import msgspec
import nats
import structlog
from nats.aio.client import Client as NATS

from eventstore.connect_options import ENV, FILES, ConnectOptions

log = structlog.get_logger()


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """`--nats-creds`, `--nats-tls-ca`, `--nats-tls-cert`, `--nats-tls-key` (defaults from
    the environment; a user and password come from the environment only);
    `from_arguments` reads them back."""
    for field in FILES:
        flag = "--nats-" + field.replace("_", "-")
        parser.add_argument(
            flag, default=os.environ.get(ENV[field], ""), help=f"(env {ENV[field]})"
        )


def from_arguments(args: argparse.Namespace) -> ConnectOptions:
    """The options given as flags (and the user from the environment), exported so that
    `connect_service` (which reads the environment) and the processes started from here
    use them."""
    env = ConnectOptions.from_env()
    options = msgspec.structs.replace(env, **{f: getattr(args, "nats_" + f) for f in FILES})
    options.export()
    return options


def servers(urls: str) -> list[str]:
    """`nats://a:4222,nats://b:4222` (or separated by spaces) → the list nats-py takes."""
    found = [u.strip() for u in urls.replace(" ", ",").split(",") if u.strip()]
    if not found:
        raise ValueError("no NATS server given")
    return found


async def connect_service(
    urls: str, name: str, options: ConnectOptions | None = None, timeout: float = 5.0
) -> NATS:
    """A long-running service's connection: every server of the list, reconnecting forever
    (to whichever server of the list answers: a cluster's failover) once connected. The
    first connection has a deadline: a service pointed at no server says so and exits
    (`Unreachable`), for its supervisor (up, systemd) to restart it. Credentials from
    `options`, else the environment."""
    kwargs = (options or ConnectOptions.from_env()).nats_kwargs()
    nc = NATS()
    try:
        async with asyncio.timeout(timeout):
            await nc.connect(
                servers=servers(urls),
                name=name,
                max_reconnect_attempts=-1,
                reconnect_time_wait=0.25,  # type: ignore[arg-type]  # typed int, takes seconds
                connect_timeout=5,
                error_cb=_one_line(name),
                **kwargs,
            )
    except (TimeoutError, OSError, nats.errors.Error) as e:
        with contextlib.suppress(Exception):
            await nc.close()
        raise Unreachable(f"no NATS server answered at {urls} within {timeout:.0f}s") from e
    return nc


def _one_line(name: str) -> Callable[[Exception], Awaitable[None]]:
    """nats-py's default error callback prints a traceback per failed reconnect attempt;
    this logs one line per change of error instead."""
    last = [""]

    async def on_error(e: Exception) -> None:
        said = f"{type(e).__name__}: {e}"
        if said != last[0]:
            last[0] = said
            log.warning("nats connection error", service=name, error=said)

    return on_error


class Unreachable(ConnectionError):
    """No server of the list answered in time."""


class NotAuthorized(Unreachable):
    """A server answered and refused the credentials (or their absence)."""


async def connect_once(
    urls: str,
    name: str = "virtstream-cli",
    timeout: float = 3.0,
    options: ConnectOptions | None = None,
) -> NATS:
    """A command's connection: one clear failure within `timeout` instead of retrying.
    (nats-py keeps retrying the initial connection even with reconnects off, so the
    deadline is ours.) A refusal of the credentials is `NotAuthorized`."""
    options = options or ConnectOptions.from_env()
    kwargs = options.nats_kwargs()
    refused: list[str] = []

    async def on_error(e: Exception) -> None:  # instead of a traceback per attempt
        if "authorization" in str(e).lower() or "authentication" in str(e).lower():
            refused.append(str(e))

    nc = NATS()
    try:
        async with asyncio.timeout(timeout):
            await nc.connect(
                servers=servers(urls),
                name=name,
                connect_timeout=max(1, int(timeout)),
                max_reconnect_attempts=0,
                allow_reconnect=False,
                error_cb=on_error,
                **kwargs,
            )
    except (TimeoutError, OSError, nats.errors.Error) as e:
        with contextlib.suppress(Exception):
            await nc.close()
        text = str(e).lower()
        if refused or "authorization" in text or "authentication" in text:
            who = f"user {options.user!r}" if options.user else "no credentials"
            raise NotAuthorized(
                f"NATS at {urls} refused the credentials ({who}): run the command where "
                "`virtstream up` keeps its data dir, or set VIRTSTREAM_DATA_DIR"
            ) from e
        raise Unreachable(f"no NATS server answered at {urls}") from e
    return nc


def jetstream_answers(url: str, options: ConnectOptions, timeout: float = 1.0) -> bool:
    """Whether the server at `url` serves JetStream to a client with `options`: its account
    info answered (in a cluster only once there is a meta leader). The readiness probe of a
    server whose monitoring port is closed; a blocking call, for the processes that start
    servers."""

    async def probe() -> bool:
        nc = await connect_once(url, "virtstream-ready", timeout, options)
        try:
            async with asyncio.timeout(timeout):
                await nc.jetstream().account_info()
            return True
        finally:
            await nc.close()

    try:
        return asyncio.run(probe())
    except (TimeoutError, OSError, Unreachable, nats.errors.Error):
        return False
