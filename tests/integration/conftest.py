"""Fixtures the api's integration tests share: the api in-process on the test's stream,
and an HTTP client for it."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest

from eventstore.jetstream import JetStreamStore
from tests.integration.test_api_support import RunningApi, running_api


@pytest.fixture
async def api(store: JetStreamStore) -> AsyncIterator[RunningApi]:
    async with running_api(store) as running:
        yield running


@pytest.fixture
async def http(api: RunningApi) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=api.url, timeout=10) as client:
        yield client
