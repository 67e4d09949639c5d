"""The handler's self-fence (`LauncherFleet.fence`) with real launchers: every VM of the
node stops, including launchers whose spawn was in flight when the fence came, and no
spawn starts a VM after it (a VM must never run on a fenced node while the controller
starts it elsewhere); a handler that starts again and again while cut off fences by the
last heartbeat any incarnation had confirmed."""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import msgspec
import pytest

from eventstore.connection import Unreachable
from ops.up_reaper import live_launchers
from services.handler.effects import Launch
from services.handler.fence_clock import FenceClock
from services.handler.fleet import FENCE_SECOND_SWEEP, LauncherFleet
from services.handler.node_info import LaunchSettings, NodeConfig
from services.handler.service import HandlerConfig, serve
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


def test_the_fence_clock_counts_from_the_last_confirmed_beat_across_starts(tmp_path: Path) -> None:
    clock = FenceClock(tmp_path)
    clock.started(100.0)  # never a beat: counts from the first start
    assert clock.due(8.0) == 108.0
    clock.started(105.0)  # started again, still no beat: the first start still counts
    assert clock.due(8.0) == 108.0
    clock.confirmed(110.0)
    assert FenceClock(tmp_path).due(8.0) == 118.0  # what the next incarnation reads
    FenceClock(tmp_path).started(500.0)  # a start long after the last beat counts from now
    assert clock.due(8.0) == 508.0


async def test_a_handler_restarted_while_cut_off_still_fences(run_dir: Path) -> None:
    """The launchers of an earlier incarnation stop once the last confirmed heartbeat is
    past the fence, though this incarnation never reaches the bus (nothing listens at its
    URL: its connection fails after seconds and its supervisor would start it again)."""
    fleet = LauncherFleet("node-1", run_dir, LaunchSettings(), report=lambda _: None)
    fleet.start()
    await fleet.execute(launch("survivor"))
    async with asyncio.timeout(20):
        while "default/survivor" not in fleet.clients:  # noqa: ASYNC110
            await asyncio.sleep(0.02)
    await fleet.close()  # the handler gone: its launchers live on
    (pid,) = live_launchers(run_dir)
    FenceClock(run_dir / "node-1").confirmed(time.time() - 30)  # the last beat, long ago
    with socket.socket() as held:  # a port of ours where nobody answers NATS
        held.bind(("127.0.0.1", 0))
        cfg = HandlerConfig(
            node=NodeConfig(name="node-1"),
            nats_url=f"nats://127.0.0.1:{held.getsockname()[1]}",
            run_dir=str(run_dir),
            fence_timeout=1.0,
        )
        with pytest.raises(Unreachable):
            await serve(cfg)
    assert not rundir.pid_alive(pid)
    assert live_launchers(run_dir) == []
