"""Kubernetes Events as a fold of the log (projections/kube_events.py): KubeVirt's
reasons, types, messages and sources for what the log records, the correlator's counting
of repeats, the per-object bound and the hour's window, and the records' survival in a
snapshot. Given a log, when it is folded, then these are the Events."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, cast

import pytest
from litestar.testing import TestClient

from events.catalog import (
    DomainStarted,
    DomainStopped,
    Event,
    MigrationRequested,
    MigrationScheduled,
    MigrationSettings,
    MigrationStarted,
    MigrationSucceeded,
    PodScheduled,
    ResourceCreated,
    ResourceStatusChanged,
    StopReason,
    Unschedulable,
    VMCreated,
    VMDeleted,
    VMICreated,
    VMIDeleteRequested,
    VMIWarning,
)
from events.envelope import Stored
from events.meta import Actor, Aggregate, Kind, KindToken, Meta, ResourceKind
from kinds.event import render_core, render_v1, to_v1
from projections import kube_events
from projections.cluster import Cluster
from projections.kube_events import SNAPSHOT_API, KubeEventView
from readside import view_checkpoints
from readside.runner import ProjectionRunner
from readside.watch import Selector, SelectorError
from services.api import table
from services.api.app import create_app
from services.api.service import ApiService

VM_UID, VMI_UID = "vm-uid-1", "vmi-uid-1"
T0 = 1_700_000_000.0


class Log:
    """A log folded as it is appended: each event one second after the last."""

    def __init__(self, runner: ProjectionRunner | None = None) -> None:
        self.cluster = runner.cluster if runner is not None else Cluster(kube_events=True)
        self.fold: Callable[[Stored], object] = (
            runner.fold if runner is not None else self.cluster.apply
        )
        self.seq = 0
        self.t = T0

    def meta(
        self, kind: KindToken, name: str = "vm1", uid: str = "", service: str = "virt-api",
        node: str = "", *, at: float | None = None,
    ) -> Meta:  # fmt: skip
        return Meta(
            event_id=f"e{self.seq + 1}",
            aggregate=Aggregate(kind=kind, namespace="default", name=name, uid=uid),
            occurred_at=self.t if at is None else at,
            correlation_id="c",
            actor=Actor(service=service, node=node),
        )

    def __call__(self, *events: Event) -> Log:
        for ev in events:
            self.seq += 1
            self.fold(Stored(seq=self.seq, subject="s", time=self.t, event=ev))
            self.t += 1.0
        return self

    @property
    def records(self) -> list[KubeEventView]:
        assert self.cluster.kube_events is not None
        return sorted(self.cluster.kube_events.table.values(), key=lambda r: r.created_seq)

    def shown(self) -> list[tuple[str, str, str, str, str]]:
        return [
            (r.involved.kind, r.type, r.reason, r.message, f"{r.component}/{r.host}")
            for r in self.records
        ]


def _vm(name: str = "vm1") -> dict[str, Any]:
    return {
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachine",
        "metadata": {"name": name, "namespace": "default", "uid": VM_UID},
        "spec": {"runStrategy": "Always", "template": {"spec": {"domain": {"devices": {}}}}},
    }


def _vmi(name: str = "vm1", owner: dict[str, Any] | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": "default", "uid": VMI_UID}
    if owner:
        meta["ownerReferences"] = [owner]
    return {"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance", "metadata": meta,
            "spec": {"domain": {"devices": {}}}}  # fmt: skip


VM_OWNER = {"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachine", "name": "vm1",
            "uid": VM_UID, "controller": True}  # fmt: skip


def started(log: Log) -> Log:
    """A VM the controller started on node-1."""
    return log(
        VMCreated(meta=log.meta(Kind.VM, uid=VM_UID), manifest=_vm()),
        VMICreated(
            meta=log.meta(Kind.VMI, uid=VMI_UID, service="virt-controller"),
            manifest=_vmi(owner=VM_OWNER),
            owner_vm_uid=VM_UID,
        ),
        PodScheduled(
            meta=log.meta(Kind.VMI, uid=VMI_UID, service="virt-controller", node="node-1"),
            node="node-1",
            pod_name="virt-launcher-vm1-abcde",
            pod_uid="p1",
            manifest=_vmi(),
        ),
        DomainStarted(
            meta=log.meta(Kind.VMI, uid=VMI_UID, service="virt-handler-node-1", node="node-1"),
            node="node-1",
            domain="default_vm1",
        ),
    )


def test_a_started_vm_has_kubevirts_events_on_the_vm_and_its_vmi() -> None:
    log = started(Log())
    assert log.shown() == [
        ("VirtualMachine", "Normal", "SuccessfulCreate",
         "Started the virtual machine by creating the new virtual machine instance vm1",
         "virt-controller/"),
        ("VirtualMachineInstance", "Normal", "SuccessfulCreate",
         "Created virtual machine pod virt-launcher-vm1-abcde", "virt-controller/"),
        ("VirtualMachineInstance", "Normal", "Created", "VirtualMachineInstance defined.",
         "virt-handler/node-1"),
        ("VirtualMachineInstance", "Normal", "Started", "VirtualMachineInstance started.",
         "virt-handler/node-1"),
    ]  # fmt: skip
    vm_event = render_core(log.cluster, log.records[0], 0.0)
    assert vm_event["involvedObject"] == {
        "kind": "VirtualMachine", "namespace": "default", "name": "vm1", "uid": VM_UID,
        "apiVersion": "kubevirt.io/v1",
    }  # fmt: skip
    assert vm_event["metadata"]["name"].startswith("vm1.")
    assert vm_event["firstTimestamp"] == vm_event["lastTimestamp"] == "2023-11-14T22:13:20Z"
    assert (vm_event["count"], vm_event["source"]) == (1, {"component": "virt-controller"})
    assert render_core(log.cluster, log.records[3], 0.0)["source"] == {
        "component": "virt-handler",
        "host": "node-1",
    }


def _snapshot_kind(kind: str, name: str, spec: dict[str, Any], uid: str = "") -> dict[str, Any]:
    metadata = {"name": name, "namespace": "default", "uid": uid}
    return {"apiVersion": SNAPSHOT_API, "kind": kind, "metadata": metadata, "spec": spec}


def test_snapshots_and_restores_record_what_kubevirts_snapshot_controller_does() -> None:
    log = Log()
    ctl = "virt-controller"
    source = {"apiGroup": "kubevirt.io", "kind": "VirtualMachine", "name": "vm1"}
    done = {"type": "Ready", "status": "True", "reason": "Operation complete"}
    failed = {"type": "Failure", "status": "True", "reason": "VirtualMachineSnapshot nope does not exist"}  # fmt: skip  # noqa: E501
    log(
        ResourceCreated(
            meta=log.meta(ResourceKind.SNAPSHOT, "snap1", uid="snap-uid"),
            manifest=_snapshot_kind(
                "VirtualMachineSnapshot", "snap1", {"source": source}, "snap-uid"
            ),
        ),
        ResourceCreated(
            meta=log.meta(
                ResourceKind.SNAPSHOT_CONTENT, "vmsnapshot-content-snap-uid", service=ctl
            ),
            manifest=_snapshot_kind(
                "VirtualMachineSnapshotContent",
                "vmsnapshot-content-snap-uid",
                {"virtualMachineSnapshotName": "snap1", "source": {}},
            ),
        ),
    )
    for name, snapshot in (("restore1", "snap1"), ("restore2", "nope")):
        spec = {"target": source, "virtualMachineSnapshotName": snapshot}
        log(
            ResourceCreated(
                meta=log.meta(ResourceKind.RESTORE, name, uid=f"{name}-uid"),
                manifest=_snapshot_kind("VirtualMachineRestore", name, spec, f"{name}-uid"),
            ),
            ResourceStatusChanged(
                meta=log.meta(ResourceKind.RESTORE, name, service=ctl), status={"complete": False}
            ),
        )
    log(
        ResourceStatusChanged(
            meta=log.meta(ResourceKind.RESTORE, "restore1", service=ctl),
            status={"complete": True, "conditions": [done]},
        ),
        ResourceStatusChanged(  # said once: the same status again records nothing
            meta=log.meta(ResourceKind.RESTORE, "restore1", service=ctl),
            status={"complete": True, "conditions": [done]},
        ),
        ResourceStatusChanged(
            meta=log.meta(ResourceKind.RESTORE, "restore2", service=ctl),
            status={"complete": False, "conditions": [failed]},
        ),
    )
    c = "virt-controller/"
    assert log.shown() == [
        ("VirtualMachineSnapshot", "Normal", "SuccessfulVirtualMachineSnapshotContentCreate",
         "Successfully created VirtualMachineSnapshotContent vmsnapshot-content-snap-uid", c),
        ("VirtualMachineRestore", "Normal", "VirtualMachineRestoreComplete",
         "Successfully completed VirtualMachineRestore restore1", c),
        ("VirtualMachineRestore", "Warning", "Operation failed",
         "VirtualMachineRestore failed VirtualMachineSnapshot nope does not exist", c),
    ]  # fmt: skip
    assert [r.involved.uid for r in log.records] == ["snap-uid", "restore1-uid", "restore2-uid"]


def test_a_handler_warning_is_a_warning_event_on_the_vmi_from_its_node() -> None:
    log = started(Log())
    n = len(log.records)
    msg = "server error. command SyncVMI failed: the domain refused 'cont'"
    log(
        VMIWarning(
            meta=log.meta(Kind.VMI, uid=VMI_UID, service="virt-handler-node-1", node="node-1"),
            reason="SyncFailed",
            message=msg,
        )
    )
    assert log.shown()[n:] == [
        ("VirtualMachineInstance", "Warning", "SyncFailed", msg, "virt-handler/node-1")
    ]


def test_a_vmi_a_user_created_and_deletes_has_no_controller_events() -> None:
    log = Log()
    log(VMICreated(meta=log.meta(Kind.VMI, uid=VMI_UID), manifest=_vmi()))
    log(VMIDeleteRequested(meta=log.meta(Kind.VMI, uid=VMI_UID), grace_period_seconds=30))
    assert log.shown() == []  # neither created by a controller nor running anywhere


def test_a_stop_by_the_controller_deletes_the_vmi_and_the_handler_shuts_it_down() -> None:
    log = started(Log())
    n = len(log.records)
    log(
        VMIDeleteRequested(
            meta=log.meta(Kind.VMI, uid=VMI_UID, service="virt-controller", node="node-1")
        ),
        DomainStopped(meta=log.meta(Kind.VMI, uid=VMI_UID), reason=StopReason.SHUTDOWN),
    )
    assert log.shown()[n:] == [
        ("VirtualMachine", "Normal", "SuccessfulDelete",
         f"Stopped the virtual machine by deleting the virtual machine instance {VMI_UID}",
         "virt-controller/"),
        ("VirtualMachineInstance", "Normal", "ShuttingDown", "Signaled Graceful Shutdown",
         "virt-handler/node-1"),
        ("VirtualMachineInstance", "Normal", "Stopped",
         "The VirtualMachineInstance was shut down.", "virt-handler/node-1"),
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("reason", "expired", "message", "expected"),
    [
        (StopReason.DESTROYED, False, "", [("Normal", "Stopped")]),
        (StopReason.DESTROYED, True, "", [("Warning", "Stopped")]),
        (StopReason.CRASHED, False, "", [("Warning", "Stopped")]),
        (
            StopReason.FAILED,
            False,
            "virt-launcher failed to start: boom",
            [("Warning", "SyncFailed"), ("Warning", "Stopped")],
        ),
        (StopReason.MIGRATED, False, "", []),
    ],
)
def test_how_a_domain_stopped_decides_the_handlers_events(
    reason: StopReason, expired: bool, message: str, expected: list[tuple[str, str]]
) -> None:
    log = started(Log())
    n = len(log.records)
    stopped = DomainStopped(
        meta=log.meta(Kind.VMI, uid=VMI_UID),
        reason=reason,
        grace_period_expired=expired,
        message=message,
    )
    log(stopped)
    assert [(r.type, r.reason) for r in log.records[n:]] == expected
    if message:
        assert log.records[n].message == message


def test_an_immediate_delete_is_signalled_deletion() -> None:
    log = started(Log())
    log(VMIDeleteRequested(meta=log.meta(Kind.VMI, uid=VMI_UID), grace_period_seconds=0))
    assert log.shown()[-1] == (
        "VirtualMachineInstance", "Normal", "Deleted", "Signaled Deletion", "virt-handler/node-1",
    )  # fmt: skip


def test_repeats_count_on_one_record_as_the_correlator_does() -> None:
    log = Log()
    log(VMICreated(meta=log.meta(Kind.VMI, uid=VMI_UID), manifest=_vmi()))
    for message in ("0/1 nodes are available", "0/1 nodes are available", "0/2 nodes"):
        log(Unschedulable(meta=log.meta(Kind.VMI), reason="Unschedulable", message=message))
    first, other = log.records
    assert (first.reason, first.type, first.component) == (
        "FailedScheduling",
        "Warning",
        "default-scheduler",
    )
    assert (first.count, first.first_at, first.last_at) == (2, T0 + 1, T0 + 2)
    assert first.involved.uid == VMI_UID  # from the view when the event carries none
    assert (other.count, other.message) == (1, "0/2 nodes")
    obj = render_core(log.cluster, first, 0.0)
    assert (obj["count"], obj["metadata"]["resourceVersion"]) == (2, "3")
    v1 = render_v1(log.cluster, first, 0.0)
    assert v1["series"] == {"count": 2, "lastObservedTime": "2023-11-14T22:13:22.000000Z"}
    assert (v1["regarding"]["name"], v1["note"], v1["deprecatedCount"]) == ("vm1", first.message, 2)
    row = table.table(table.EVENT_COLUMNS, [obj], now=T0 + 62)["rows"][0]["cells"]
    assert row[:4] == [
        "60s (x2 over 61s)",
        "Warning",
        "FailedScheduling",
        "virtualmachineinstance/vm1",
    ]


def test_an_object_keeps_at_most_its_bound_of_records_the_oldest_go() -> None:
    log = Log()
    log(VMICreated(meta=log.meta(Kind.VMI, uid=VMI_UID), manifest=_vmi()))
    for i in range(kube_events.PER_OBJECT + 10):
        log(Unschedulable(meta=log.meta(Kind.VMI), reason="Unschedulable", message=f"m{i}"))
    kept = [r.message for r in log.records]
    assert kept == [f"m{i}" for i in range(10, kube_events.PER_OBJECT + 10)]


def test_records_older_than_the_window_of_log_time_are_dropped() -> None:
    log = Log()
    log(VMICreated(meta=log.meta(Kind.VMI, uid=VMI_UID), manifest=_vmi()))
    log(Unschedulable(meta=log.meta(Kind.VMI), reason="Unschedulable", message="early"))
    log.t += kube_events.WINDOW
    log(Unschedulable(meta=log.meta(Kind.VMI), reason="Unschedulable", message="late"))
    assert [r.message for r in log.records] == ["late"]


def test_a_record_stamped_ahead_holds_back_no_other_records_expiry() -> None:
    """A node whose clock runs a day ahead stamps its events a day late: its record waits
    for the window to reach it, every other one goes when the window passes it (a fold in
    log order that stopped at the first record not due kept the whole log's records)."""
    log = Log()
    log(VMICreated(meta=log.meta(Kind.VMI, uid=VMI_UID), manifest=_vmi()))
    ahead = log.t + 86400.0
    log(Unschedulable(meta=log.meta(Kind.VMI, at=ahead), reason="Unschedulable", message="ahead"))
    for i in range(3):
        log(Unschedulable(meta=log.meta(Kind.VMI), reason="Unschedulable", message=f"m{i}"))
        log.t += kube_events.WINDOW
    log(Unschedulable(meta=log.meta(Kind.VMI), reason="Unschedulable", message="last"))
    assert [r.message for r in log.records] == ["ahead", "last"]
    restored = view_checkpoints.decode_views(view_checkpoints.encode_views(log.cluster))
    log.t = ahead + kube_events.WINDOW + 1
    log(Unschedulable(meta=log.meta(Kind.VMI), reason="Unschedulable", message="later"))
    assert [r.message for r in log.records] == ["later"]
    more = Unschedulable(meta=log.meta(Kind.VMI), reason="Unschedulable", message="later")
    restored.apply(Stored(seq=log.seq, subject="s", time=log.t, event=more))
    assert restored.kube_events is not None
    assert [r.message for r in restored.kube_events.table.values()] == ["later"]


def test_the_same_log_folds_to_the_same_records_and_a_snapshot_keeps_them() -> None:
    a, b = started(Log()), started(Log())
    assert a.records == b.records  # names and uids come from the log, not a clock
    again = view_checkpoints.decode_views(view_checkpoints.encode_views(a.cluster))
    assert again.kube_events is not None
    assert sorted(again.kube_events.table.values(), key=lambda r: r.created_seq) == a.records
    # the correlator's index is rebuilt: a repeat counts on the restored record
    more = DomainStarted(meta=a.meta(Kind.VMI, uid=VMI_UID), node="node-1", domain="default_vm1")
    again.apply(Stored(seq=a.seq + 1, subject="s", time=a.t, event=more))
    counts = {r.reason: r.count for r in again.kube_events.table.values()}
    assert (counts["Created"], counts["Started"]) == (2, 2)
    assert (
        view_checkpoints.decode_views(view_checkpoints.encode_views(Cluster())).kube_events is None
    )


def test_a_migration_has_the_controllers_and_the_handlers_events() -> None:
    log = started(Log())
    mig = {"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstanceMigration",
           "metadata": {"name": "mig1", "namespace": "default", "uid": "mig-uid"},
           "spec": {"vmiName": "vm1"}}  # fmt: skip
    n = len(log.records)
    log(
        MigrationRequested(meta=log.meta(Kind.MIGRATION, "mig1", "mig-uid"), manifest=mig),
        MigrationScheduled(
            meta=log.meta(Kind.MIGRATION, "mig1", "mig-uid", "virt-controller", "node-2"),
            vmi_name="vm1",
            vmi_uid=VMI_UID,
            source_node="node-1",
            source_pod="virt-launcher-vm1-abcde",
            target_node="node-2",
            target_pod="virt-launcher-vm1-fghij",
            target_pod_uid="p2",
            settings=MigrationSettings(),
            manifest=_vmi(),
        ),
        MigrationStarted(
            meta=log.meta(Kind.MIGRATION, "mig1", "mig-uid", "virt-handler-node-1", "node-1")
        ),
        MigrationSucceeded(
            meta=log.meta(Kind.MIGRATION, "mig1", "mig-uid", "virt-handler-node-1", "node-1"),
            target_node="node-2",
            target_pod_uid="p2",
        ),
    )
    assert log.shown()[n:] == [
        ("VirtualMachineInstanceMigration", "Normal", "SuccessfulCreate",
         "Created migration target pod virt-launcher-vm1-fghij", "virt-controller/"),
        ("VirtualMachineInstance", "Normal", "Migrating", "VirtualMachineInstance is migrating.",
         "virt-handler/node-1"),
        ("VirtualMachineInstanceMigration", "Normal", "SuccessfulMigration",
         "Source node reported migration succeeded", "virt-controller/"),
        ("VirtualMachineInstance", "Normal", "Migrated",
         "The VirtualMachineInstance migrated to node node-2.", "virt-handler/node-2"),
    ]  # fmt: skip


def test_the_controller_fold_carries_no_records() -> None:
    c = Cluster()
    assert c.kube_events is None and c.table(kube_events.KIND) == {}


def test_events_are_selected_by_the_fields_kubectl_describe_uses() -> None:
    sel = Selector.parse(
        kube_events.KIND,
        "default",
        field_selector="involvedObject.name=vm1,involvedObject.namespace=default,"
        f"involvedObject.kind=VirtualMachine,involvedObject.uid={VM_UID}",
    )
    log = started(Log())
    objs = [render_core(log.cluster, r, 0.0) for r in log.records]
    assert [o["reason"] for o in objs if sel.matches(kube_events.KIND, o)] == ["SuccessfulCreate"]
    # `kubectl events --for vm/vm1` names the apiVersion; a value escapes `,` `=` `\\`
    by_for = Selector.parse(
        kube_events.KIND,
        "default",
        field_selector="involvedObject.kind=VirtualMachine,"
        "involvedObject.apiVersion=kubevirt.io/v1,involvedObject.name=vm1",
    )
    assert [o["reason"] for o in objs if by_for.matches(kube_events.KIND, o)] == [
        "SuccessfulCreate"
    ]
    escaped = Selector.parse(kube_events.KIND, field_selector=r"reason=a\,b\=c,type=Normal")
    assert [r.values for r in escaped.fields] == [("a,b=c",), ("Normal",)]
    with pytest.raises(SelectorError, match=r"field label not supported: \"involvedObject\.name\""):
        Selector.parse(Kind.VM, "default", field_selector="involvedObject.name=vm1")


def test_the_api_serves_an_hour_of_events_read_only_and_watches_new_ones() -> None:
    now = [T0 + 10]
    runner = ProjectionRunner(cast(Any, None), clock=lambda: now[0])
    log = started(Log(runner))
    core, v1 = (
        "/api/v1/namespaces/default/events",
        "/apis/events.k8s.io/v1/namespaces/default/events",
    )
    with TestClient(app=create_app(ApiService(runner, None))) as http:
        listed = http.get(core).json()
        assert (listed["kind"], len(listed["items"])) == ("EventList", 4)
        only_vm = http.get(core, params={"fieldSelector": "involvedObject.kind=VirtualMachine"})
        assert [e["reason"] for e in only_vm.json()["items"]] == ["SuccessfulCreate"]
        bad = http.get(core, params={"fieldSelector": "spec.nodeName=x"})
        assert (bad.status_code, bad.json()["message"]) == (
            400,
            'field label not supported: "spec.nodeName"',
        )
        name = listed["items"][0]["metadata"]["name"]
        assert http.get(f"{core}/{name}").json()["reason"] == "SuccessfulCreate"
        other = http.get(v1).json()
        assert {e["apiVersion"] for e in other["items"]} == {"events.k8s.io/v1"}
        assert http.get("/api/v1/events").json()["items"] == listed["items"]  # all namespaces
        for method, path in (
            ("POST", core),
            ("DELETE", f"{core}/{name}"),
            ("PUT", f"{core}/{name}"),
        ):
            assert http.request(method, path, json={}).status_code == 405
        # events.k8s.io/v1 watches core/v1's changes converted, selected in its own fields
        lines = http.get(v1, params={"watch": "true", "timeoutSeconds": "1",
                                     "fieldSelector": "regarding.kind=VirtualMachine"})  # fmt: skip
        watched = [json.loads(line) for line in lines.text.splitlines()]
        assert [(w["type"], w["object"]["apiVersion"], w["object"]["reason"]) for w in watched] == [
            ("ADDED", "events.k8s.io/v1", "SuccessfulCreate")
        ]
        v1_watch = runner.watch(
            Selector.parse(kube_events.KIND, "default", field_selector="reason=Deleted"),
            runner.last_seq,
            to_v1,
        )

        # a watch from the list's version sees the next events as ADDED, a repeat as MODIFIED
        watcher = runner.watch(Selector(kube_events.KIND, "default"), runner.last_seq)
        log(VMIDeleteRequested(meta=log.meta(Kind.VMI, uid=VMI_UID), grace_period_seconds=0))
        log(VMIDeleteRequested(meta=log.meta(Kind.VMI, uid=VMI_UID), grace_period_seconds=0))
        seen = [w for _ in range(watcher.queue.qsize()) if (w := watcher.queue.get_nowait())]
        assert [(w["type"], w["object"]["reason"], w["object"]["count"]) for w in seen] == [
            ("ADDED", "Deleted", 1),
            ("MODIFIED", "Deleted", 2),
        ]
        converted = [w for _ in range(v1_watch.queue.qsize()) if (w := v1_watch.queue.get_nowait())]
        assert [
            (w["type"], w["object"]["note"], w["object"]["deprecatedCount"]) for w in converted
        ] == [
            ("ADDED", "Signaled Deletion", 1),
            ("MODIFIED", "Signaled Deletion", 2),
        ]
        assert converted[1]["object"]["series"]["count"] == 2

        # the API server's TTL: an hour after their last occurrence, none is listed or got
        now[0] = T0 + kube_events.WINDOW + 2
        assert [e["reason"] for e in http.get(core).json()["items"]] == ["Deleted"]
        assert http.get(f"{core}/{name}").status_code == 404
        now[0] = T0 + kube_events.WINDOW + 10
        assert http.get(core).json()["items"] == []


def test_replica_sets_and_pools_have_their_controllers_events() -> None:
    log = Log()
    rs = {"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstanceReplicaSet",
          "name": "rs1", "uid": "rs-uid", "controller": True}  # fmt: skip
    pool = {"apiVersion": "pool.kubevirt.io/v1alpha1", "kind": "VirtualMachinePool",
            "name": "pool1", "uid": "pool-uid", "controller": True}  # fmt: skip
    vm = _vm("pool1-0")
    vm["metadata"]["ownerReferences"] = [pool]
    log(
        VMICreated(
            meta=log.meta(Kind.VMI, "rs1-abc", VMI_UID, "virt-controller"),
            manifest=_vmi("rs1-abc", owner=rs),
        ),
        VMIDeleteRequested(meta=log.meta(Kind.VMI, "rs1-abc", VMI_UID, "virt-controller")),
        VMCreated(meta=log.meta(Kind.VM, "pool1-0", VM_UID, "virt-controller"), manifest=vm),
        VMDeleted(meta=log.meta(Kind.VM, "pool1-0", VM_UID, "virt-controller")),
    )
    assert [(r.involved.kind, r.involved.name, r.reason, r.message) for r in log.records] == [
        ("VirtualMachineInstanceReplicaSet", "rs1", "SuccessfulCreate",
         "Started the virtual machine by creating the new virtual machine instance rs1-abc"),
        ("VirtualMachineInstanceReplicaSet", "rs1", "SuccessfulDelete",
         f"Stopped the virtual machine by deleting the virtual machine instance {VMI_UID}"),
        ("VirtualMachinePool", "pool1", "SuccessfulCreate", "Created VM default/pool1-0"),
        ("VirtualMachinePool", "pool1", "SuccessfulDelete",
         f"Deleted VM default/pool1-0 with uid {VM_UID} from pool"),
    ]  # fmt: skip
    assert log.records[2].involved.api_version == "pool.kubevirt.io/v1alpha1"


def test_a_restored_fold_drops_the_same_records_as_the_live_one() -> None:
    live = Log()
    live(VMICreated(meta=live.meta(Kind.VMI, uid=VMI_UID), manifest=_vmi()))
    # the first one repeats last: it counted most recently, and was made first
    for message in [*(f"m{i}" for i in range(kube_events.PER_OBJECT)), "m0"]:
        live(Unschedulable(meta=live.meta(Kind.VMI), reason="Unschedulable", message=message))
    restored = view_checkpoints.decode_views(view_checkpoints.encode_views(live.cluster))
    more = Unschedulable(meta=live.meta(Kind.VMI), reason="Unschedulable", message="new")
    for cluster in (live.cluster, restored):
        cluster.apply(Stored(seq=live.seq + 1, subject="s", time=live.t, event=more))
    assert restored.kube_events is not None and live.cluster.kube_events is not None
    assert restored.kube_events.table == live.cluster.kube_events.table
    assert "m0" not in {r.message for r in restored.kube_events.table.values()}
