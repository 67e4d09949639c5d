"""Live migration end to end in test mode: a real nats-server, the controller in its service
shell, two real handlers (in-process) with zygote-forked launchers on libvirt's test driver.
The transfer itself is the handler's simulation (test mode); everything else is real."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from nats.aio.client import Client as NATS

from events.catalog import (
    DomainMigratedIn,
    DomainStarted,
    DomainStopped,
    LauncherExited,
    LauncherStarted,
    MigrationAbortRequested,
    MigrationRequested,
    NodeDrainRequested,
    PolicyCreated,
    StopReason,
    VMCreated,
)
from events.meta import CLUSTER_SCOPE, Aggregate, Kind
from eventstore.jetstream import JetStreamStore
from eventstore.settings import StreamSettings
from projections.cluster import Cluster as ClusterView
from projections.render import printable_status
from projections.views import MigrationView, VMIView
from services.handler.service import Handler
from services.launcher import rundir
from services.launcher.client import LauncherClient
from services.launcher.domain_state import DomainState
from services.launcher.protocol import Status
from tests.conftest import unique
from tests.factories import meta
from tests.integration.test_controller_service import controller  # noqa: F401  (fixture)
from tests.integration.test_handler_lifecycle import running_handler
from tests.integration.test_handler_support import short_run_dir

NODES = ("node-1", "node-2")


def vm_manifest(name: str, labels: dict[str, str] | None = None, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachine",
        "metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}"},
        "spec": {
            "runStrategy": "Always",
            "template": {
                "metadata": {"labels": labels or {}},
                "spec": {
                    "domain": {
                        "memory": {"guest": "64Mi"},
                        "resources": {"requests": {"memory": "64Mi"}},
                        "devices": {
                            "disks": [{"name": "root", "disk": {"bus": "virtio"}}],
                            "interfaces": [{"name": "default", "masquerade": {}}],
                        },
                    },
                    "networks": [{"name": "default", "pod": {}}],
                    "terminationGracePeriodSeconds": 0,
                    "volumes": [{"name": "root", "containerDisk": {"image": "demo"}}],
                    **spec,
                },
            },
        },
    }


class World:
    def __init__(self, store: JetStreamStore, run_dir: Path, handlers: dict[str, Handler]) -> None:
        self.store = store
        self.run_dir = run_dir
        self.handlers = handlers

    async def view(self) -> ClusterView:
        cluster = ClusterView()
        async for s in self.store.replay():
            cluster.apply(s)
        return cluster

    async def until(self, probe: Callable[[ClusterView], Any], timeout: float = 20.0) -> Any:
        deadline = time.monotonic() + timeout
        while True:
            value = probe(await self.view())
            if value:
                return value
            assert time.monotonic() < deadline, f"timed out waiting for {probe}"
            await asyncio.sleep(0.05)

    async def running_vm(self, name: str, **kw: Any) -> VMIView:
        await self.store.append(
            VMCreated(meta=meta(Kind.VM, name), manifest=vm_manifest(name, **kw))
        )
        return await self.until(lambda c: _running(c.vmis.get(f"default/{name}")))

    async def migrate(self, mig: str, vmi: str) -> None:
        manifest = {
            "apiVersion": "kubevirt.io/v1",
            "kind": "VirtualMachineInstanceMigration",
            "metadata": {"name": mig, "namespace": "default", "uid": str(uuid.uuid4())},
            "spec": {"vmiName": vmi},
        }
        await self.store.append(
            MigrationRequested(meta=meta(Kind.MIGRATION, mig), manifest=manifest)
        )

    async def migration(
        self, name: str, cond: Callable[[MigrationView], bool], timeout: float = 20.0
    ) -> MigrationView:
        def probe(c: ClusterView) -> MigrationView | None:
            m = c.migrations.get(f"default/{name}")
            return m if m is not None and cond(m) else None

        result: MigrationView = await self.until(probe, timeout)
        return result

    def pidfile(self, node: str, vmi: str) -> Path:
        return self.run_dir / node / "launchers" / f"default_{vmi}.pid"

    async def domain_becomes(self, node: str, vmi: str, state: DomainState) -> None:
        deadline = time.monotonic() + 10
        while (now := await self.domain_state(node, vmi)) is not state:
            assert time.monotonic() < deadline, f"{node}/{vmi}: {now}, not {state}"
            await asyncio.sleep(0.05)

    async def domain_state(self, node: str, vmi: str) -> DomainState:
        sock = str(self.run_dir / node / "launchers" / f"default_{vmi}.sock")
        client = await LauncherClient.connect(sock, timeout=5)
        try:
            result = await client.call(Status())
            assert result.status is not None
            return result.status.state
        finally:
            await client.close()


def _running(vmi: VMIView | None) -> VMIView | None:
    return vmi if vmi is not None and vmi.phase == "Running" else None


async def migrated_in(w: World, name: str, timeout: float = 10.0) -> DomainMigratedIn:
    """The target handler's one DomainMigratedIn for the VMI (waits for it)."""
    deadline = time.monotonic() + timeout
    while True:
        events = await w.store.load(Aggregate(Kind.VMI, "default", name))
        found = [s.event for s in events if isinstance(s.event, DomainMigratedIn)]
        if found:
            assert len(found) == 1, found
            return found[0]
        assert time.monotonic() < deadline, "no DomainMigratedIn from the target"
        await asyncio.sleep(0.05)


def other(node: str) -> str:
    return NODES[1] if node == NODES[0] else NODES[0]


@pytest.fixture
def run_dir() -> Iterator[Path]:
    with short_run_dir() as d:
        yield d


@pytest.fixture
async def world(
    nc: NATS,
    store: JetStreamStore,
    stream_settings: StreamSettings,
    run_dir: Path,
    controller: Callable[..., asyncio.Task[None]],  # noqa: F811
) -> AsyncIterator[World]:
    controller()
    async with contextlib.AsyncExitStack() as stack:
        handlers = {
            n: await stack.enter_async_context(running_handler(nc, stream_settings, run_dir, n))
            for n in NODES
        }
        yield World(store, run_dir, handlers)


async def slow_policy(w: World) -> None:
    """1 MiB/s for a 64 MiB guest: the transfer takes about a minute."""
    await w.store.append(
        PolicyCreated(
            meta=meta(Kind.POLICY, "slow", namespace=CLUSTER_SCOPE),
            manifest={
                "apiVersion": "migrations.kubevirt.io/v1alpha1",
                "kind": "MigrationPolicy",
                "metadata": {"name": "slow"},
                "spec": {
                    "bandwidthPerMigration": "1Mi",
                    "selectors": {"virtualMachineInstanceSelector": {"speed": "slow"}},
                },
            },
        )
    )


async def test_migrate_a_running_vmi_keeps_it_running_and_moves_it(world: World) -> None:
    name = unique("mig")
    before = await world.running_vm(name)
    source = before.node
    target = other(source)
    source_pid = rundir.read_pid(world.pidfile(source, name))
    await world.migrate("m1", name)

    mig = await world.migration("m1", lambda m: m.final)
    assert mig.phase == "Succeeded", mig.failure_reason
    phases = [p for p, _ in mig.transitions]
    assert phases == [
        "Pending", "Scheduling", "Scheduled", "PreparingTarget", "TargetReady", "Running",
        "Succeeded",
    ]  # fmt: skip
    assert mig.source_node == source and mig.target_node == target
    assert mig.data_total > 0 and mig.data_processed == mig.data_total

    c = await world.view()
    vmi = c.vmis[f"default/{name}"]
    assert vmi.node == target and vmi.phase == "Running"
    assert vmi.pod_uid == mig.target_pod_uid and vmi.active_pods == ((mig.target_pod_uid, target),)
    # the phase never went back (no LauncherStarted/DomainStarted from the target)
    assert [p for p, _ in vmi.transitions] == ["Pending", "Scheduling", "Scheduled", "Running"]
    vm = c.vms[f"default/{name}"]
    assert printable_status(c, vm, time.time()) == "Running"

    async def vmi_events() -> list[Any]:
        deadline = time.monotonic() + 10
        while True:
            events = await world.store.load(Aggregate(Kind.VMI, "default", name))
            if any(isinstance(s.event, LauncherExited) for s in events):
                return events
            assert time.monotonic() < deadline, "no LauncherExited from the source"
            await asyncio.sleep(0.05)

    events = await vmi_events()
    started = [s.event for s in events if isinstance(s.event, LauncherStarted | DomainStarted)]
    assert {e.node for e in started} == {source}
    # the target reports its domain once (pid/type only): the VMI's phases never moved
    moved_in = await migrated_in(world, name)
    assert moved_in.node == target and moved_in.meta.node == target
    assert moved_in.meta.event_id == f"virt-handler-{target}/{mig.target_pod_uid}/DomainMigratedIn"
    assert moved_in.domain_type == "test"
    vmi = (await world.view()).vmis[f"default/{name}"]
    assert [p for p, _ in vmi.transitions] == ["Pending", "Scheduling", "Scheduled", "Running"]
    assert vmi.phase == "Running" and not vmi.paused and vmi.node == target
    # the test driver's domain has no QEMU: the pid is whatever the target launcher reported
    assert vmi.qemu_pid == moved_in.qemu_pid and vmi.domain_type == "test"
    stopped = [s.event for s in events if isinstance(s.event, DomainStopped)]
    assert [(e.reason, e.meta.node) for e in stopped] == [(StopReason.MIGRATED, source)]
    exited = [s.event for s in events if isinstance(s.event, LauncherExited)]
    assert [(e.pod_uid, e.meta.node) for e in exited] == [(before.pod_uid, source)]

    # the domain runs only on the target now
    assert source_pid and not rundir.pid_alive(source_pid)
    await world.domain_becomes(target, name, DomainState.RUNNING)
    assert not world.pidfile(source, name).exists() or not rundir.pid_alive(
        rundir.read_pid(world.pidfile(source, name)) or 0
    )

    # the target handler owns the VMI now: a pause goes through it
    from events.catalog import VMIPauseRequested

    await world.store.append(VMIPauseRequested(meta=meta(Kind.VMI, name, node=target)))
    await world.until(lambda c: c.vmis[f"default/{name}"].paused)
    await world.domain_becomes(target, name, DomainState.PAUSED)


async def test_cancel_a_slow_migration_keeps_the_vm_on_the_source(world: World) -> None:
    await slow_policy(world)
    name = unique("cancel")
    before = await world.running_vm(name, labels={"speed": "slow"})
    await world.migrate("m2", name)
    mig = await world.migration("m2", lambda m: m.phase == "Running" and m.data_processed > 0)
    assert mig.policy == "slow"
    # as the api does: routed to the source while Running
    await world.store.append(
        MigrationAbortRequested(meta=meta(Kind.MIGRATION, "m2", node=mig.source_node))
    )
    mig = await world.migration("m2", lambda m: m.final)
    assert mig.phase == "Failed" and mig.abort_status == "Succeeded"
    c = await world.view()
    vmi = c.vmis[f"default/{name}"]
    assert vmi.node == before.node and vmi.phase == "Running" and not vmi.paused
    assert vmi.active_pods == ((before.pod_uid, before.node),)
    assert await world.domain_state(before.node, name) is DomainState.RUNNING
    # the target launcher is cleaned up
    target_pidfile = world.pidfile(mig.target_node, name)

    async def target_gone(_: ClusterView) -> bool:
        pid = rundir.read_pid(target_pidfile) if target_pidfile.exists() else None
        return not pid or not rundir.pid_alive(pid)

    deadline = time.monotonic() + 10
    while not await target_gone(c):
        assert time.monotonic() < deadline
        await asyncio.sleep(0.05)


async def test_kill_the_target_launcher_mid_migration_fails_it_vm_stays(world: World) -> None:
    await slow_policy(world)
    name = unique("kill")
    before = await world.running_vm(name, labels={"speed": "slow"})
    await world.migrate("m3", name)
    mig = await world.migration("m3", lambda m: m.phase == "Running")
    pid = rundir.read_pid(world.pidfile(mig.target_node, name))
    assert pid
    os.kill(pid, signal.SIGKILL)
    mig = await world.migration("m3", lambda m: m.final)
    assert mig.phase == "Failed" and mig.failure_reason == "Target pod is down"
    c = await world.view()
    vmi = c.vmis[f"default/{name}"]
    assert vmi.node == before.node and vmi.phase == "Running"
    assert await world.domain_state(before.node, name) is DomainState.RUNNING


async def test_drain_moves_a_live_migratable_vmi_off_the_node(world: World) -> None:
    name = unique("drain")
    before = await world.running_vm(name, evictionStrategy="LiveMigrate")
    source = before.node
    await world.store.append(
        NodeDrainRequested(meta=meta(Kind.NODE, source, namespace=CLUSTER_SCOPE))
    )

    def moved(c: ClusterView) -> bool:
        vmi = c.vmis.get(f"default/{name}")
        return vmi is not None and vmi.node == other(source) and not list(c.vmis_on(source))

    await world.until(moved)
    c = await world.view()
    assert c.vmis[f"default/{name}"].phase == "Running"
    assert c.nodes[source].cordoned
    migs = [m for m in c.migrations.values() if m.vmi_name == name]
    assert [m.phase for m in migs] == ["Succeeded"]


async def test_handlers_restarted_mid_migration_finish_it_without_duplicates(
    world: World, nc: NATS, stream_settings: StreamSettings
) -> None:
    await world.store.append(
        PolicyCreated(
            meta=meta(Kind.POLICY, "medium", namespace=CLUSTER_SCOPE),
            manifest={
                "apiVersion": "migrations.kubevirt.io/v1alpha1",
                "kind": "MigrationPolicy",
                "metadata": {"name": "medium"},
                "spec": {
                    "bandwidthPerMigration": "24Mi",
                    "selectors": {"virtualMachineInstanceSelector": {"speed": "medium"}},
                },
            },
        )
    )
    name = unique("restart")
    await world.running_vm(name, labels={"speed": "medium"})
    await world.migrate("m4", name)
    mig = await world.migration("m4", lambda m: m.phase == "Running")
    # both handlers go away mid-transfer and come back (a new incarnation each)
    async with contextlib.AsyncExitStack() as stack:
        for node in (mig.target_node, mig.source_node):
            world.handlers[node].stop()
            fresh = await stack.enter_async_context(
                running_handler(nc, stream_settings, world.run_dir, node)
            )
            world.handlers[node] = fresh
            if node == mig.target_node:
                assert fresh.migrations.owns(f"default/{name}")  # recognised as a target
        mig = await world.migration("m4", lambda m: m.final, timeout=30)
        await world.domain_becomes(mig.target_node, name, DomainState.RUNNING)
    assert mig.phase == "Succeeded", mig.failure_reason
    c = await world.view()
    vmi = c.vmis[f"default/{name}"]
    assert vmi.node == mig.target_node and vmi.phase == "Running"
    assert [p for p, _ in vmi.transitions] == ["Pending", "Scheduling", "Scheduled", "Running"]
    events = await world.store.load(Aggregate(Kind.MIGRATION, "default", "m4"))
    ids = [s.event.meta.event_id for s in events]
    assert len(ids) == len(set(ids))
    moved_in = await migrated_in(world, name)
    assert moved_in.node == mig.target_node
    vmi_ids = [
        s.event.meta.event_id for s in await world.store.load(Aggregate(Kind.VMI, "default", name))
    ]
    assert len(vmi_ids) == len(set(vmi_ids))
    vmi = (await world.view()).vmis[f"default/{name}"]
    assert [p for p, _ in vmi.transitions] == ["Pending", "Scheduling", "Scheduled", "Running"]
    kinds = [type(s.event).__name__ for s in events]
    for once in ("TargetPreparing", "TargetPrepared", "MigrationStarted", "MigrationSucceeded"):
        assert kinds.count(once) == 1, (once, kinds)
