"""Connections take a list of servers: a service reaches whichever of them is up."""

from __future__ import annotations

import time

import pytest

from eventstore.connection import Unreachable, connect_once, connect_service, servers
from ops.nats_server import NatsServer, free_port


def test_server_lists() -> None:
    assert servers("nats://a:1, nats://b:2 nats://c:3") == [
        "nats://a:1",
        "nats://b:2",
        "nats://c:3",
    ]
    with pytest.raises(ValueError):
        servers(" , ")


async def test_a_service_reaches_the_server_that_is_up(nats_server: NatsServer) -> None:
    dead = f"nats://127.0.0.1:{free_port()}"
    nc = await connect_service(f"{dead},{nats_server.url}", "test")
    try:
        assert nc.is_connected and nc.connected_url is not None
        assert nc.connected_url.port == nats_server.port
    finally:
        await nc.close()


async def test_a_command_gives_up_within_seconds() -> None:
    started = time.monotonic()
    with pytest.raises(Unreachable):
        await connect_once(f"nats://127.0.0.1:{free_port()}")
    assert time.monotonic() - started < 10
