"""Fixtures the api's integration tests share: the api in-process on the test's stream
(authentication on), and an HTTP client for it carrying the admin's token. The token is
also in `VIRTSTREAM_TOKEN`, where the project's clients (CLI, Python client) find it."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest

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
