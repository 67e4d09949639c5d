"""A VM never restarts because its handler did: kill -9 the handler process, the launcher
and its domain keep running, and a new handler re-attaches without restarting them."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from events.catalog import (
    DomainStarted,
    DomainStopped,
    LauncherStarted,
    StopReason,
    VMIDeleteRequested,
)
from events.meta import CLUSTER_SCOPE, Aggregate, Kind
from eventstore.jetstream import JetStreamStore
from eventstore.settings import StreamSettings
from ops.nats_server import NatsServer
from services.launcher import rundir
from services.launcher.client import LauncherClient
from services.launcher.domain_state import DomainState
from services.launcher.protocol import Pause
from tests.integration.test_handler_support import (
    of_type,
    pod_scheduled,
    short_run_dir,
    types,
    vmi_manifest,
    vmi_meta,
    wait_dead,
    wait_events,
)

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def run_dir() -> Iterator[Path]:
    with short_run_dir() as d:
        yield d


class HandlerProcess:
    def __init__(self, nats: NatsServer, settings: StreamSettings, run_dir: Path) -> None:
        self.args = [
            sys.executable, "-m", "services.handler", "--node", "node-1",
            "--nats-url", nats.url, "--run-dir", str(run_dir), "--stream", settings.name,
            "--storage", settings.storage, "--heartbeat-interval", "0.5", "--cpus", "2",
            "--memory", "4Gi",
        ]  # fmt: skip
        self.log = open(run_dir / "handler.log", "ab")  # noqa: SIM115
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.proc = subprocess.Popen(self.args, cwd=REPO, stdout=self.log, stderr=subprocess.STDOUT)

    def kill9(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(5)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(10)
        self.log.close()


async def _joined(store: JetStreamStore, count: int) -> None:
    agg = Aggregate(Kind.NODE, CLUSTER_SCOPE, "node-1")
    async with asyncio.timeout(20):
        while len(await store.load(agg)) < count:  # noqa: ASYNC110 (polling the store)
            await asyncio.sleep(0.05)


async def test_kill9_keeps_vm_and_reattaches(
    nats_server: NatsServer, store: JetStreamStore, stream_settings: StreamSettings, run_dir: Path
) -> None:
    handler = HandlerProcess(nats_server, stream_settings, run_dir)
    handler.start()
    try:
        await _joined(store, 1)
        vmi = vmi_manifest("vm-k", grace=0)
        await store.append(pod_scheduled(vmi, "node-1"))
        events = await wait_events(store, vmi, lambda t: "DomainStarted" in t, timeout=20)
        pid = of_type(events, LauncherStarted)[0].pid

        handler.kill9()
        sock = str(run_dir / "node-1" / "launchers" / "default_vm-k.sock")
        client = await LauncherClient.connect(sock)
        try:
            assert (await client.next_status(5)).state is DomainState.RUNNING
            # a change while nobody watches: the new handler must report it
            assert (await client.call(Pause())).ok
        finally:
            await client.close()
        assert rundir.pid_alive(pid)

        handler.start()
        events = await wait_events(store, vmi, lambda t: "DomainPaused" in t, timeout=20)
        assert types(events).count("DomainStarted") == 1
        assert [e.pid for e in of_type(events, LauncherStarted)] == [pid]
        assert rundir.pid_alive(pid)

        await store.append(VMIDeleteRequested(meta=vmi_meta(vmi, "node-1"), grace_period_seconds=0))
        await wait_events(store, vmi, lambda t: "LauncherExited" in t)
        await wait_dead(pid)
    finally:
        handler.stop()


async def test_launcher_gone_while_handler_down(
    nats_server: NatsServer, store: JetStreamStore, stream_settings: StreamSettings, run_dir: Path
) -> None:
    handler = HandlerProcess(nats_server, stream_settings, run_dir)
    handler.start()
    try:
        await _joined(store, 1)
        vmi = vmi_manifest("vm-l", grace=0)
        await store.append(pod_scheduled(vmi, "node-1"))
        events = await wait_events(store, vmi, lambda t: "DomainStarted" in t, timeout=20)
        pid = of_type(events, LauncherStarted)[0].pid
        handler.stop()  # SIGTERM: graceful, the launcher stays
        assert rundir.pid_alive(pid)
        os.kill(pid, signal.SIGKILL)
        await wait_dead(pid)

        handler = HandlerProcess(nats_server, stream_settings, run_dir)
        handler.start()
        events = await wait_events(store, vmi, lambda t: "LauncherExited" in t, timeout=20)
        stopped = of_type(events, DomainStopped)
        assert len(stopped) == 1 and stopped[0].reason is StopReason.FAILED
        assert len(of_type(events, DomainStarted)) == 1
    finally:
        handler.stop()
