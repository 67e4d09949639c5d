"""Fixtures the integration tests share: the api in-process on the test's stream
(authentication on), and an HTTP client for it carrying the admin's token (the token is
also in `VIRTSTREAM_TOKEN`, where the project's clients find it); the test's stream with
its archive."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

import httpx
import pytest

from eventstore import archive
from eventstore.index import stream_name
from eventstore.jetstream import JetStreamStore
from ops import pki as pki_
from tests.integration.test_api_support import RunningApi, running_api


@pytest.fixture
async def api(store: JetStreamStore, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[RunningApi]:
    async with running_api(store) as running:
        monkeypatch.setenv("VIRTSTREAM_TOKEN", running.token)
        yield running


@pytest.fixture
async def http(api: RunningApi) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(
        base_url=api.url, timeout=10, headers=api.headers, verify=api.verify
    ) as client:
        yield client


@pytest.fixture(scope="session")
def pki(tmp_path_factory: pytest.TempPathFactory) -> pki_.Pki:
    """A CA, a server certificate for loopback and an admin client certificate."""
    return pki_.ensure(tmp_path_factory.mktemp("pki"))


@pytest.fixture
async def archived(store: JetStreamStore) -> AsyncIterator[JetStreamStore]:
    """The test's stream with its archive (and, once a test indexes it, its index): both
    deleted after it, with the hot log's floor."""
    async with archiving(store):
        yield store


@contextlib.asynccontextmanager
async def archiving(store: JetStreamStore) -> AsyncIterator[str]:
    """`archived`'s archive (an archive made before stays as it was made), its name."""
    name = await archive.ensure(store.js, store.stream, storage="memory")
    try:
        yield name
    finally:
        for stream in (name, stream_name(store.stream)):
            with contextlib.suppress(Exception):
                await store.js.delete_stream(stream)
        with contextlib.suppress(Exception):  # (no bucket: nothing retired)
            kv = await store.js.key_value("virt-checkpoints")
            await kv.purge(f"{archive.FLOOR_KEY}.{store.stream}")
