"""The service shell against a real nats-server and real service processes."""

from __future__ import annotations

import asyncio
import subprocess
import sys

from nats.aio.client import Client as NATS

from events.catalog import VMIPauseRequested, VMStartRequested
from events.meta import Aggregate, Kind
from eventstore.jetstream import JetStreamStore
from eventstore.settings import StreamSettings
from ops.nats_server import NatsServer
from services.runtime.shell import ServiceShell
from tests.conftest import REPO, unique
from tests.factories import meta
from tests.integration.echo_service import Echo


def spawn(server: NatsServer, settings: StreamSettings, *extra: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "tests.integration.echo_service", server.url, settings.name, *extra],
        cwd=REPO,
    )


async def wait_for(cond, timeout: float = 10.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not await cond():
        assert asyncio.get_running_loop().time() < deadline, "condition not met in time"
        await asyncio.sleep(0.05)


async def test_killed_between_append_and_ack_leaves_no_duplicate(
    store: JetStreamStore, nats_server: NatsServer, stream_settings: StreamSettings
) -> None:
    name = unique("vm")
    await store.append(VMStartRequested(meta=meta(name=name)))
    vmi = Aggregate(kind=Kind.VMI, namespace="default", name=name)

    crashing = spawn(nats_server, stream_settings, "--crash-after-append")
    assert crashing.wait(timeout=20) == 137  # it appended, then died before acking
    assert len(await store.load(vmi)) == 1

    survivor = spawn(nats_server, stream_settings)
    try:
        info = None

        async def acked() -> bool:
            nonlocal info
            info = await store.js.consumer_info(stream_settings.name, "echo")
            return (
                info.num_ack_pending == 0
                and info.num_pending == 0
                and info.delivered.stream_seq > 0
            )

        await wait_for(acked)
        # delivered twice (consumer sequence 2 for stream sequence 1): the cause came again
        assert info is not None and info.delivered.consumer_seq == 2
    finally:
        survivor.terminate()
        survivor.wait(10)
    echoes = await store.load(vmi)
    assert len(echoes) == 1 and isinstance(echoes[0].event, VMIPauseRequested)


async def test_poison_messages_are_dead_lettered_and_the_service_goes_on(
    store: JetStreamStore, nc: NATS, stream_settings: StreamSettings
) -> None:
    shell = ServiceShell(Echo(), store, tick_interval=0.1)
    runner = asyncio.create_task(shell.run())
    try:
        await nc.jetstream().publish("virt.vm.default.junk.VMStartRequested._", b"{not json")
        await store.append(VMStartRequested(meta=meta(name="poison")))
        good = unique("vm")
        await store.append(VMStartRequested(meta=meta(name=good)))
        vmi = Aggregate(kind=Kind.VMI, namespace="default", name=good)

        async def echoed() -> bool:
            return len(await store.load(vmi)) == 1

        await wait_for(echoed)
    finally:
        shell.stop()
        await runner

    js = nc.jetstream()
    info = await js.stream_info(stream_settings.dlq_name)
    assert info.state.messages == 2
    garbage = await js.get_msg(stream_settings.dlq_name, 1)
    assert garbage.data == b"{not json"
    assert garbage.headers and "undecodable" in garbage.headers["Virt-Error"]
    assert garbage.headers["Virt-Original-Subject"] == "virt.vm.default.junk.VMStartRequested._"
    refused = await js.get_msg(stream_settings.dlq_name, 2)
    assert refused.headers and "decider refuses poison" in refused.headers["Virt-Error"]
