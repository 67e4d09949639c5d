"""`virtstream up --nats-url`: the NATS users on a server `up` does not run.

`up` cannot rewrite another server's config, so it writes the `authorization` block of its
users (`ops/nats_auth.py`, the same users and passwords as the embedded server gets) into
`<data-dir>/nats/authorization.conf`, for the server's owner to copy beside the server's
config, `include` (nats-server reads an include relative to the config's directory) and
reload. Then
it checks that the server enforces them: the api's user must be let in, and a client
without credentials must not. Until both hold it says what to do in one line and starts
nothing: a cluster on a bus anyone can write to would not be secure, whatever the api does.
"""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path

from cli.security import Bus, private
from eventstore.connection import ConnectOptions, NotAuthorized, Unreachable, connect_once

FILE = Path("nats") / "authorization.conf"


def write(data_dir: Path, bus: Bus) -> Path:
    """The include file for the external server (the owner's alone: it holds passwords)."""
    path = data_dir / FILE
    head = (
        "# virtstream's NATS users for the cluster in this data dir: copy this file beside\n"
        "# nats-server's config, add `include authorization.conf` to it (outside any\n"
        "# `accounts` block; with accounts, put these users into the account that holds the\n"
        "# VIRT stream) and reload the server (nats-server --signal reload).\n"
        "# Written by `virtstream up --nats-url`.\n"
    )
    private(path, head + bus.authorization)
    return path


async def _lets_in(urls: str, options: ConnectOptions) -> bool:
    try:
        nc = await connect_once(urls, "virtstream-up", timeout=5.0, options=options)
    except NotAuthorized:
        return False
    with contextlib.suppress(Exception):
        await nc.close()
    return True


async def _problem(urls: str, bus: Bus, path: Path) -> str | None:
    todo = (
        f"copy {path} beside its config file, add `include {path.name}` to that and reload "
        "it (nats-server --signal reload), then run `virtstream up` again"
    )
    try:
        if not await _lets_in(urls, bus.auth("api")):
            return f"NATS at {urls} refused virtstream's api user: {todo}"
        if await _lets_in(urls, ConnectOptions()):
            return f"NATS at {urls} lets clients in without credentials: {todo}"
    except Unreachable as e:
        return str(e)
    return None


def check(urls: str, bus: Bus, path: Path) -> str | None:
    """None when the server enforces the users of `bus`, else what to do (one line)."""
    return asyncio.run(_problem(urls, bus, path))
