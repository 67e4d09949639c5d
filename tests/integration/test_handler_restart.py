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
from nats.aio.client import Client as NATS
from nats.aio.msg import Msg

from events.catalog import (
    DomainStarted,
    DomainStopped,
    LauncherStarted,
    MigrationSucceeded,
    StopReason,
    TargetPrepared,
    VMIDeleteRequested,
)
from events.meta import CLUSTER_SCOPE, Actor, Aggregate, Kind, Meta
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


def _migration_meta(name: str, node: str, what: str) -> Meta:
    return Meta(
        event_id=f"{name}/{what}",
        aggregate=Aggregate(Kind.MIGRATION, "default", name, f"uid-{name}"),
        occurred_at=0.0,
        correlation_id=f"corr-{name}",
        actor=Actor(service="test"),
        node=node,
    )


async def _caught_up(run_dir: Path, times: int) -> None:
    """Until the handler's log says it caught up `times` times (one per start)."""
    async with asyncio.timeout(30):
        while (run_dir / "handler.log").read_bytes().count(b'"caught up"') < times:  # noqa: ASYNC110
            await asyncio.sleep(0.1)


READS = ("CONSUMER.CREATE", "CONSUMER.DURABLE.CREATE", "DIRECT.GET")  # JetStream's read APIs


async def test_a_restarted_handler_reads_no_ended_migration_again(
    nats_server: NatsServer,
    nc: NATS,
    store: JetStreamStore,
    stream_settings: StreamSettings,
    run_dir: Path,
) -> None:
    """node-1 was the source of many migrations that ended (their end routed to the
    target) and of one still under way: a start reads the one under way (a read of its
    aggregate) and not one of the ended ones, from the log or from a checkpoint."""
    ended = [f"m{i}" for i in range(30)]
    for name in [*ended, "live"]:
        prepared = TargetPrepared(
            meta=_migration_meta(name, "node-1", "TargetPrepared"),
            target_node="node-2",
            target_address="10.0.0.2",
            target_pod_uid=f"tpod-{name}",
        )
        await store.append(prepared)
    for name in ended:
        end = MigrationSucceeded(
            meta=_migration_meta(name, "node-2", "MigrationSucceeded"),
            target_node="node-2",
            target_pod_uid=f"tpod-{name}",
        )
        await store.append(end)
    reads: list[str] = []  # the migration aggregates read (a consumer made, a direct get)

    async def seen(msg: Msg) -> None:
        if any(f".{api}." in msg.subject for api in READS):
            text = msg.data.decode()
            reads.extend(n for n in [*ended, "live"] if f".migration.default.{n}." in text)

    sub = await nc.subscribe("$JS.API.>", cb=seen)
    try:
        for start in (1, 2):  # from the log, then from the checkpoint its stop saved
            handler = HandlerProcess(nats_server, stream_settings, run_dir)
            handler.start()
            try:
                await _caught_up(run_dir, start)
                async with asyncio.timeout(20):
                    while "live" not in reads:  # noqa: ASYNC110 (the subscription fills it)
                        await asyncio.sleep(0.05)
                await asyncio.sleep(1.0)  # any other read would have begun by now
            finally:
                handler.stop()  # SIGTERM: a clean stop saves a checkpoint
            assert reads == ["live"], f"start {start} read {reads}"
            reads.clear()
    finally:
        await sub.unsubscribe()
