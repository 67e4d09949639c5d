"""Whole services on the in-memory event log (`eventstore/memory.py`, which passes the
port's contract suite beside the JetStream adapter): the shells with their real reactors,
and the api's application layer over HTTP, end to end in one process with no server. The
same paths against a real nats-server are the integration tests'."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any, Never

import httpx
import pytest

from events import subjects
from events.catalog import (
    Event,
    NodeJoined,
    NodeUnresponsive,
    Resources,
    VMCreated,
    VMIPauseRequested,
    VMStartRequested,
)
from events.envelope import Appended, Context, Decision, Stored
from events.meta import Aggregate, Kind, ResourceKind
from eventstore.memory import MemoryLog
from eventstore.port import Unavailable
from projections import namespaces
from readside.runner import ProjectionRunner
from services.api import service as api_service
from services.api.app import create_app
from services.api.service import ApiService
from services.controller.node_health import HeartbeatSeen, Observation, WatchStarted
from services.controller.reactor import ControllerReactor
from services.controller.state import ControllerState
from services.runtime.inbox import Inbox
from services.runtime.shell import ServiceShell
from tests.factories import meta, vm_manifest

GiB = 1024**3
VMS = "/apis/kubevirt.io/v1/namespaces/default/virtualmachines"
VMIS = "/apis/kubevirt.io/v1/namespaces/default/virtualmachineinstances"


async def eventually(cond: Callable[[], Awaitable[Any]], timeout: float = 5.0) -> Any:
    """Polls what the services store (no event to wait on from outside them)."""
    async with asyncio.timeout(timeout):
        while not (found := await cond()):  # noqa: ASYNC110
            await asyncio.sleep(0.005)
    return found


class Api:
    """The api's application layer on an in-memory log: its projection and its HTTP app,
    served on this event loop (the services it talks to run here)."""

    def __init__(self, log: MemoryLog, runner: ProjectionRunner, http: httpx.AsyncClient):
        self.log = log
        self.runner = runner
        self.http = http


@pytest.fixture(scope="module")
async def api() -> AsyncIterator[Api]:
    """One per module: building the app's routes and schemas takes seconds."""
    log = MemoryLog()
    await log.append(node_joined("node-1"))
    runner = ProjectionRunner(log)
    await runner.start()
    service = ApiService(runner, log)
    await service.bootstrap()  # the system namespaces, as the api creates them at its start
    app: Any = create_app(service)  # an ASGI app, typed narrower by httpx
    transport = httpx.ASGITransport(app=app)
    try:
        async with httpx.AsyncClient(transport=transport, base_url="http://api") as http:
            yield Api(log, runner, http)
    finally:
        await runner.stop()


def node_joined(name: str, at: float | None = None) -> NodeJoined:
    return NodeJoined(
        meta=meta(Kind.NODE, name, namespace="", at=at),
        node=name,
        capacity=Resources(cpu_millis=64000, memory_bytes=64 * GiB),
    )


async def types_of(log: MemoryLog, kind: Kind, name: str, namespace: str = "default") -> list[str]:
    return [type(s.event).__name__ for s in await log.load(Aggregate(kind, namespace, name))]


class Running:
    """A shell running as a task; stopped (and its outcome awaited) on exit."""

    def __init__(self, shell: ServiceShell[Any, Any, Any]) -> None:
        self.shell = shell
        self.task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> ServiceShell[Any, Any, Any]:
        self.task = asyncio.create_task(self.shell.run())
        await eventually(self._started)
        return self.shell

    async def _started(self) -> bool:
        assert self.task is not None
        if self.task.done():
            await self.task  # raises what stopped it
        return self.shell.ready

    async def __aexit__(self, *_: object) -> None:
        assert self.task is not None
        self.shell.stop()
        await self.task


def controller_shell(
    log: MemoryLog, controller: ControllerReactor, **kw: Any
) -> ServiceShell[ControllerState, Never, Observation]:
    """The controller as its service runs it: pipelined, heartbeats through the inbox."""
    return ServiceShell(
        controller,
        log,
        tick_interval=0.02,
        ack_wait=0.5,
        window=64,
        observer=controller,
        inbox=Inbox(),
        **kw,
    )


async def test_a_vm_created_over_http_is_scheduled_by_the_controller(api: Api) -> None:
    """The api's application layer (HTTP, intents, append, read-your-writes) and the
    controller's pipelined shell, on one in-memory log."""
    async with Running(controller_shell(api.log, ControllerReactor())):
        created = await api.http.post(VMS, json=vm_manifest("created"))
        assert created.status_code == 201, created.text

        async def scheduled() -> Any:
            got = await api.http.get(f"{VMIS}/created")
            if got.status_code != 200 or got.json()["status"].get("phase") != "Scheduling":
                return None
            return got.json()

        vmi = await eventually(scheduled)
    assert vmi["status"]["nodeName"] == "node-1"
    assert await types_of(api.log, Kind.VMI, "created") == ["VMICreated", "PodScheduled"]
    assert not api.log.dead_letters


async def test_an_api_write_to_a_log_away_is_refused_and_stores_nothing(
    api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(api_service, "APPEND_SECONDS", 0.05)
    before = await api.log.stream_last_seq()
    api.log.connected = False
    try:
        refused = await api.http.post(VMS, json=vm_manifest("refused"))
        ready = await api.http.get("/readyz")
    finally:
        api.log.connected = True
    assert refused.status_code == 503
    assert "the event store is unreachable" in refused.json()["message"]
    assert ready.status_code == 503
    assert await api.log.stream_last_seq() == before
    assert (await api.http.get(f"{VMS}/refused")).status_code == 404


async def test_heartbeats_enter_the_controller_as_observations() -> None:
    """The watch of the bucket puts heartbeats into the shell's inbox; the pipelined shell
    folds them before its next decision. The silent node times out, the live one not."""
    now = [1000.0]
    log = MemoryLog(clock=lambda: now[0])
    for name in ("live", "silent"):
        await log.append(node_joined(name, at=now[0]))
    controller = ControllerReactor(node_timeout=60.0)
    shell = controller_shell(log, controller, clock=lambda: now[0])
    shell.inbox.put(WatchStarted(now[0]))
    async with Running(shell):
        assert shell.state.heartbeats_since == 1000.0
        shell.inbox.put(HeartbeatSeen("live", 1061.0))
        now[0] = 1061.0

        async def unresponsive() -> list[str]:
            return [
                s.event.meta.aggregate.name
                async for s in log.replay([subjects.kind_filter(Kind.NODE)])
                if isinstance(s.event, NodeUnresponsive)
            ]

        assert await eventually(unresponsive) == ["silent"]
        assert shell.state.heartbeats == {"live": 1061.0}
        await asyncio.sleep(0.1)  # a few more ticks: the live node stays responsive
        assert await unresponsive() == ["silent"]


class Echo:
    """Each VMStartRequested on vm/x → a pause on vmi/x and one on the shared vmi/all
    (optimistic appends, so a pipelined shell runs them as chains)."""

    name = "echo"

    def filters(self) -> Sequence[str]:
        return [subjects.kind_filter(Kind.VM), subjects.kind_filter(Kind.VMI)]

    def initial_state(self) -> int:
        return 0

    def holds(self, state: int, key: str) -> bool:
        return True  # keeps every version

    def evolve(self, state: int, stored: Stored) -> int:
        return state + 1

    def react(self, state: int, stored: Stored, ctx: Context) -> Sequence[Decision]:
        if not isinstance(stored.event, VMStartRequested):
            return []
        agg = stored.event.meta.aggregate
        return [
            Decision(VMIPauseRequested(meta=ctx.meta(Aggregate(Kind.VMI, agg.namespace, n))))
            for n in (agg.name, "all")
        ]

    def tick(self, state: int, ctx: Context) -> Sequence[Decision]:
        return []


class Flaky(MemoryLog):
    """The in-memory log, away for its `fail`-th append."""

    def __init__(self, fail: int) -> None:
        super().__init__()
        self.fail = fail

    async def append(
        self, event: Event, *, expected: int | None = None, msg_id: str | None = None
    ) -> Appended:
        self.fail -= 1
        if self.fail == 0:
            raise Unavailable("away for a moment")
        return await super().append(event, expected=expected, msg_id=msg_id)


@pytest.mark.parametrize("window", [1, 4], ids=["sequential", "pipelined"])
async def test_a_log_away_stops_the_shell_and_the_next_one_decides_again(window: int) -> None:
    """Not the message's fault: no ack, no dead letter; the process stops, and its next
    incarnation gets the delivery again and appends each echo once."""
    log = Flaky(fail=5)
    names = [f"vm{i}" for i in range(4)]
    for name in names:
        await log.append(VMStartRequested(meta=meta(name=name)))
    first = ServiceShell(Echo(), log, tick_interval=0.02, ack_wait=0.05, window=window)
    with pytest.raises(Unavailable):
        await first.run()
    again = ServiceShell(Echo(), log, tick_interval=0.02, ack_wait=0.05, window=window)
    async with Running(again):

        async def all_echoed() -> bool:
            return len(await log.load(Aggregate(Kind.VMI, "default", "all"))) == len(names)

        await eventually(all_echoed)
        await asyncio.sleep(0.1)  # redeliveries come and go: no echo twice
    for name in names:
        assert await types_of(log, Kind.VMI, name) == ["VMIPauseRequested"]
    assert len(await log.load(Aggregate(Kind.VMI, "default", "all"))) == len(names)
    assert not log.dead_letters


async def test_poison_is_dead_lettered_and_the_shell_goes_on() -> None:
    log = MemoryLog()
    bad = log.store_raw("virt.vm.default.junk.VMStartRequested._", b"{not json")
    await log.append(VMStartRequested(meta=meta(name="vm1")))
    async with Running(ServiceShell(Echo(), log, tick_interval=0.02)):

        async def echoed() -> bool:
            return await types_of(log, Kind.VMI, "vm1") == ["VMIPauseRequested"]

        await eventually(echoed)
    (dead,) = log.dead_letters
    assert dead.data == b"{not json" and dead.headers["Virt-Original-Sequence"] == str(bad)
    assert "undecodable" in dead.headers["Virt-Error"]


async def test_the_api_creates_the_system_namespaces_and_those_objects_use() -> None:
    """At its start the api creates the namespaces a cluster has from the start, and those
    a log written before namespaces were objects has objects in; once."""
    log = MemoryLog()
    legacy = vm_manifest("old")
    legacy["metadata"]["namespace"] = "legacy"
    await log.append(VMCreated(meta=meta(Kind.VM, "old", "legacy"), manifest=legacy))
    runner = ProjectionRunner(log)
    await runner.start()
    try:
        service = ApiService(runner, log)
        await service.bootstrap()
        found = runner.cluster.resources[ResourceKind.NAMESPACE]
        assert sorted(found) == sorted([*namespaces.SYSTEM, "legacy"])
        assert all(namespaces.phase(v) == namespaces.ACTIVE for v in found.values())
        last = await log.stream_last_seq()
        await service.bootstrap()
        assert await log.stream_last_seq() == last
    finally:
        await runner.stop()
