"""Dead letters: a real service shell parks a poison event; `virtstream dead-letters`
lists it; after the fix, `--retry` re-delivers it and the service handles it."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable, Sequence

import msgspec
import typer
from nats.aio.client import Client as NATS
from typer.testing import CliRunner

from cli.debug import register
from events.catalog import VMIPauseRequested, VMStartRequested
from events.envelope import Context, Decision, Stored
from events.meta import Aggregate, Kind
from eventstore import dead_letters
from eventstore.jetstream import JetStreamStore
from eventstore.settings import StreamSettings
from ops.nats_server import NatsServer
from services.runtime.shell import ServiceShell
from tests.factories import meta
from tests.integration.echo_service import Echo

app = typer.Typer()
register(app)


class Fixable(Echo):
    """Echo with a bug that refuses VMs named "poison" until it is fixed."""

    broken = True

    def react(self, state: int, stored: Stored, ctx: Context) -> Sequence[Decision]:
        m = stored.event.meta
        if isinstance(stored.event, VMStartRequested) and m.aggregate.name == "poison":
            if self.broken:
                raise ValueError("decider refuses poison")
            vmi = Aggregate(kind=Kind.VMI, namespace="default", name="poison")
            return [Decision(VMIPauseRequested(meta=ctx.meta(vmi)), occ=False)]
        return super().react(state, stored, ctx)


async def eventually(cond: Callable[[], Awaitable[bool]], timeout: float = 10.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not await cond():
        assert asyncio.get_running_loop().time() < deadline, "condition not met in time"
        await asyncio.sleep(0.05)


async def cli(server: NatsServer, settings: StreamSettings, *args: str) -> str:
    argv = [*args, "--nats-url", server.url, "--stream", settings.name]
    result = await asyncio.to_thread(CliRunner().invoke, app, argv, env={"COLUMNS": "250"})
    assert result.exit_code == 0, result.output + repr(result.exception)
    return result.stdout


async def test_dead_letter_is_listed_and_retried_after_the_fix(
    nats_server: NatsServer, nc: NATS, stream_settings: StreamSettings, store: JetStreamStore
) -> None:
    reactor = Fixable()
    shell = ServiceShell(reactor, store, tick_interval=0.1)
    task = asyncio.create_task(shell.run())
    poison_vmi = Aggregate(kind=Kind.VMI, namespace="default", name="poison")
    try:
        await store.dead_letter("handler-node-1", None, "undecodable event: x", data=b"{not json")
        appended = await store.append(VMStartRequested(meta=meta(name="poison")))

        async def parked() -> bool:
            return len(await dead_letters.list_dead_letters(store)) == 2

        await eventually(parked)
        listed = [
            json.loads(x)
            for x in (
                await cli(nats_server, stream_settings, "dead-letters", "-o", "json")
            ).splitlines()
        ]
        poison = next(d for d in listed if d["service"] == "echo")
        assert "decider refuses poison" in poison["error"]
        assert poison["originalSubject"] == "virt.vm.default.poison.VMStartRequested._"
        assert poison["originalSeq"] == appended.seq
        assert poison["event"]["type"] == "VMStartRequested"
        junk = next(d for d in listed if d["service"] == "handler-node-1")
        assert junk["event"] is None and junk["data"] == "{not json"
        text = await cli(nats_server, stream_settings, "dead-letters")
        assert "VMStartRequested" in text and "decider refuses poison" in text
        assert "(undecodable)" in text
        assert await store.load(poison_vmi) == []

        reactor.broken = False  # the fix is deployed
        out = await cli(nats_server, stream_settings, "dead-letters", "--retry")
        assert "retried" in out and "1 without an original subject stay" in out

        async def handled() -> bool:
            return len(await store.load(poison_vmi)) == 1

        await eventually(handled)
    finally:
        shell.stop()
        await task
    left = await dead_letters.list_dead_letters(store)
    assert [d.service for d in left] == ["handler-node-1"]
    last = await store.stream_last_seq()
    retried = await nc.jetstream().get_msg(stream_settings.name, last - 1)
    assert retried.headers and retried.headers[dead_letters.RETRY_HEADER].endswith("/2")


class Stuck(Echo):
    """Echo whose tick appends to an aggregate that exists expecting it new: it conflicts
    at every attempt, and every tick gives up."""

    def tick(self, state: int, ctx: Context) -> Sequence[Decision]:
        stuck = Aggregate(kind=Kind.VMI, namespace="default", name="stuck")
        return [Decision(VMIPauseRequested(meta=ctx.meta(stuck)), expected=0)]


async def test_a_tick_that_keeps_giving_up_is_listed_once(
    nats_server: NatsServer, stream_settings: StreamSettings, store: JetStreamStore
) -> None:
    await store.append(VMIPauseRequested(meta=meta(Kind.VMI, "stuck")))
    shell = ServiceShell(Stuck(), store, tick_interval=0.02)
    task = asyncio.create_task(shell.run())
    try:

        async def failed_thrice() -> bool:
            assert not task.done()
            return shell.tick_failures.streak >= 3

        await eventually(failed_thrice)
        text = await cli(nats_server, stream_settings, "dead-letters")
        assert text.count("(tick)") == 1, text
        assert "echo: gave up after 8 conflicts on vmi/default/stuck" in text
        out = await cli(nats_server, stream_settings, "dead-letters", "--retry")
        assert "1 without an original subject stay" in out
    finally:
        shell.stop()
        await task
    assert len(await dead_letters.list_dead_letters(store)) == 1


async def test_a_retried_dead_letter_is_not_folded_twice(store: JetStreamStore) -> None:
    """The retry copy re-runs the reaction; views keep the original's single effect and
    move their OCC version past the copy."""
    from projections.cluster import Cluster

    vm = {
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachine",
        "metadata": {"name": "dup", "namespace": "default", "uid": "uid-dup"},
        "spec": {"runStrategy": "Manual", "template": {"spec": {}}},
    }
    from events.catalog import VMCreated

    await store.append(VMCreated(meta=meta(name="dup"), manifest=vm))
    start = await store.append(VMStartRequested(meta=meta(name="dup")))
    await store.dead_letter("virt-controller", None, "boom")  # stands in for the shell's
    parked = (await dead_letters.list_dead_letters(store))[-1]
    original = msgspec.structs.replace(
        parked,
        original_subject="virt.vm.default.dup.VMStartRequested._",
        original_seq=start.seq,
        data=(await store.js.get_msg(store.stream, start.seq)).data,
    )
    retried = await dead_letters.retry(store, original)

    cluster = Cluster()
    async for s in store.replay():
        cluster.apply(s)
    view = cluster.vms["default/dup"]
    assert len(view.requests) == 1  # the start request counted once
    assert view.version == retried.new_seq  # the copy is the aggregate's last event
