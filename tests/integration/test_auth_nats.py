"""NATS users with least privilege (ops/nats_auth.py) on a real nats-server: anonymous
clients cannot connect; a handler's user appends its own node's events but the server
refuses it an intent and another node's event (nothing is appended); the debug
commands' reader appends nothing."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Iterator

import nats
import pytest
from nats.aio.client import Client as NATS

from events.catalog import DomainStarted
from events.meta import Actor, Aggregate, Kind, Meta
from eventstore.connection import ConnectOptions, NotAuthorized, connect_once
from eventstore.jetstream import JetStreamStore
from eventstore.settings import StreamSettings
from ops import nats_auth
from ops.nats_server import NatsServer

NODES = ("node-1", "node-2")
INTENT = "virt-api.v1.default.virtualmachines.x.delete"


@pytest.fixture(scope="module")
def secured(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[NatsServer, dict[str, nats_auth.NatsUser]]]:
    users = {u.name: u for u in nats_auth.users(NODES)}
    server = NatsServer(
        tmp_path_factory.mktemp("nats-auth"),
        authorization=nats_auth.authorization_block(users.values()),
    )
    server.start_sync()
    yield server, users
    server.stop_sync()


class Conn:
    """A connection as one user, with the server's refusals it was told of."""

    def __init__(self, nc: NATS, errors: list[str]) -> None:
        self.nc, self.errors = nc, errors

    async def refused(self, subject: str) -> bool:
        for _ in range(100):
            if any(
                f'permissions violation for publish to "{subject.lower()}"' in e.lower()
                for e in self.errors
            ):
                return True
            await asyncio.sleep(0.02)
        return False


async def connect(server: NatsServer, user: nats_auth.NatsUser) -> Conn:
    errors: list[str] = []

    async def on_error(e: Exception) -> None:
        errors.append(str(e))

    nc = await nats.connect(
        server.url,
        user=user.name,
        password=user.password,
        inbox_prefix=user.inbox_prefix,
        error_cb=on_error,
        allow_reconnect=False,
    )
    return Conn(nc, errors)


@pytest.fixture
async def admin_store(
    secured: tuple[NatsServer, dict[str, nats_auth.NatsUser]],
) -> AsyncIterator[JetStreamStore]:
    server, users = secured
    admin = await connect(server, users["admin"])
    store = JetStreamStore(admin.nc, StreamSettings(storage="memory"))
    await store.ensure()
    yield store
    await admin.nc.jetstream().delete_stream("VIRT")
    await admin.nc.jetstream().delete_stream("VIRT_DLQ")
    await admin.nc.close()


def started(node: str, name: str) -> DomainStarted:
    meta = Meta(
        event_id=f"test/{node}/{name}",
        aggregate=Aggregate(Kind.VMI, "default", name, "uid-1"),
        occurred_at=1.0,
        correlation_id="c",
        actor=Actor(service=f"virt-handler-{node}", node=node),
        node=node,
    )
    return DomainStarted(meta=meta, node=node, domain=f"default_{name}", domain_type="test")


async def test_an_anonymous_client_cannot_connect(
    secured: tuple[NatsServer, dict[str, nats_auth.NatsUser]],
) -> None:
    server, _ = secured
    with pytest.raises(NotAuthorized, match="refused"):
        await connect_once(server.url)
    with pytest.raises(NotAuthorized):
        await connect_once(
            server.url, options=ConnectOptions(user="handler-node-1", password="wrong")
        )


async def test_a_handler_appends_its_nodes_events_only_and_no_intent(
    secured: tuple[NatsServer, dict[str, nats_auth.NatsUser]], admin_store: JetStreamStore
) -> None:
    server, users = secured
    handler = await connect(server, users["handler-node-1"])
    try:
        store = JetStreamStore(handler.nc, admin_store.settings)
        own = await store.append(started("node-1", "mine"), expected=None)
        assert own.seq == 1  # its own node's event is appended

        other = "virt.vmi.default.theirs.DomainStarted.node-2"
        with pytest.raises((nats.errors.TimeoutError, nats.errors.NoRespondersError)):
            await handler.nc.jetstream().publish(other, b"{}", timeout=1)
        assert await handler.refused(other), handler.errors

        await handler.nc.publish(INTENT, b"{}")
        await handler.nc.flush()
        assert await handler.refused(INTENT)
        assert await admin_store.stream_last_seq() == 1  # nothing else was appended
    finally:
        await handler.nc.close()


async def test_the_readers_user_appends_nothing(
    secured: tuple[NatsServer, dict[str, nats_auth.NatsUser]], admin_store: JetStreamStore
) -> None:
    server, users = secured
    reader = await connect(server, users["reader"])
    try:
        subject = "virt.vmi.default.x.DomainStarted.node-1"
        await reader.nc.publish(subject, b"{}")
        await reader.nc.flush()
        assert await reader.refused(subject)
        store = JetStreamStore(reader.nc, admin_store.settings)
        assert await store.stream_last_seq() == 0  # but it reads the stream
    finally:
        await reader.nc.close()


async def test_a_debug_command_without_credentials_says_so_in_one_line(
    secured: tuple[NatsServer, dict[str, nats_auth.NatsUser]],
) -> None:
    import typer
    from typer.testing import CliRunner

    from cli.debug import register

    server, _ = secured
    app = typer.Typer()
    register(app)
    result = await asyncio.to_thread(CliRunner().invoke, app, ["events", "--nats-url", server.url])
    assert result.exit_code == 1
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and "refused the credentials" in lines[0], result.output


async def test_the_upkeep_user_keeps_the_log_and_appends_nothing(
    secured: tuple[NatsServer, dict[str, nats_auth.NatsUser]], admin_store: JetStreamStore
) -> None:
    """The upkeep service as its own user: it indexes, creates the archive, records the
    floor and purges ended aggregates from the hot log, and may append no event."""
    from services.upkeep.service import UpkeepService
    from tests.integration.test_history_archive import append_ended

    server, users = secured
    upkeep = await connect(server, users["upkeep"])
    js = admin_store.js
    try:
        store = JetStreamStore(upkeep.nc, admin_store.settings)
        service = UpkeepService(store, window=0, step=1, interval=0.05)
        task = asyncio.create_task(service.run())
        try:
            async with asyncio.timeout(10):
                while not service.active:  # noqa: ASYNC110
                    await asyncio.sleep(0.02)
            await append_ended(admin_store)  # mirrored into the archive upkeep made
            async with asyncio.timeout(15):
                while service.retirer.retired < 3:  # noqa: ASYNC110
                    await asyncio.sleep(0.02)
            assert service.indexer.upto == await admin_store.stream_last_seq()
        finally:
            service.stop()
            await task
        subject = "virt.vmi.default.x.DomainStarted.node-1"
        await upkeep.nc.publish(subject, b"{}")
        await upkeep.nc.flush()
        assert await upkeep.refused(subject)
    finally:
        await upkeep.nc.close()
        for name in ("VIRT_ARCHIVE", "VIRT_INDEX", "KV_virt-checkpoints"):
            with contextlib.suppress(Exception):
                await js.delete_stream(name)
