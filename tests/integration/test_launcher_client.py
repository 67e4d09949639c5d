"""LauncherClient against a raw unix server: the Hello comes first, lines may arrive in
pieces, a peer that breaks the protocol is closed, and close() after EOF returns."""

from __future__ import annotations

import asyncio
import tempfile
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from services.launcher.client import LauncherClient, LauncherGone
from services.launcher.protocol import DomainState, DomainStatus, Hello, encode

Serve = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


async def serving(handle: Serve) -> tuple[asyncio.Server, str]:
    path = str(Path(tempfile.mkdtemp(dir="/tmp")) / "l.sock")
    return await asyncio.start_unix_server(handle, path), path


async def test_lines_split_across_writes_arrive_whole_and_close_after_eof_returns() -> None:
    async def handle(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        data = encode(Hello(vmi_uid="u", domain_name="ns_x", pid=1)) + encode(
            DomainStatus(state=DomainState.RUNNING, seq=1)
        )
        for i in range(0, len(data), 7):  # a line in several pieces
            w.write(data[i : i + 7])
            await w.drain()
        w.close()

    server, path = await serving(handle)
    async with server:
        client = await LauncherClient.connect(path, timeout=2)
        assert client.hello.domain_name == "ns_x"
        status = await client.next_status(timeout=2)
        assert status.state is DomainState.RUNNING and client.latest_status == status
        with pytest.raises(LauncherGone):
            await client.next_status(timeout=2)
        await asyncio.wait_for(client.close(), 2)


async def test_a_peer_that_does_not_say_hello_first_is_refused() -> None:
    async def handle(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        w.write(encode(DomainStatus(state=DomainState.RUNNING)))
        await w.drain()
        await r.read()  # until the client hangs up

    server, path = await serving(handle)
    async with server:
        with pytest.raises(LauncherGone):
            await LauncherClient.connect(path, timeout=2)


async def test_a_peer_that_closes_before_hello_is_gone() -> None:
    async def handle(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        w.close()

    server, path = await serving(handle)
    async with server:
        with pytest.raises(LauncherGone):
            await LauncherClient.connect(path, timeout=2)
