"""The handler's self-fence (`LauncherFleet.fence`) with real launchers: every VM of the
node stops, including launchers whose spawn was in flight when the fence came, and no
spawn starts a VM after it (a VM must never run on a fenced node while the controller
starts it elsewhere)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import msgspec
import pytest

from ops.up_reaper import live_launchers
from services.handler.effects import Launch
from services.handler.fleet import FENCE_SECOND_SWEEP, LauncherFleet
from services.handler.node_info import LaunchSettings
from services.launcher import rundir
from tests.integration.test_handler_support import short_run_dir


@pytest.fixture
def run_dir() -> Iterator[Path]:
    with short_run_dir() as d:
        yield d


def launch(name: str) -> Launch:
    vmi = {
        "metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}"},
        "spec": {"domain": {"memory": {"guest": "64Mi"}, "devices": {}}},
    }
    return Launch(key=f"default/{name}", uid=f"uid-{name}", manifest=msgspec.json.encode(vmi))


async def test_fence_stops_running_and_in_flight_launchers(run_dir: Path) -> None:
    fleet = LauncherFleet("node-1", run_dir, LaunchSettings(), report=lambda _: None)
    fleet.start()
    try:
        await fleet.execute(launch("running"))
        async with asyncio.timeout(20):
            while "default/running" not in fleet.clients:  # noqa: ASYNC110
                await asyncio.sleep(0.02)
        running = live_launchers(run_dir)
        assert len(running) == 1
        # spawns admitted and in flight (two at once per node), more queued behind them
        for i in range(6):
            await fleet.execute(launch(f"late-{i}"))
        killed = await fleet.fence()
        assert killed >= 1
        await fleet.execute(launch("after"))  # a decision made after the fence
        await asyncio.sleep(FENCE_SECOND_SWEEP + 1.0)  # any straggler would be up by now
        assert live_launchers(run_dir) == []
        assert not rundir.pid_alive(running[0])
        assert fleet.zygote is not None and fleet.zygote.poll() is not None
    finally:
        await fleet.close()
