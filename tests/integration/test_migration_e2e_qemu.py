"""One real live migration through the handlers in qemu mode: two per-node libvirtds
(ops/node_libvirtd.py), the controller, two handlers whose launchers run QEMU (TCG); the
source launcher's MigrateTo moves the guest, the handlers relay it as events."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path

from nats.aio.client import Client as NATS

from events.catalog import (
    DomainMigratedIn,
    DomainStarted,
    LauncherStarted,
    MigrationRequested,
    VMICreated,
    VMIDeleteRequested,
)
from events.meta import Aggregate, Kind
from eventstore.jetstream import JetStreamStore
from eventstore.settings import StreamSettings
from projections.cluster import Cluster as ClusterView
from projections.render import DOMAIN_STATUS_KEY, render_vmi
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
    handler = Handler(cfg, store=JetStreamStore(nc, settings))
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


async def view(store: JetStreamStore) -> ClusterView:
    c = ClusterView()
    async for s in store.replay():
        c.apply(s)
    return c


async def until(
    store: JetStreamStore, probe: Callable[[ClusterView], object], timeout: float
) -> None:
    deadline = time.monotonic() + timeout
    while not probe(await view(store)):
        assert time.monotonic() < deadline, f"timed out: {probe}"
        await asyncio.sleep(0.1)


def qemu_alive(pid: int) -> bool:
    """A live QEMU process (the node reapers reap exited ones at once)."""
    try:
        return b"qemu-system" in Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False


async def test_qemu_live_migration_through_the_handlers(
    nc: NATS,
    store: JetStreamStore,
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
        before = (await view(store)).vmis["default/qmig"]
        source, source_pid = before.node, before.qemu_pid
        assert source_pid and qemu_alive(source_pid)
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
        # the status follows the guest: the target's live QEMU, not the source's (gone)
        await until(store, lambda c: c.vmis["default/qmig"].qemu_pid != source_pid, 30)
        c = await view(store)
        moved = c.vmis["default/qmig"]
        events = [s.event for s in await store.load(Aggregate(Kind.VMI, "default", "qmig"))]
        (domain_name,) = {e.domain for e in events if isinstance(e, DomainStarted)}
        pidfile = qemu_cluster.nodes[moved.node].qemu_pid_dir / f"{domain_name}.pid"
        target_pid = int(pidfile.read_text().strip())
        assert moved.qemu_pid == target_pid != source_pid and qemu_alive(target_pid)
        deadline = time.monotonic() + 10
        while qemu_alive(source_pid):  # the source QEMU exits with libvirt's confirm phase
            assert time.monotonic() < deadline, "the source QEMU outlived the migration"
            await asyncio.sleep(0.05)
        domain = render_vmi(c, moved)["status"][DOMAIN_STATUS_KEY]
        assert domain == {"state": "Running", "type": "qemu", "qemuPid": target_pid}
        assert moved.phase == "Running" and not moved.paused
        assert [p for p, _ in moved.transitions] == [
            "Pending",
            "Scheduling",
            "Scheduled",
            "Running",
        ]
        (migrated_in,) = [e for e in events if isinstance(e, DomainMigratedIn)]
        assert migrated_in.node == moved.node and migrated_in.domain_type == "qemu"
        started = [e for e in events if isinstance(e, LauncherStarted | DomainStarted)]
        assert {e.node for e in started} == {source}  # no second start from the target
        delete = VMIDeleteRequested(meta=meta(Kind.VMI, "qmig", node=moved.node))
        await store.append(delete)
        # final, or already removed by the controller between two polls
        await until(
            store,
            lambda c: "default/qmig" not in c.vmis or c.vmis["default/qmig"].final,
            60,
        )
