"""Scripted event logs for the debugging tools: the events the services would append, with
their real id scheme (`<service>/<cause seq>/<n>`), causation and correlation chains, and
actors. Positions are stream sequences when appended, in order, to a fresh stream."""

from __future__ import annotations

from typing import Any

from events import subjects
from events.catalog import (
    DomainPaused,
    DomainResumed,
    DomainStarted,
    DomainStopped,
    Event,
    LauncherExited,
    LauncherStarted,
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
    TargetPrepared,
    TargetPreparing,
    VMCreated,
    VMICreated,
    VMIDeleteRequested,
    VMIFailed,
    VMIPauseRequested,
    VMIRemoved,
    VMIUnpauseRequested,
    VMStartRequested,
    VMStateChangeRequestsCleared,
    VMStopRequested,
)
from events.codec import event_type
from events.envelope import Stored
from events.meta import CLUSTER_SCOPE, Actor, Aggregate, Kind, KindToken, Meta

NS = "default"
T0 = 1_800_000_000.0
GIB = 1024**3


def vm_manifest(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachine",
        "metadata": {"name": name, "namespace": NS, "uid": f"uid-{name}"},
        "spec": {"runStrategy": "Manual", "template": {"spec": {}}},
    }


def vmi_manifest(name: str, uid: str) -> dict[str, Any]:
    return {
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachineInstance",
        "metadata": {"name": name, "namespace": NS, "uid": uid},
        "spec": {"domain": {"resources": {"requests": {"memory": "1Gi", "cpu": "1"}}}},
    }


class Script:
    """Appends events in order; `emit` returns the new event's position (= its seq). An
    effect names its cause by id and by sequence (`causation_seq`), as the services write
    them; `causation_seqs=False` writes them as before that field existed (id only)."""

    def __init__(self, t0: float = T0, *, causation_seqs: bool = True) -> None:
        self.events: list[Event] = []
        self.t = t0
        self.causation_seqs = causation_seqs
        self._outputs: dict[tuple[str, int], int] = {}
        self._requests = 0

    def emit(
        self,
        cls: type[Event],
        kind: KindToken,
        name: str,
        *,
        by: str,
        on: str = "",
        cause: int | None = None,
        dt: float = 0.01,
        route: str = "",
        event_id: str | None = None,
        **fields: Any,
    ) -> int:
        self.t += dt
        ns = CLUSTER_SCOPE if kind in (Kind.NODE, Kind.POLICY) else NS
        if cause is not None:
            c = self.events[cause - 1].meta
            n = self._outputs.get((by, cause), 0)
            self._outputs[(by, cause)] = n + 1
            eid = event_id or f"{by}/{cause}/{n}"
            corr, causation = c.correlation_id, c.event_id
        else:
            self._requests += by == "api"
            eid = event_id or (
                f"api/req-{self._requests}/0" if by == "api" else f"{by}/{kind}/{name}/boot"
            )
            corr, causation = (f"req-{self._requests}" if by == "api" else eid), ""
        meta = Meta(
            event_id=eid,
            aggregate=Aggregate(kind=kind, namespace=ns, name=name),
            occurred_at=self.t,
            correlation_id=corr,
            causation_id=causation,
            causation_seq=cause if cause is not None and self.causation_seqs else 0,
            actor=Actor(service=by, node=on),
            node=route,
        )
        self.events.append(cls(meta=meta, **fields))
        return len(self.events)

    def stored(self) -> list[Stored]:
        """The events as a fresh stream would store them (server time = occurred_at)."""
        out = []
        for i, ev in enumerate(self.events, start=1):
            subj = subjects.event_subject(ev.meta.aggregate, event_type(ev), ev.meta.node)
            out.append(Stored(seq=i, subject=subj, time=ev.meta.occurred_at, event=ev))
        return out


SLOW_HOP = 3.0  # the target handler takes this long to prepare (TargetPreparing→Prepared)


def lifecycle() -> Script:
    """create, start, pause, unpause, migrate (a slow target), stop."""
    s = Script()
    cap = Resources(cpu_millis=4000, memory_bytes=8 * GIB)
    for node in ("node-1", "node-2"):
        s.emit(NodeJoined, Kind.NODE, node, by="handler", on=node, node=node, capacity=cap)
    s.emit(VMCreated, Kind.VM, "vm1", by="api", manifest=vm_manifest("vm1"))  # 3
    start = s.emit(VMStartRequested, Kind.VM, "vm1", by="api")  # 4
    vmi = s.emit(
        VMICreated,
        Kind.VMI,
        "vm1",
        by="controller",
        cause=start,
        manifest=vmi_manifest("vm1", "vmi-1"),
        owner_vm_uid="uid-vm1",
    )  # 5
    s.emit(VMStateChangeRequestsCleared, Kind.VM, "vm1", by="controller", cause=start)  # 6
    pod = s.emit(
        PodScheduled,
        Kind.VMI,
        "vm1",
        by="controller",
        cause=vmi,
        route="node-1",
        node="node-1",
        pod_name="virt-launcher-vm1-abcde",
        pod_uid="pod-1",
        manifest=vmi_manifest("vm1", "vmi-1"),
    )  # 7
    launched = s.emit(
        LauncherStarted,
        Kind.VMI,
        "vm1",
        by="handler",
        on="node-1",
        cause=pod,
        route="node-1",
        node="node-1",
        pod_uid="pod-1",
        pid=4242,
    )  # 8
    s.emit(
        DomainStarted,
        Kind.VMI,
        "vm1",
        by="handler",
        on="node-1",
        cause=launched,
        route="node-1",
        node="node-1",
        domain="default_vm1",
    )  # 9
    pause = s.emit(VMIPauseRequested, Kind.VMI, "vm1", by="api", route="node-1", dt=1.0)  # 10
    s.emit(DomainPaused, Kind.VMI, "vm1", by="handler", on="node-1", cause=pause, route="node-1")
    unpause = s.emit(VMIUnpauseRequested, Kind.VMI, "vm1", by="api", route="node-1", dt=1.0)
    s.emit(
        DomainResumed, Kind.VMI, "vm1", by="handler", on="node-1", cause=unpause, route="node-1"
    )  # 13
    mig_manifest = {
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachineInstanceMigration",
        "metadata": {"name": "mig1", "namespace": NS, "uid": "mig-uid-1"},
        "spec": {"vmiName": "vm1"},
    }
    req = s.emit(
        MigrationRequested, Kind.MIGRATION, "mig1", by="api", dt=1.0, manifest=mig_manifest
    )  # 14
    sched = s.emit(
        MigrationScheduling,
        Kind.MIGRATION,
        "mig1",
        by="controller",
        cause=req,
        vmi_uid="vmi-1",
        source_node="node-1",
        source_pod="virt-launcher-vm1-abcde",
    )  # 15
    scheduled = s.emit(
        MigrationScheduled,
        Kind.MIGRATION,
        "mig1",
        by="controller",
        cause=sched,
        route="node-2",
        vmi_name="vm1",
        vmi_uid="vmi-1",
        source_node="node-1",
        source_pod="virt-launcher-vm1-abcde",
        target_node="node-2",
        target_pod="virt-launcher-vm1-fghij",
        target_pod_uid="pod-2",
        settings=MigrationSettings(),
        manifest=vmi_manifest("vm1", "vmi-1"),
    )  # 16
    preparing = s.emit(
        TargetPreparing,
        Kind.MIGRATION,
        "mig1",
        by="handler",
        on="node-2",
        cause=scheduled,
        route="node-2",
        target_node="node-2",
    )  # 17
    prepared = s.emit(
        TargetPrepared,
        Kind.MIGRATION,
        "mig1",
        by="handler",
        on="node-2",
        cause=preparing,
        route="node-1",
        dt=SLOW_HOP,
        target_node="node-2",
        target_address="127.0.0.1:49152",
        target_pod_uid="pod-2",
    )  # 18
    started = s.emit(
        MigrationStarted, Kind.MIGRATION, "mig1", by="handler", on="node-1", cause=prepared
    )  # 19
    s.emit(
        MigrationSucceeded,
        Kind.MIGRATION,
        "mig1",
        by="handler",
        on="node-1",
        cause=started,
        dt=0.2,
        target_node="node-2",
        target_pod_uid="pod-2",
    )  # 20
    stop = s.emit(VMStopRequested, Kind.VM, "vm1", by="api", dt=1.0, vmi_uid="vmi-1")  # 21
    delete = s.emit(
        VMIDeleteRequested, Kind.VMI, "vm1", by="controller", cause=stop, route="node-2"
    )  # 22
    s.emit(VMStateChangeRequestsCleared, Kind.VM, "vm1", by="controller", cause=stop)  # 23
    stopped = s.emit(
        DomainStopped,
        Kind.VMI,
        "vm1",
        by="handler",
        on="node-2",
        cause=delete,
        route="node-2",
        dt=0.5,
        reason=StopReason.DESTROYED,
    )  # 24
    exited = s.emit(
        LauncherExited,
        Kind.VMI,
        "vm1",
        by="handler",
        on="node-2",
        cause=stopped,
        route="node-2",
        node="node-2",
        pod_uid="pod-2",
    )  # 25
    s.emit(VMIRemoved, Kind.VMI, "vm1", by="controller", cause=exited)  # 26
    return s


# What `virtstream replay vm/default/vm1` must show for the VM's printableStatus.
VM_STATUS_AFTER = {
    3: "Stopped",
    5: "Starting",
    9: "Running",
    11: "Paused",
    13: "Running",
    15: "Migrating",
    20: "Running",
    21: "Stopping",
    24: "Stopped",
}


def node_failure(*, linked: bool = True) -> Script:
    """A VMI on node-3 whose handler stops heartbeating: NodeUnresponsive (a timer decision:
    no cause), then VMIFailed(NodeUnresponsive), caused by it when `linked`, else emitted
    by a timer too (then `why` must infer the link)."""
    s = Script()
    cap = Resources(cpu_millis=4000, memory_bytes=8 * GIB)
    s.emit(NodeJoined, Kind.NODE, "node-3", by="handler", on="node-3", node="node-3", capacity=cap)
    created = s.emit(
        VMICreated, Kind.VMI, "vmi2", by="api", manifest=vmi_manifest("vmi2", "vmi-2")
    )  # 2
    pod = s.emit(
        PodScheduled,
        Kind.VMI,
        "vmi2",
        by="controller",
        cause=created,
        route="node-3",
        node="node-3",
        pod_name="virt-launcher-vmi2-xyz",
        pod_uid="pod-3",
        manifest=vmi_manifest("vmi2", "vmi-2"),
    )
    launched = s.emit(
        LauncherStarted,
        Kind.VMI,
        "vmi2",
        by="handler",
        on="node-3",
        cause=pod,
        route="node-3",
        node="node-3",
        pod_uid="pod-3",
        pid=7,
    )
    s.emit(
        DomainStarted,
        Kind.VMI,
        "vmi2",
        by="handler",
        on="node-3",
        cause=launched,
        route="node-3",
        node="node-3",
        domain="default_vmi2",
    )  # 5
    last_heartbeat = s.t + 10.0
    unresponsive = s.emit(
        NodeUnresponsive,
        Kind.NODE,
        "node-3",
        by="controller",
        dt=60.0,
        event_id=f"controller/unresponsive/node-3/{last_heartbeat:.0f}",
        last_heartbeat=last_heartbeat,
    )  # 6
    s.emit(
        VMIFailed,
        Kind.VMI,
        "vmi2",
        by="controller",
        cause=unresponsive if linked else None,
        event_id=None if linked else "controller/vmi-failed/vmi2",
        route="node-3",
        reason="NodeUnresponsive",
        message="virt-handler is not responsive, marking node as unresponsive",
    )  # 7
    return s
