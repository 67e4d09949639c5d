"""Runs the api in-process on a real uvicorn (free loopback port) against the test's stream."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass

import uvicorn

from eventstore.jetstream import JetStreamStore
from readside.runner import ProjectionRunner
from services.api.app import create_app
from services.api.server import config as server_config
from services.api.service import ApiService


@dataclass
class RunningApi:
    url: str
    runner: ProjectionRunner
    store: JetStreamStore


@contextlib.asynccontextmanager
async def running_api(
    store: JetStreamStore, *, read_only: bool = False
) -> AsyncIterator[RunningApi]:
    runner = ProjectionRunner(store)
    await runner.start()
    app = create_app(ApiService(runner, None if read_only else store))
    config = server_config(app, host="127.0.0.1", port=0, log_level="warning", lifespan="off")
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve())
    for _ in range(500):
        if server.started:
            break
        await asyncio.sleep(0.01)
    port = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield RunningApi(f"http://127.0.0.1:{port}", runner, store)
    finally:
        server.should_exit = True
        server.force_exit = True
        with contextlib.suppress(asyncio.CancelledError, TimeoutError):
            await asyncio.wait_for(task, 5)
        await runner.stop()
