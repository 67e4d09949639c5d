"""Projections: given events, then the views and their KubeVirt rendering."""

from __future__ import annotations

from typing import Any

import pytest

from events.catalog import (
    DomainMigratedIn,
    DomainPaused,
    DomainResumed,
    DomainStarted,
    DomainStopped,
    Event,
    LauncherStarted,
    MigrationRequested,
    MigrationScheduled,
    MigrationSettings,
    MigrationStarted,
    MigrationSucceeded,
    NodeJoined,
    PodScheduled,
    Resources,
    StopReason,
    Unschedulable,
    VMCreated,
    VMDeleted,
    VMICreated,
    VMIDeleteRequested,
    VMIRemoved,
    VMIWarning,
    VMStartFailed,
    VMStopRequested,
)
from events.envelope import Stored
from events.meta import Kind, KindToken
from projections.allocation import node_allocated
from projections.cluster import Cluster
from projections.render import (
    DOMAIN_STATUS_KEY,
    printable_status,
    render_vm,
    render_vmi,
)
from tests.factories import meta

NS = "default"


def vm_manifest(name: str = "vm1", run_strategy: str = "Always") -> dict[str, Any]:
    return {
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachine",
        "metadata": {"name": name, "namespace": NS, "uid": f"uid-{name}"},
        "spec": {"runStrategy": run_strategy, "template": {"spec": {}}},
        "extraField": {"kept": True},
    }


def vmi_manifest(name: str = "vm1", uid: str = "vmi-1", mem: str = "1Gi") -> dict[str, Any]:
    return {
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachineInstance",
        "metadata": {"name": name, "namespace": NS, "uid": uid},
        "spec": {"domain": {"resources": {"requests": {"memory": mem, "cpu": "1"}}}},
    }


class Given:
    def __init__(self) -> None:
        self.cluster = Cluster()
        self.seq = 0
        self.t = 1000.0

    def __call__(self, *events: Event) -> Given:
        for ev in events:
            self.seq += 1
            self.cluster.apply(Stored(seq=self.seq, subject="s", time=self.t, event=ev))
        return self

    def m(self, kind: KindToken, name: str = "vm1", node: str = "", dt: float = 1.0) -> Any:
        self.t += dt
        return meta(kind, name, NS if kind not in (Kind.NODE,) else "_", node=node, at=self.t)


def running_vm(g: Given) -> Given:
    return g(
        NodeJoined(
            meta=g.m(Kind.NODE, "node-1"),
            node="node-1",
            capacity=Resources(cpu_millis=4000, memory_bytes=8 << 30),
        ),
        VMCreated(meta=g.m(Kind.VM), manifest=vm_manifest()),
        VMICreated(meta=g.m(Kind.VMI), manifest=vmi_manifest(), owner_vm_uid="uid-vm1"),
        PodScheduled(
            meta=g.m(Kind.VMI, node="node-1"),
            node="node-1",
            pod_name="virt-launcher-vm1-abcde",
            pod_uid="pod-1",
            manifest=vmi_manifest(),
        ),
        LauncherStarted(meta=g.m(Kind.VMI, node="node-1"), node="node-1", pod_uid="pod-1", pid=42),
        DomainStarted(meta=g.m(Kind.VMI, node="node-1"), node="node-1", domain="default_vm1"),
    )


def test_vmi_phases_follow_the_lifecycle_with_timestamps() -> None:
    g = running_vm(Given())
    vmi = g.cluster.vmis[f"{NS}/vm1"]
    assert vmi.phase == "Running" and vmi.node == "node-1" and vmi.ever_running
    assert [p for p, _ in vmi.transitions] == ["Pending", "Scheduling", "Scheduled", "Running"]
    obj = render_vmi(g.cluster, vmi)
    assert obj["status"]["nodeName"] == "node-1"
    assert obj["status"]["activePods"] == {"pod-1": "node-1"}
    ready = next(c for c in obj["status"]["conditions"] if c["type"] == "Ready")
    assert ready["status"] == "True"
    assert obj["metadata"]["resourceVersion"] == str(g.seq)


@pytest.mark.parametrize(
    ("reason", "expired", "phase"),
    [
        (StopReason.SHUTDOWN, False, "Succeeded"),
        (StopReason.DESTROYED, False, "Succeeded"),
        (StopReason.DESTROYED, True, "Failed"),
        (StopReason.CRASHED, False, "Failed"),
    ],
)
def test_domain_stop_reason_decides_the_final_phase(
    reason: StopReason, expired: bool, phase: str
) -> None:
    g = running_vm(Given())
    g(DomainStopped(meta=g.m(Kind.VMI), reason=reason, grace_period_expired=expired))
    assert g.cluster.vmis[f"{NS}/vm1"].phase == phase


def test_a_launcher_that_cannot_pull_its_image_fails_the_vmi_with_err_image_pull() -> None:
    g = Given()
    g(
        VMCreated(meta=g.m(Kind.VM), manifest=vm_manifest()),
        VMICreated(meta=g.m(Kind.VMI), manifest=vmi_manifest(), owner_vm_uid="uid-vm1"),
        PodScheduled(meta=g.m(Kind.VMI), node="n", pod_name="p", pod_uid="u", manifest={}),
        DomainStopped(
            meta=g.m(Kind.VMI),
            reason=StopReason.FAILED,
            message='ErrImagePull: failed to pull image "quay.io/x/nothing:1": not here',
        ),
    )
    vmi = g.cluster.vmis[f"{NS}/vm1"]
    status = render_vmi(g.cluster, vmi)["status"]
    assert status["phase"] == "Failed" and status["reason"] == "ErrImagePull"
    synchronized = next(c for c in status["conditions"] if c["type"] == "Synchronized")
    assert synchronized == {
        "type": "Synchronized",
        "status": "False",
        "reason": "ErrImagePull",
        "message": 'failed to pull image "quay.io/x/nothing:1": not here',
    }
    assert printable_status(g.cluster, g.cluster.vms[f"{NS}/vm1"], g.t) == "ErrImagePull"


def test_printable_status_precedence() -> None:
    g = Given()
    g(VMCreated(meta=g.m(Kind.VM), manifest=vm_manifest()))
    vm = lambda: g.cluster.vms[f"{NS}/vm1"]  # noqa: E731
    status = lambda: printable_status(g.cluster, vm(), g.t)  # noqa: E731
    assert status() == "Stopped"
    g(VMICreated(meta=g.m(Kind.VMI), manifest=vmi_manifest(), owner_vm_uid="uid-vm1"))
    assert status() == "Starting"
    g(Unschedulable(meta=g.m(Kind.VMI), reason="Unschedulable", message="0/1 nodes"))
    assert status() == "ErrorUnschedulable"
    # as in KubeVirt: the launcher pod exists but cannot be placed
    assert g.cluster.vmis[f"{NS}/vm1"].phase == "Scheduling"
    g(
        PodScheduled(meta=g.m(Kind.VMI), node="n", pod_name="p", pod_uid="u", manifest={}),
        DomainStarted(meta=g.m(Kind.VMI), node="n", domain="d"),
    )
    assert status() == "Running"
    g(DomainPaused(meta=g.m(Kind.VMI)))
    assert status() == "Paused"
    g(VMStopRequested(meta=g.m(Kind.VM), vmi_uid="vmi-1"))
    assert status() == "Stopping"
    g(VMDeleted(meta=g.m(Kind.VM)))
    assert status() == "Terminating"
    g(VMIRemoved(meta=g.m(Kind.VMI)))
    assert f"{NS}/vm1" not in g.cluster.vms  # deleted and nothing left to tear down


def test_crash_loop_backoff_shows_until_retry_time() -> None:
    g = Given()
    g(
        VMCreated(meta=g.m(Kind.VM), manifest=vm_manifest()),
        VMStartFailed(
            meta=g.m(Kind.VM), consecutive_fail_count=2, last_failed_vmi_uid="x", retry_after=2000
        ),
    )
    vm = g.cluster.vms[f"{NS}/vm1"]
    assert printable_status(g.cluster, vm, now=1500) == "CrashLoopBackOff"
    assert printable_status(g.cluster, vm, now=2500) == "Stopped"
    rendered = render_vm(g.cluster, vm, now=1500)
    assert rendered["status"]["startFailure"]["consecutiveFailCount"] == 2
    assert rendered["extraField"] == {"kept": True}


def conditions(obj: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["type"]: c for c in obj["status"]["conditions"]}


def test_only_a_users_or_an_io_errors_pause_gets_kubevirts_paused_condition() -> None:
    g = running_vm(Given())
    key = f"{NS}/vm1"
    g(DomainPaused(meta=g.m(Kind.VMI), reason="PausedByUser"))
    paused = conditions(render_vmi(g.cluster, g.cluster.vmis[key]))["Paused"]
    assert (paused["reason"], paused["message"]) == ("PausedByUser", "VMI was paused by user")
    vm_paused = conditions(render_vm(g.cluster, g.cluster.vms[key], now=g.t))["Paused"]
    assert vm_paused["reason"] == "PausedByUser"
    g(DomainResumed(meta=g.m(Kind.VMI)), DomainPaused(meta=g.m(Kind.VMI), reason="PausedIOError"))
    paused = conditions(render_vmi(g.cluster, g.cluster.vmis[key]))["Paused"]
    assert paused["message"] == "VMI was paused, low-level IO error detected"
    # a pause libvirt cannot name is not the user's
    g(DomainResumed(meta=g.m(Kind.VMI)), DomainPaused(meta=g.m(Kind.VMI), reason="Unknown"))
    assert "Paused" not in conditions(render_vmi(g.cluster, g.cluster.vmis[key]))


def test_a_crash_fails_the_vmi_and_a_sync_failure_is_kubevirts_condition() -> None:
    g = running_vm(Given())
    key = f"{NS}/vm1"
    why = "KVM internal error. Suberror: 1 (emulation failure)"
    g(
        VMIWarning(meta=g.m(Kind.VMI), reason="SyncFailed",
                   message=f"VMI is irrecoverable due to {why}"),
        DomainStopped(meta=g.m(Kind.VMI), reason=StopReason.CRASHED, message=why),
    )  # fmt: skip
    rendered = render_vmi(g.cluster, g.cluster.vmis[key])
    assert rendered["status"]["phase"] == "Failed"
    assert rendered["status"]["reason"] == "Crashed"
    synced = conditions(rendered)["Synchronized"]
    assert (synced["status"], synced["reason"]) == (
        "False",
        "Synchronizing with the Domain failed.",
    )
    assert synced["message"] == f"VMI is irrecoverable due to {why}"
    # other warnings change nothing the VMI shows
    g2 = running_vm(Given())
    g2(VMIWarning(meta=g2.m(Kind.VMI), reason="GuestPanicked", message="GuestPanicked"))
    assert "Synchronized" not in conditions(render_vmi(g2.cluster, g2.cluster.vmis[key]))


def test_vmi_status_changes_bump_the_vm_resource_version() -> None:
    g = running_vm(Given())
    before = g.cluster.vms[f"{NS}/vm1"].resource_version
    version = g.cluster.vms[f"{NS}/vm1"].version
    g(DomainPaused(meta=g.m(Kind.VMI)))
    vm = g.cluster.vms[f"{NS}/vm1"]
    assert vm.resource_version > before
    assert vm.version == version  # the VM aggregate itself did not change: OCC unaffected


def test_successful_migration_moves_the_vmi_and_its_allocation() -> None:
    g = running_vm(Given())
    g(
        NodeJoined(
            meta=g.m(Kind.NODE, "node-2"),
            node="node-2",
            capacity=Resources(cpu_millis=4000, memory_bytes=8 << 30),
        ),
        MigrationRequested(
            meta=g.m(Kind.MIGRATION, "mig1"),
            manifest={"metadata": {"name": "mig1", "namespace": NS}, "spec": {"vmiName": "vm1"}},
        ),
        MigrationScheduled(
            meta=g.m(Kind.MIGRATION, "mig1", node="node-2"),
            vmi_name="vm1",
            vmi_uid="vmi-1",
            source_node="node-1",
            source_pod="virt-launcher-vm1-abcde",
            target_node="node-2",
            target_pod="virt-launcher-vm1-fghij",
            target_pod_uid="pod-2",
            settings=MigrationSettings(),
            manifest=vmi_manifest(),
        ),
    )
    assert node_allocated(g.cluster, "node-2")[1] > 0  # the target holds room meanwhile
    g(MigrationStarted(meta=g.m(Kind.MIGRATION, "mig1")))
    assert printable_status(g.cluster, g.cluster.vms[f"{NS}/vm1"], g.t) == "Migrating"
    g(
        MigrationSucceeded(
            meta=g.m(Kind.MIGRATION, "mig1"), target_node="node-2", target_pod_uid="pod-2"
        ),
        DomainStopped(meta=g.m(Kind.VMI, node="node-1"), reason=StopReason.MIGRATED),
    )
    vmi = g.cluster.vmis[f"{NS}/vm1"]
    assert vmi.node == "node-2" and vmi.phase == "Running"
    assert [v.name for v in g.cluster.vmis_on("node-2")] == ["vm1"]
    assert list(g.cluster.vmis_on("node-1")) == []
    state = render_vmi(g.cluster, vmi)["status"]["migrationState"]
    assert state["completed"] and state["targetNode"] == "node-2"
    assert node_allocated(g.cluster, "node-1") == (0, 0, 0)
    # the target handler reports its domain: pid and type follow, the phase does not move
    g(
        DomainMigratedIn(
            meta=g.m(Kind.VMI, node="node-2"), node="node-2", qemu_pid=777, domain_type="qemu"
        )
    )
    vmi = g.cluster.vmis[f"{NS}/vm1"]
    assert vmi.phase == "Running" and not vmi.paused
    assert [p for p, _ in vmi.transitions] == ["Pending", "Scheduling", "Scheduled", "Running"]
    domain = render_vmi(g.cluster, vmi)["status"][DOMAIN_STATUS_KEY]
    assert domain == {"state": "Running", "type": "qemu", "qemuPid": 777}


def test_vmi_delete_request_then_removal() -> None:
    g = running_vm(Given())
    g(VMIDeleteRequested(meta=g.m(Kind.VMI), grace_period_seconds=5))
    vmi = g.cluster.vmis[f"{NS}/vm1"]
    assert vmi.deletion_requested_at is not None and vmi.grace_period_seconds == 5
    g(VMIRemoved(meta=g.m(Kind.VMI)))
    assert f"{NS}/vm1" not in g.cluster.vmis
    assert g.cluster.vms[f"{NS}/vm1"].vmi_uid == ""


def test_a_vms_ready_condition_is_vmi_not_exists_or_its_vmis() -> None:
    # KubeVirt's syncReadyConditionFromVMI (pkg/virt-controller/watch/vm/vm.go): what
    # Ansible's kubevirt_vm waits on for a stopped VM
    g = Given()
    g(VMCreated(meta=g.m(Kind.VM), manifest=vm_manifest(run_strategy="Halted")))
    stopped = render_vm(g.cluster, g.cluster.vms[f"{NS}/vm1"], now=g.t)["status"]
    assert stopped["conditions"][0] == {
        "type": "Ready", "status": "False", "reason": "VMINotExists",
        "message": "VMI does not exist",
    }  # fmt: skip
    g = running_vm(Given())
    vm = render_vm(g.cluster, g.cluster.vms[f"{NS}/vm1"], now=g.t)["status"]["conditions"][0]
    vmi = render_vmi(g.cluster, g.cluster.vmis[f"{NS}/vm1"])["status"]["conditions"][0]
    assert vm == vmi == {"type": "Ready", "status": "True"}
