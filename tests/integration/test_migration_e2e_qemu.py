"""One real live migration through the handlers in qemu mode: two per-node libvirtds
(ops/node_runtime.py), the controller, two handlers whose launchers run QEMU (TCG); the
source launcher's MigrateTo moves the guest, the handlers relay it as events."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable

from nats.aio.client import Client as NATS

from events.catalog import MigrationRequested, VMICreated, VMIDeleteRequested
from events.meta import Kind
from eventstore.settings import StreamSettings
from eventstore.store import EventStore
from projections.cluster import Cluster as ClusterView
from services.handler.node_info import LaunchSettings, NodeConfig
from services.handler.service import Handler, HandlerConfig
from services.launcher.domain_xml import DomainType
from tests.factories import meta
from tests.integration.qemu_support import (  # noqa: F401  (fixtures)
    QemuCluster,
    cirros_vmi,
    qemu_cluster,
    qemu_marks,
)
from tests.integration.test_controller_service import controller  # noqa: F401  (fixture)

pytestmark = qemu_marks


@contextlib.asynccontextmanager
async def qemu_handler(
    nc: NATS, settings: StreamSettings, cluster: QemuCluster, node: str
) -> AsyncIterator[Handler]:
    rt = cluster.nodes[node]
    cfg = HandlerConfig(
        node=NodeConfig(name=node, cpus=4, memory="8Gi", hypervisor="qemu"),
        run_dir=str(cluster.base / "handlers"),
        settings=settings,
        tick_interval=0.2,
        heartbeat_interval=0.5,
        launch=LaunchSettings(
            hypervisor_uri=rt.uri,
            domain_type=DomainType.QEMU,
            disk_dir=cluster.disk_dir,
            qemu_pid_dir=str(rt.qemu_pid_dir),
        ),
    )
    handler = Handler(cfg, nc=nc)
    task = asyncio.create_task(handler.run())
    async with asyncio.timeout(30):
        while not handler.ready:
            if task.done():
                await task
            await asyncio.sleep(0.05)
    try:
        yield handler
    finally:
        handler.stop()
        await asyncio.wait_for(task, 15)


async def view(store: EventStore) -> ClusterView:
    c = ClusterView()
    async for s in store.replay():
        c.apply(s)
    return c


async def until(store: EventStore, probe: Callable[[ClusterView], object], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not probe(await view(store)):
        assert time.monotonic() < deadline, f"timed out: {probe}"
        await asyncio.sleep(0.1)


async def test_qemu_live_migration_through_the_handlers(
    nc: NATS,
    store: EventStore,
    stream_settings: StreamSettings,
    qemu_cluster: QemuCluster,  # noqa: F811
    controller: Callable[..., asyncio.Task[None]],  # noqa: F811
) -> None:
    controller()
    vmi = cirros_vmi("qmig")
    async with (
        qemu_handler(nc, stream_settings, qemu_cluster, "node-1"),
        qemu_handler(nc, stream_settings, qemu_cluster, "node-2"),
    ):
        await store.append(VMICreated(meta=meta(Kind.VMI, "qmig"), manifest=vmi))
        await until(store, lambda c: c.vmis["default/qmig"].phase == "Running", 30)
        source = (await view(store)).vmis["default/qmig"].node
        manifest = {
            "apiVersion": "kubevirt.io/v1",
            "kind": "VirtualMachineInstanceMigration",
            "metadata": {"name": "qm", "namespace": "default", "uid": "uid-qm"},
            "spec": {"vmiName": "qmig"},
        }
        await store.append(MigrationRequested(meta=meta(Kind.MIGRATION, "qm"), manifest=manifest))
        await until(store, lambda c: c.migrations["default/qm"].final, 120)
        c = await view(store)
        mig, moved = c.migrations["default/qm"], c.vmis["default/qmig"]
        assert mig.phase == "Succeeded", mig.failure_reason
        assert moved.node == mig.target_node != source and moved.phase == "Running"
        assert [p for p, _ in moved.transitions] == [
            "Pending",
            "Scheduling",
            "Scheduled",
            "Running",
        ]
        delete = VMIDeleteRequested(meta=meta(Kind.VMI, "qmig", node=moved.node))
        await store.append(delete)
        # final, or already removed by the controller between two polls
        await until(
            store,
            lambda c: "default/qmig" not in c.vmis or c.vmis["default/qmig"].final,
            60,
        )
