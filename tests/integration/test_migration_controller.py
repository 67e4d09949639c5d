"""The controller's migration choreography in a real service shell on a real nats-server;
the handlers' part is played by the test (appending their events), so this pins the
controller's routing (meta.node) and the projection of the whole sequence."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Callable
from typing import Any

from events import subjects
from events.catalog import (
    DomainStarted,
    LauncherStarted,
    MigrationFailed,
    MigrationPending,
    MigrationRequested,
    MigrationScheduled,
    MigrationStarted,
    MigrationSucceeded,
    PodScheduled,
    TargetPrepared,
    TargetPreparing,
    VMICreated,
)
from events.meta import Aggregate, Kind
from eventstore.jetstream import JetStreamStore
from projections.cluster import Cluster as ClusterView
from tests.conftest import unique
from tests.factories import meta
from tests.integration.test_controller_service import (  # noqa: F401  (fixture)
    Cluster,
    controller,
    eventually,
)


def vmi_manifest(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachineInstance",
        "metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}"},
        "spec": {"domain": {"devices": {}, "resources": {"requests": {"memory": "64Mi"}}}},
    }


def migration_request(name: str, vmi: str) -> MigrationRequested:
    return MigrationRequested(
        meta=meta(Kind.MIGRATION, name),
        manifest={
            "apiVersion": "kubevirt.io/v1",
            "kind": "VirtualMachineInstanceMigration",
            "metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}"},
            "spec": {"vmiName": vmi},
        },
    )


def mig_agg(name: str) -> Aggregate:
    return Aggregate(kind=Kind.MIGRATION, namespace="default", name=name)


async def running_vmi(c: Cluster, name: str) -> PodScheduled:
    await c.append(VMICreated(meta=meta(Kind.VMI, name), manifest=vmi_manifest(name)))
    (sched,) = await c.wait_for(name, PodScheduled)
    m = meta(Kind.VMI, name, node=sched.node)
    await c.append(LauncherStarted(meta=m, node=sched.node, pod_uid=sched.pod_uid, pid=1))
    await c.append(
        DomainStarted(meta=meta(Kind.VMI, name, node=sched.node), node=sched.node, domain=name)
    )
    return sched


async def view(store: JetStreamStore) -> ClusterView:
    cluster = ClusterView()
    async for s in store.replay():
        cluster.apply(s)
    return cluster


async def test_migration_choreography_routes_each_step_and_moves_the_vmi(
    store: JetStreamStore,
    controller: Callable[..., asyncio.Task[None]],  # noqa: F811
) -> None:
    c = Cluster(store)
    controller()
    name, mname = unique("vm"), unique("mig")
    await c.node_joined("node-a")
    src = await running_vmi(c, name)
    await c.node_joined("node-b")
    await c.append(migration_request(mname, name))

    async def scheduled() -> Any:
        return [
            s for s in await store.load(mig_agg(mname)) if isinstance(s.event, MigrationScheduled)
        ]

    (stored,) = await eventually(scheduled)
    ev = stored.event
    assert ev.target_node == "node-b" and subjects.parse(stored.subject)[4] == "node-b"
    assert ev.source_node == "node-a" and ev.source_pod == src.pod_name

    def hm(node: str) -> Any:
        return meta(Kind.MIGRATION, mname, node=node)

    await c.append(TargetPreparing(meta=hm("node-b"), target_node="node-b"))
    await c.append(
        TargetPrepared(
            meta=hm("node-a"),
            target_node="node-b",
            target_address="x",
            target_pod_uid=ev.target_pod_uid,
        )
    )
    await c.append(MigrationStarted(meta=hm("node-a")))
    await c.append(
        MigrationSucceeded(
            meta=hm("node-b"), target_node="node-b", target_pod_uid=ev.target_pod_uid
        )
    )
    await asyncio.sleep(0.3)  # give the controller the chance to (wrongly) react
    cluster = await view(store)
    mig = cluster.migrations[f"default/{mname}"]
    assert [p for p, _ in mig.transitions] == [
        "Pending",
        "Scheduling",
        "Scheduled",
        "PreparingTarget",
        "TargetReady",
        "Running",
        "Succeeded",
    ]
    vmi = cluster.vmis[f"default/{name}"]
    assert vmi.node == "node-b" and vmi.phase == "Running"
    assert not any(isinstance(s.event, MigrationFailed) for s in await store.load(mig_agg(mname)))


async def test_twelve_concurrent_requests_respect_the_parallel_limits(
    store: JetStreamStore,
    controller: Callable[..., asyncio.Task[None]],  # noqa: F811
) -> None:
    c = Cluster(store)
    controller()
    names = [unique("vm") for _ in range(12)]
    for i, node in enumerate(("node-a", "node-b", "node-c")):
        await c.node_joined(node)
        for name in names[4 * i : 4 * i + 4]:
            await running_vmi(c, name)
    await c.node_joined("node-d")
    migs = [unique("mig") for _ in names]
    await asyncio.gather(
        *(c.append(migration_request(m, n)) for m, n in zip(migs, names, strict=True))
    )

    async def settled() -> Any:
        cluster = await view(store)
        phases = Counter(cluster.migrations[f"default/{m}"].phase for m in migs)
        waiting = [
            m for m in migs if cluster.migrations[f"default/{m}"].message.startswith("Waiting")
        ]
        return cluster if phases["Scheduled"] == 5 and len(waiting) == 7 else None

    cluster = await eventually(settled)
    started = [cluster.migrations[f"default/{m}"] for m in migs]
    started = [m for m in started if m.phase != "Pending"]
    assert max(Counter(m.source_node for m in started).values()) <= 2
    assert all(m.target_node != m.source_node for m in started)
    await asyncio.sleep(0.5)  # and it stays that way
    cluster = await view(store)
    assert sum(1 for m in migs if cluster.migrations[f"default/{m}"].phase != "Pending") == 5
    for m in migs:
        said = [
            s.event.message
            for s in await store.load(mig_agg(m))
            if isinstance(s.event, MigrationPending)
        ]
        assert len(said) == len(set(said))  # once per distinct reason
