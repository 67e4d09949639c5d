"""`virtstream verify`: the rebuild equals the api's live projection; a corrupted live view
is reported field by field."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import httpx
import pytest
import typer
import uvicorn
from msgspec.structs import replace
from typer.testing import CliRunner

from cli.debug import register
from cli.main import app as main_app
from eventstore.jetstream import JetStreamStore
from eventstore.settings import StreamSettings
from ops.nats_server import NatsServer
from readside.runner import ProjectionRunner
from readside.verify import verify
from services.api.app import create_app
from services.api.service import ApiService
from tests.debug_scenario import lifecycle, node_failure

app = typer.Typer()
register(app)


@pytest.fixture
async def runner(store: JetStreamStore) -> AsyncIterator[ProjectionRunner]:
    for ev in lifecycle().events[:20]:  # mid-migration history, then a finished one
        await store.append(ev)
    for ev in node_failure().events[2:]:  # a second VMI (its node never joined: still folds)
        await store.append(ev)
    r = ProjectionRunner(store)
    await r.start()
    yield r
    await r.stop()


async def test_rebuild_matches_the_live_projection_until_it_is_corrupted(
    store: JetStreamStore, runner: ProjectionRunner
) -> None:
    api = create_app(ApiService(runner, store))
    transport = httpx.ASGITransport(app=api)  # type: ignore[arg-type]
    async with httpx.AsyncClient(transport=transport, base_url="http://api") as client:
        report = await verify(store, client)
        assert report.ok, report.differences
        assert report.compared >= 5 and set(report.seqs.values()) == {runner.last_seq}

        vmi = runner.cluster.vmis["default/vm1"]
        runner.cluster.vmis["default/vm1"] = replace(vmi, phase="Failed")
        del runner.cluster.nodes["node-1"]
        report = await verify(store, client)
    problems = {(d.kind, d.key, d.problem) for d in report.differences}
    # the VM's status and node-2's allocation follow from the VMI's phase: differ too
    assert problems == {
        ("vmi", "default/vm1", "differs"),
        ("vm", "default/vm1", "differs"),
        ("node", "node-2", "differs"),
        ("node", "node-1", "missing-live"),
    }
    vmi_diff = next(d for d in report.differences if d.kind == "vmi")
    assert "  status.phase: Running → Failed" in [str(c) for c in vmi_diff.changes]


async def test_verify_command_against_a_served_api(
    nats_server: NatsServer,
    stream_settings: StreamSettings,
    store: JetStreamStore,
    runner: ProjectionRunner,
) -> None:
    config = uvicorn.Config(
        create_app(ApiService(runner, store)), host="127.0.0.1", port=0, log_level="warning"
    )
    server = uvicorn.Server(config)
    serving = asyncio.create_task(server.serve())
    try:
        for _ in range(1000):  # up to 10 s
            if server.started:
                break
            await asyncio.sleep(0.01)
        port = server.servers[0].sockets[0].getsockname()[1]
        argv = [  # the global --server names the api
            "--server",
            f"http://127.0.0.1:{port}",
            "verify",
            "--nats-url",
            nats_server.url,
            "--stream",
            stream_settings.name,
        ]
        result = await asyncio.to_thread(CliRunner().invoke, main_app, argv, env={"COLUMNS": "200"})
        assert result.exit_code == 0, result.output
        assert "OK:" in result.stdout
        runner.cluster.vms.clear()
        result = await asyncio.to_thread(CliRunner().invoke, main_app, argv, env={"COLUMNS": "200"})
        assert result.exit_code == 1
        assert "missing-live vm/default/vm1" in result.stdout
    finally:
        server.should_exit = True
        with contextlib.suppress(asyncio.CancelledError):
            await serving
