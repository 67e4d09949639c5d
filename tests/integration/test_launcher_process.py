"""Launchers as real processes, forked by a real zygote, over libvirt's test driver."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import tempfile
import textwrap
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import msgspec
import pytest

from services.launcher import rundir
from services.launcher.client import LauncherClient
from services.launcher.domain_state import DomainState, StateReason
from services.launcher.protocol import (
    Crash,
    DomainStatus,
    Pause,
    Resume,
    Shutdown,
    SoftReboot,
    Start,
    Status,
)
from services.launcher.zygote import spawn_launcher, start_zygote

REPO = Path(__file__).resolve().parents[2]


def _vmi(name: str, grace: int = 30) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": "ns", "uid": f"uid-{name}"},
        "spec": {
            "domain": {
                "memory": {"guest": "64Mi"},
                "devices": {"disks": [{"name": "root", "disk": {"bus": "virtio"}}]},
            },
            "terminationGracePeriodSeconds": grace,
            "volumes": [{"name": "root", "containerDisk": {"image": "demo"}}],
        },
    }


def _running(status: DomainStatus) -> bool:
    return status.state is DomainState.RUNNING


async def _wait_exited(pid: int, timeout: float = 5.0) -> None:
    # Polling: another process's exit has no awaitable (it is the zygote's child).
    deadline = asyncio.get_running_loop().time() + timeout
    while rundir.pid_alive(pid):
        assert asyncio.get_running_loop().time() < deadline, f"launcher {pid} still running"
        await asyncio.sleep(0.01)


@pytest.fixture(scope="module")
def run_dir() -> Iterator[Path]:
    # Short path: unix socket paths are limited to 107 bytes, pytest's tmp_path is long.
    with tempfile.TemporaryDirectory(prefix="vs-launch-") as d:
        yield Path(d)


@pytest.fixture(scope="module")
def zygote(run_dir: Path) -> Iterator[str]:
    sock = str(run_dir / "zygote.sock")
    proc = start_zygote(sock)
    yield sock
    proc.terminate()
    proc.wait(5)


class Spawned:
    def __init__(self, pid: int, socket_path: str) -> None:
        self.pid = pid
        self.socket_path = socket_path


@pytest.fixture
async def spawn(zygote: str, run_dir: Path) -> AsyncIterator[Any]:
    pids: list[int] = []

    def _spawn(name: str, grace: int = 30) -> Spawned:
        sock = str(rundir.launcher_socket_path(run_dir, f"ns_{name}"))
        pid = spawn_launcher(zygote, msgspec.json.encode(_vmi(name, grace)), sock)
        pids.append(pid)
        return Spawned(pid, sock)

    yield _spawn
    for pid in pids:  # leave no launcher behind, whatever the test did
        if rundir.pid_alive(pid):
            os.kill(pid, signal.SIGKILL)


async def test_lifecycle_start_pause_resume_shutdown(spawn: Any) -> None:
    launcher = spawn("life")
    client = await LauncherClient.connect(launcher.socket_path)
    assert client.hello.domain_name == "ns_life"
    assert client.hello.vmi_uid == "uid-life"
    assert client.hello.pid == launcher.pid
    first = await client.next_status(timeout=2)
    assert first.state is DomainState.SHUTOFF  # defined, not started

    assert (await client.call(Start())).ok
    running = await client.wait_for(_running)
    assert running.reason is StateReason.BOOTED

    assert (await client.call(Pause())).ok
    paused = await client.wait_for(lambda s: s.state is DomainState.PAUSED)
    assert paused.reason is StateReason.USER

    again = await client.call(Pause())
    assert not again.ok and again.error  # libvirt's refusal, reported, launcher unharmed

    assert (await client.call(Resume())).ok
    await client.wait_for(_running)
    assert (await client.call(SoftReboot())).ok
    status = (await client.call(Status())).status
    assert status is not None and status.state is DomainState.RUNNING

    assert (await client.call(Shutdown(grace_period_seconds=10))).ok
    final = await client.wait_for(lambda s: s.final, timeout=5)
    assert (final.state, final.reason, final.grace_period_expired) == (
        DomainState.SHUTOFF,
        StateReason.SHUTDOWN,
        False,
    )
    await _wait_exited(launcher.pid)
    assert not Path(launcher.socket_path).exists()  # noqa: ASYNC240 (instant, local)
    assert not rundir.pidfile_path(launcher.socket_path).exists()
    await client.close()


async def test_start_paused(spawn: Any) -> None:
    launcher = spawn("paused")
    client = await LauncherClient.connect(launcher.socket_path)
    assert (await client.call(Start(paused=True))).ok
    await client.wait_for(lambda s: s.state is DomainState.PAUSED)
    await client.call(Shutdown(grace_period_seconds=0))
    await client.wait_for(lambda s: s.final)
    await _wait_exited(launcher.pid)


async def test_handler_reconnect_finds_the_launcher_still_running(
    spawn: Any, run_dir: Path
) -> None:
    launcher = spawn("reattach")
    client = await LauncherClient.connect(launcher.socket_path)
    await client.call(Start())
    await client.wait_for(_running)
    await client.close()  # the handler goes away

    await asyncio.sleep(0.1)
    assert rundir.pid_alive(launcher.pid)
    found = {e.domain_name: e for e in rundir.discover_launchers(run_dir)}
    assert found["ns_reattach"].alive and found["ns_reattach"].pid == launcher.pid

    again = await LauncherClient.connect(found["ns_reattach"].socket_path)
    assert again.hello.pid == launcher.pid
    current = await again.next_status(timeout=2)
    assert current.state is DomainState.RUNNING and current.event is None

    await again.call(Shutdown(grace_period_seconds=0))
    final = await again.wait_for(lambda s: s.final)
    assert (final.reason, final.grace_period_expired) == (StateReason.DESTROYED, False)
    await _wait_exited(launcher.pid)


async def test_crash_is_reported_as_crashed(spawn: Any) -> None:
    launcher = spawn("crash")
    client = await LauncherClient.connect(launcher.socket_path)
    await client.call(Start())
    await client.wait_for(_running)
    assert (await client.call(Crash())).ok
    final = await client.wait_for(lambda s: s.final)
    assert (final.state, final.reason) == (DomainState.SHUTOFF, StateReason.CRASHED)
    await _wait_exited(launcher.pid)


async def test_sigterm_shuts_down_gracefully(spawn: Any) -> None:
    launcher = spawn("term", grace=5)
    client = await LauncherClient.connect(launcher.socket_path)
    await client.call(Start())
    await client.wait_for(_running)
    os.kill(launcher.pid, signal.SIGTERM)
    final = await client.wait_for(lambda s: s.final, timeout=5)
    assert (final.state, final.reason) == (DomainState.SHUTOFF, StateReason.SHUTDOWN)
    await _wait_exited(launcher.pid)


async def test_final_status_waits_for_a_returning_handler(spawn: Any) -> None:
    launcher = spawn("linger")
    client = await LauncherClient.connect(launcher.socket_path)
    await client.call(Start())
    await client.wait_for(_running)
    await client.close()
    os.kill(launcher.pid, signal.SIGTERM)  # the domain stops while no handler listens
    await asyncio.sleep(0.2)
    assert rundir.pid_alive(launcher.pid)  # holding the final status for the handler

    back = await LauncherClient.connect(launcher.socket_path)
    final = await back.next_status(timeout=2)
    assert final.final and final.reason is StateReason.SHUTDOWN
    await _wait_exited(launcher.pid)


async def test_shutdown_before_start_ends_the_launcher(spawn: Any) -> None:
    launcher = spawn("never")
    client = await LauncherClient.connect(launcher.socket_path)
    await client.call(Shutdown(grace_period_seconds=30))
    final = await client.wait_for(lambda s: s.final)
    assert final.state is DomainState.SHUTOFF
    await _wait_exited(launcher.pid)


async def test_invalid_vmi_reports_failure(zygote: str, run_dir: Path) -> None:
    sock = str(run_dir / "ns_bad.sock")
    bad = {"metadata": {"name": "bad", "namespace": "ns"}, "spec": {"domain": {}}}
    pid = spawn_launcher(zygote, msgspec.json.encode(bad), sock)
    client = await LauncherClient.connect(sock)
    final = await client.next_status(timeout=2)
    assert (final.final, final.reason) == (True, StateReason.FAILED)
    assert final.message and "no memory requested" in final.message
    await _wait_exited(pid)


async def test_launcher_survives_its_handler_and_zygote(run_dir: Path) -> None:
    """A 'handler' process starts a zygote, spawns a launcher and dies (taking the zygote
    with it); the launcher and its domain keep running."""
    zsock = str(run_dir / "doomed-zygote.sock")
    lsock = str(run_dir / "ns_orphan.sock")
    handler = textwrap.dedent(
        f"""
        import asyncio, msgspec
        from services.launcher.client import LauncherClient
        from services.launcher.protocol import Start
        from services.launcher.zygote import spawn_launcher, start_zygote
        from tests.integration.test_launcher_process import _vmi

        async def main():
            start_zygote({zsock!r})
            pid = spawn_launcher({zsock!r}, msgspec.json.encode(_vmi("orphan")), {lsock!r})
            client = await LauncherClient.connect({lsock!r})
            await client.call(Start())
            await client.wait_for(lambda s: s.state.value == "Running")
            print(pid, flush=True)

        asyncio.run(main())
        """
    )
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", handler, cwd=REPO, stdout=subprocess.PIPE
    )
    stdout, _ = await asyncio.wait_for(proc.communicate(), 30)
    assert proc.returncode == 0
    pid = int(stdout.split()[-1])
    await asyncio.sleep(0.3)  # the zygote gets SIGTERM from PR_SET_PDEATHSIG
    assert not Path(zsock).exists()  # noqa: ASYNC240 (instant, local)
    assert rundir.pid_alive(pid)

    client = await LauncherClient.connect(lsock)
    assert (await client.next_status(timeout=2)).state is DomainState.RUNNING
    await client.call(Shutdown(grace_period_seconds=0))
    await client.wait_for(lambda s: s.final)
    await _wait_exited(pid)
