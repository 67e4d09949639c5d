"""KubeVirt's metrics from the projections: fold hand-made events into a Cluster, then read
what the collector exports and what the phase-transition histograms observed.

`workload_events` is also the workload the observability integration test appends to a real
stream, so the dashboards' queries have something to show."""

from __future__ import annotations

from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from events.catalog import (
    DomainStarted,
    DomainStopped,
    Event,
    LauncherStarted,
    MigrationFailed,
    MigrationProgressed,
    MigrationRequested,
    MigrationScheduled,
    MigrationScheduling,
    MigrationSettings,
    MigrationStarted,
    MigrationSucceeded,
    NodeJoined,
    NodeUnresponsive,
    PodScheduled,
    Resources,
    StopReason,
    VMCreated,
    VMICreated,
    VMIDeleteRequested,
)
from events.envelope import Stored
from events.meta import Kind
from projections.cluster import Cluster
from readside.metrics import PhaseHistograms, ProjectionMetrics
from tests.factories import meta

NS = "default"
GiB = 1 << 30


class Clock:
    """Event timestamps one step apart, from t0."""

    def __init__(self, t0: float, step: float = 0.5) -> None:
        self.t, self.step = t0, step

    def __call__(self) -> float:
        self.t += self.step
        return self.t


def vm_manifest(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachine",
        "metadata": {"name": name, "namespace": NS, "uid": f"uid-{name}"},
        "spec": {
            "runStrategy": "Always",
            "template": {
                "metadata": {"annotations": {"vm.kubevirt.io/os": "fedora"}},
                "spec": {},
            },
        },
    }


def vmi_manifest(name: str, mem: str = "1Gi") -> dict[str, Any]:
    return {
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachineInstance",
        "metadata": {
            "name": name,
            "namespace": NS,
            "uid": f"vmi-{name}",
            "annotations": {"vm.kubevirt.io/os": "fedora"},
        },
        "spec": {"domain": {"resources": {"requests": {"memory": mem, "cpu": "1"}}}},
    }


def join(node: str, at: float) -> Event:
    return NodeJoined(
        meta=meta(Kind.NODE, node, "_", at=at),
        node=node,
        capacity=Resources(cpu_millis=8000, memory_bytes=16 * GiB),
    )


def start_vmi(name: str, node: str, clock: Clock, *, owned: bool = True) -> list[Event]:
    """(VM and) VMI created, scheduled, launched, running on `node`."""
    events: list[Event] = []
    if owned:
        events.append(
            VMCreated(meta=meta(Kind.VM, name, NS, at=clock()), manifest=vm_manifest(name))
        )
    pod = f"virt-launcher-{name}-abcde"
    events += [
        VMICreated(
            meta=meta(Kind.VMI, name, NS, at=clock()),
            manifest=vmi_manifest(name),
            owner_vm_uid=f"uid-{name}" if owned else "",
        ),
        PodScheduled(
            meta=meta(Kind.VMI, name, NS, node=node, at=clock()),
            node=node,
            pod_name=pod,
            pod_uid=f"pod-{name}",
            manifest=vmi_manifest(name),
        ),
        LauncherStarted(
            meta=meta(Kind.VMI, name, NS, node=node, at=clock()),
            node=node,
            pod_uid=f"pod-{name}",
            pid=100,
        ),
        DomainStarted(
            meta=meta(Kind.VMI, name, NS, node=node, at=clock()), node=node, domain=f"{NS}_{name}"
        ),
    ]
    return events


def migrate(
    name: str, vmi: str, source: str, target: str, clock: Clock, *, until: str
) -> list[Event]:
    """A migration of `vmi` from `source` to `target`, up to `until` (Pending, Running,
    Succeeded or Failed)."""

    def m(node: str = "") -> Any:
        return meta(Kind.MIGRATION, name, NS, node=node, at=clock())

    events: list[Event] = [
        MigrationRequested(
            meta=m(),
            manifest={
                "apiVersion": "kubevirt.io/v1",
                "kind": "VirtualMachineInstanceMigration",
                "metadata": {"name": name, "namespace": NS, "uid": f"mig-{name}"},
                "spec": {"vmiName": vmi},
            },
        )
    ]
    if until == "Pending":
        return events
    events += [
        MigrationScheduling(
            meta=m(), vmi_uid=f"vmi-{vmi}", source_node=source, source_pod=f"virt-launcher-{vmi}"
        ),
        MigrationScheduled(
            meta=m(target),
            vmi_name=vmi,
            vmi_uid=f"vmi-{vmi}",
            source_node=source,
            source_pod=f"virt-launcher-{vmi}-abcde",
            target_node=target,
            target_pod=f"virt-launcher-{vmi}-target",
            target_pod_uid=f"pod-{vmi}-target",
            settings=MigrationSettings(),
            manifest=vmi_manifest(vmi),
        ),
        MigrationStarted(meta=m(source)),
        MigrationProgressed(
            meta=m(source),
            data_processed_bytes=GiB // 4,
            data_remaining_bytes=3 * GiB // 4,
            data_total_bytes=GiB,
        ),
    ]
    if until == "Succeeded":
        events += [
            MigrationSucceeded(meta=m(target), target_node=target, target_pod_uid=f"pod-{vmi}-t"),
            DomainStopped(
                meta=meta(Kind.VMI, vmi, NS, node=source, at=clock()), reason=StopReason.MIGRATED
            ),
        ]
    elif until == "Failed":
        events.append(MigrationFailed(meta=m(), reason="TargetFailed", message="target crashed"))
    return events


def workload_events(t0: float, *, with_unresponsive_node: bool = False) -> list[Event]:
    """Two nodes; VMs running on both; one migration running, one succeeded, one failed,
    one pending; a VMI stuck in Scheduling; a standalone VMI deleted to Succeeded."""
    c = Clock(t0)
    events: list[Event] = [join("node-1", c()), join("node-2", c())]
    events += start_vmi("vm-a", "node-1", c)
    events += start_vmi("vm-b", "node-2", c)
    events += start_vmi("vm-c", "node-1", c)
    events += start_vmi("vm-d", "node-2", c)
    events += migrate("mig-running", "vm-a", "node-1", "node-2", c, until="Running")
    events += migrate("mig-ok", "vm-b", "node-2", "node-1", c, until="Succeeded")
    events += migrate("mig-bad", "vm-c", "node-1", "node-2", c, until="Failed")
    events += migrate("mig-wait", "vm-d", "node-2", "node-1", c, until="Pending")
    events += start_vmi("vmi-gone", "node-2", c, owned=False)
    events += [
        VMIDeleteRequested(meta=meta(Kind.VMI, "vmi-gone", NS, node="node-2", at=c())),
        DomainStopped(
            meta=meta(Kind.VMI, "vmi-gone", NS, node="node-2", at=c()),
            reason=StopReason.SHUTDOWN,
        ),
    ]
    events += start_vmi("vm-stuck", "node-1", c)[:3]  # VM, VMI, PodScheduled: Scheduling
    if with_unresponsive_node:
        events += [
            join("node-3", c()),
            NodeUnresponsive(meta=meta(Kind.NODE, "node-3", "_", at=c()), last_heartbeat=t0),
        ]
    return events


# ------------------------------------------------------------------------------ tests
class Folded:
    def __init__(self, events: list[Event], *, replay: int = 0, now: float = 2000.0) -> None:
        self.cluster = Cluster()
        self.registry = CollectorRegistry()
        self.metrics = ProjectionMetrics(
            self.cluster, clock=lambda: now, histograms=PhaseHistograms(self.registry)
        ).register(self.registry)
        for seq, ev in enumerate(events, 1):
            stored = Stored(seq=seq, subject="s", time=ev.meta.occurred_at, event=ev)
            touched = self.cluster.apply(stored)
            self.metrics.observe(stored, touched, replaying=seq <= replay)

    def value(self, metric: str, /, **labels: str) -> float | None:
        return self.registry.get_sample_value(metric, labels)

    def samples(self, name: str) -> list[dict[str, str]]:
        return [
            dict(s.labels) for fam in self.registry.collect() for s in fam.samples if s.name == name
        ]


@pytest.fixture(scope="module")
def folded() -> Folded:
    return Folded(workload_events(1000.0, with_unresponsive_node=True))


def test_vmi_info_and_phase_count(folded: Folded) -> None:
    info = folded.samples("kubevirt_vmi_info")
    by_name = {s["name"]: s for s in info}
    assert by_name["vm-a"]["phase"] == "running" and by_name["vm-a"]["node"] == "node-1"
    assert by_name["vm-a"]["os"] == "fedora"
    assert by_name["vm-b"]["node"] == "node-1"  # migrated
    assert by_name["vm-stuck"]["phase"] == "scheduling"
    assert by_name["vmi-gone"]["phase"] == "succeeded"
    count = "kubevirt_vmi_phase_count"
    labels = {"os": "fedora", "workload": "<none>", "flavor": "<none>"}
    assert folded.value(count, phase="running", node="node-1", **labels) == 3  # a, b, c
    assert folded.value(count, phase="running", node="node-2", **labels) == 1  # d
    assert folded.value(count, phase="scheduling", node="node-1", **labels) == 1


def test_vm_info_status_groups_and_transition_timestamps(folded: Folded) -> None:
    groups = {
        s["name"]: (s["status"], s["status_group"]) for s in folded.samples("kubevirt_vm_info")
    }
    assert groups["vm-a"] == ("Migrating", "migrating")
    assert groups["vm-b"] == ("Running", "running")
    assert groups["vm-stuck"] == ("Starting", "starting")
    running = "kubevirt_vm_running_status_last_transition_timestamp_seconds"
    migrating = "kubevirt_vm_migrating_status_last_transition_timestamp_seconds"
    assert folded.value(migrating, name="vm-a", namespace=NS) > 1000  # type: ignore[operator]
    assert folded.value(running, name="vm-a", namespace=NS) == 0
    assert folded.value(running, name="vm-b", namespace=NS) > 1000  # type: ignore[operator]
    assert folded.value("kubevirt_number_of_vms", namespace=NS) == 5


def test_migration_counts_outcomes_and_data(folded: Folded) -> None:
    assert folded.value("kubevirt_vmi_migrations_in_pending_phase") == 1
    assert folded.value("kubevirt_vmi_migrations_in_scheduling_phase") == 0
    assert folded.value("kubevirt_vmi_migrations_in_running_phase") == 1
    outcome = {"namespace": NS}
    assert (
        folded.value("kubevirt_vmi_migration_succeeded", vmi="vm-b", vmim="mig-ok", **outcome) == 1
    )
    assert folded.value("kubevirt_vmi_migration_failed", vmi="vm-c", vmim="mig-bad", **outcome) == 1
    where = {"name": "vm-a", "namespace": NS, "node": "node-1"}
    assert folded.value("kubevirt_vmi_migration_data_processed_bytes", **where) == GiB // 4
    assert folded.value("kubevirt_vmi_migration_data_remaining_bytes", **where) == 3 * GiB // 4


def test_node_capacity_allocation_and_health(folded: Folded) -> None:
    assert folded.value("virtstream_node_capacity_cpu_cores", node="node-1") == 8
    assert folded.value("virtstream_node_capacity_memory_bytes", node="node-1") == 16 * GiB
    # node-1: vm-a, vm-b (migrated in), vm-c, vm-stuck; 1 CPU each
    assert folded.value("virtstream_node_allocated_cpu_cores", node="node-1") == 4
    assert folded.value("virtstream_node_vmis", node="node-1") == 4
    # node-2: vm-d, plus room held for vm-a's incoming migration
    assert folded.value("virtstream_node_allocated_cpu_cores", node="node-2") == 2
    assert folded.value("virtstream_node_schedulable", node="node-1") == 1
    assert folded.value("virtstream_node_schedulable", node="node-3") == 0
    assert folded.value("virtstream_node_unresponsive", node="node-3") == 1


def test_phase_transition_histograms_from_creation_and_deletion(folded: Folded) -> None:
    created = "kubevirt_vmi_phase_transition_time_from_creation_seconds_count"
    assert folded.value(created, phase="Running") == 5  # a, b, c, d, vmi-gone
    assert folded.value(created, phase="Scheduling") == 6  # + vm-stuck
    assert folded.value(created, phase="Pending") is None  # creation itself: not a transition
    # PodScheduled, LauncherStarted, DomainStarted 0.5 s apart: Running 1.5 s after creation
    total = folded.value(
        "kubevirt_vmi_phase_transition_time_from_creation_seconds_sum", phase="Running"
    )
    assert total == pytest.approx(5 * 1.5)
    deleted = "kubevirt_vmi_phase_transition_time_from_deletion_seconds"
    assert folded.value(f"{deleted}_count", phase="Succeeded") == 1
    assert folded.value(f"{deleted}_sum", phase="Succeeded") == pytest.approx(0.5)
    between = "kubevirt_vmi_phase_transition_time_seconds_count"
    assert folded.value(between, phase="Running", last_phase="Scheduled") == 5
    mig = "kubevirt_vmi_migration_phase_transition_time_from_creation_seconds_count"
    assert folded.value(mig, phase="Succeeded") == 1
    assert folded.value(mig, phase="Failed") == 1


def test_replayed_history_moves_bookkeeping_but_observes_nothing() -> None:
    events = workload_events(1000.0)
    f = Folded(events, replay=len(events))
    name = "kubevirt_vmi_phase_transition_time_from_creation_seconds_count"
    assert f.value(name, phase="Running") is None
    # a live event after the replay observes only its own transition
    more = start_vmi("late", "node-1", Clock(5000.0))
    for seq, ev in enumerate(more, len(events) + 1):
        stored = Stored(seq=seq, subject="s", time=ev.meta.occurred_at, event=ev)
        f.metrics.observe(stored, f.cluster.apply(stored))
    assert f.value(name, phase="Running") == 1


def test_register_replaces_the_previous_collector() -> None:
    registry = CollectorRegistry()
    hist = PhaseHistograms(registry)
    first = ProjectionMetrics(Cluster(), histograms=hist).register(registry)
    second_cluster = Cluster()
    second = ProjectionMetrics(second_cluster, histograms=hist).register(registry)
    second_cluster.apply(Stored(seq=1, subject="s", time=1.0, event=join("n", 1.0)))
    assert registry.get_sample_value("virtstream_node_schedulable", {"node": "n"}) == 1
    first.unregister(registry)  # not registered any more: a no-op
    second.unregister(registry)
    assert registry.get_sample_value("virtstream_node_schedulable", {"node": "n"}) is None


def test_cdis_metrics_name_the_storage_classes() -> None:
    from events.catalog import ResourceCreated
    from events.meta import CLUSTER_SCOPE, ResourceKind
    from kinds.storage import CLASSES

    registry = CollectorRegistry()
    cluster = Cluster()
    ProjectionMetrics(cluster, histograms=PhaseHistograms(registry)).register(registry)
    for seq, body in enumerate(CLASSES, 1):
        name = body["metadata"]["name"]
        manifest = {**body, "metadata": {**body["metadata"], "uid": f"uid-{name}"}}
        ev = ResourceCreated(
            meta=meta(ResourceKind.STORAGE_CLASS, name, CLUSTER_SCOPE), manifest=manifest
        )
        cluster.apply(Stored(seq=seq, subject="s", time=1.0, event=ev))
    assert registry.get_sample_value("kubevirt_cdi_cr_ready") == 1
    assert registry.get_sample_value("kubevirt_cdi_datavolume_pending") == 0
    labels = {
        "storageclass": "shared",
        "provisioner": "virtstream.io/shared",
        "complete": "true",
        "default": "false",
        "rwx": "true",
    }
    assert registry.get_sample_value("kubevirt_cdi_storageprofile_info", labels) == 1
    local = {**labels, "storageclass": "local", "provisioner": "virtstream.io/local"}
    assert (
        registry.get_sample_value(
            "kubevirt_cdi_storageprofile_info", {**local, "default": "true", "rwx": "false"}
        )
        == 1
    )


def test_cdis_progress_and_outdated_crons() -> None:
    """An import or clone in progress exports its percentage by the DataVolume's uid; a
    DataImportCron not up to date is outdated (1), then 0 once its import succeeded."""
    from events.catalog import ImportFinished, ImportProgressed, ResourceCreated
    from events.meta import ResourceKind
    from kinds import dataimportcron
    from tests.unit.test_dataimportcron import cron
    from tests.unit.test_storage import world

    w = world()
    registry = CollectorRegistry()
    ProjectionMetrics(w.state.cluster, histograms=PhaseHistograms(registry)).register(registry)
    created = ResourceCreated(meta=w.m(dataimportcron.KIND_TOKEN, "fedora-cron"), manifest=cron())
    w.settle(w.when(created))
    labels = {"namespace": "default", "cron_name": "fedora-cron", "pending": "false"}
    assert registry.get_sample_value("kubevirt_cdi_dataimportcron_outdated", labels) == 1
    [dv] = w.state.cluster.resources[ResourceKind.DATA_VOLUME].values()
    w.run(ImportProgressed(meta=w.m(ResourceKind.DATA_VOLUME, dv.name, "node-1"), progress="42.5%"))
    owner = {"ownerUID": dv.uid}
    assert registry.get_sample_value("kubevirt_cdi_import_progress_total", owner) == 42.5
    w.settle(w.when(ImportFinished(meta=w.m(ResourceKind.DATA_VOLUME, dv.name, "node-1"))))
    assert registry.get_sample_value("kubevirt_cdi_import_progress_total", owner) is None
    assert registry.get_sample_value("kubevirt_cdi_dataimportcron_outdated", labels) == 0
