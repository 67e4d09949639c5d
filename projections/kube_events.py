"""Kubernetes Events as a projection of the log: what KubeVirt's components would have
recorded (reason, type, message, source) for each event the log holds, folded into
core/v1 Event records with the API server's aggregation of repeats.

Pure. `occurrences(stored, cluster)` derives the Kubernetes events one log event stands for,
reading the cluster as it was before that event (a VMI's owner, a migration's VMI);
`KubeEvents.apply` records them. A repeat of the same event (same object, source, type,
reason and message) counts on the first record (`count`, `lastTimestamp`), as client-go's
event correlator does. Two bounds keep the fold's cost independent of the log's age:
`PER_OBJECT` records per involved object (the oldest go first) and `WINDOW`, the API
server's event TTL: a record whose last occurrence is older than an hour of log time is
dropped. The log keeps every event; the records are rebuilt from it on demand."""

from __future__ import annotations

import heapq
from collections.abc import Mapping
from typing import Any, Protocol, assert_never

import msgspec

from events.catalog import (
    AnyEvent,
    DomainMigratedIn,
    DomainPaused,
    DomainResumed,
    DomainSoftRebooted,
    DomainStarted,
    DomainStopped,
    Event,
    GuestAgentChanged,
    GuestInterfacesChanged,
    ImportFinished,
    ImportProgressed,
    ImportRequested,
    LauncherExited,
    LauncherStarted,
    MetadataChanged,
    MigrationAborted,
    MigrationAbortRequested,
    MigrationFailed,
    MigrationPending,
    MigrationProgressed,
    MigrationRequested,
    MigrationScheduled,
    MigrationScheduling,
    MigrationStarted,
    MigrationSucceeded,
    NodeCordoned,
    NodeDeleted,
    NodeDrainRequested,
    NodeJoined,
    NodeMetadataChanged,
    NodeResponsive,
    NodeTaintsChanged,
    NodeUncordoned,
    NodeUnresponsive,
    PodScheduled,
    PolicyCreated,
    PolicyDeleted,
    PolicyUpdated,
    ResourceCreated,
    ResourceDeleted,
    ResourceStatusChanged,
    ResourceUpdated,
    StopReason,
    TargetPrepared,
    TargetPreparing,
    Unschedulable,
    UploadReady,
    UploadReceived,
    VMCreated,
    VMDeleted,
    VMICreated,
    VMICreateFailed,
    VMIDeleteRequested,
    VMIEvictionBlocked,
    VMIFailed,
    VMIPauseRequested,
    VMIRemoved,
    VMISoftRebootRequested,
    VMIUnpauseRequested,
    VMIVolumeAdded,
    VMIVolumeRemoved,
    VMIWarning,
    VMRestartRequested,
    VMRevisionRecorded,
    VMRunStrategyChanged,
    VMStartFailed,
    VMStartFailureCleared,
    VMStartRequested,
    VMStateChangeRequestsCleared,
    VMStopRequested,
    VMUpdated,
    VolumeAttached,
    VolumeDetached,
    VolumeReclaimed,
    VolumeReclaimRequested,
    VolumesCopied,
    VolumesCopyRequested,
)
from events.envelope import Stored
from events.meta import Aggregate, ResourceKind
from projections.views import MigrationView, VMIView, VMView


class FoldReader(Protocol):
    """What the derivation reads of the fold (`projections.cluster.Cluster`, which folds
    this projection and so is not imported here)."""

    vms: dict[str, VMView]
    vmis: dict[str, VMIView]
    migrations: dict[str, MigrationView]

    def table(self, kind: str) -> Mapping[str, Any]: ...


#: the kind token the records are served under (no aggregate has it: nothing is appended)
KIND = "event"
#: records kept per involved object; the oldest go first (kubectl describe shows them all)
PER_OBJECT = 50
#: the API server's event TTL (`--event-ttl`, 1h): a record not seen again for this long
#: (log time) is dropped, and the api lists none older (readside/runner.py)
WINDOW = 3600.0
#: the namespace events of cluster-scoped objects (nodes) are recorded in, as client-go does
DEFAULT_NAMESPACE = "default"

NORMAL, WARNING = "Normal", "Warning"
CONTROLLER, HANDLER, SCHEDULER = "virt-controller", "virt-handler", "default-scheduler"
KUBEVIRT = "kubevirt.io/v1"
CDI_V1BETA1, CDI_CONTROLLER = "cdi.kubevirt.io/v1beta1", "datavolume-import-controller"
CDI_UPLOAD, CDI_UPLOAD_PVC = "datavolume-upload-controller", "upload-controller"
PV_CONTROLLER = "persistentvolume-controller"
STARTED_BY_CREATING = "Started the virtual machine by creating the new virtual machine instance"
STOPPED_BY_DELETING = "Stopped the virtual machine by deleting the virtual machine instance"

# The fields the API server selects events by (core/v1; events.k8s.io/v1's names for the
# same values are accepted too, as its conversion of field labels does).
FIELDS = (
    "metadata.name",
    "metadata.namespace",
    "involvedObject.kind",
    "involvedObject.namespace",
    "involvedObject.name",
    "involvedObject.uid",
    "involvedObject.apiVersion",
    "involvedObject.resourceVersion",
    "involvedObject.fieldPath",
    "reason",
    "source",
    "type",
    "reportingComponent",
    "regarding.kind",
    "regarding.namespace",
    "regarding.name",
    "regarding.uid",
    "regarding.apiVersion",
    "regarding.resourceVersion",
    "regarding.fieldPath",
    "reportingController",
)
#: a field label that is no path of the object: where its value is, in either version
FIELD_PATHS = {"source": ("source.component", "deprecatedSource.component")}

# a record's uid: this prefix and its ordinal (unique in the stream, from the log)
_UID_PREFIX = "6b756265-6576-4e74-8000"


class InvolvedObject(msgspec.Struct, frozen=True):
    kind: str
    namespace: str
    name: str
    uid: str
    api_version: str


class Occurrence(msgspec.Struct, frozen=True):
    """One Kubernetes event a log event stands for, before aggregation."""

    involved: InvolvedObject
    type: str
    reason: str
    message: str
    component: str
    host: str = ""


class KubeEventView(msgspec.Struct, frozen=True, kw_only=True):
    """One Event record: its first occurrence and the repeats counted on it."""

    namespace: str
    name: str
    ordinal: int  # created_seq * 16 + its place among its log event's notes: the uid's
    involved: InvolvedObject
    type: str
    reason: str
    message: str
    component: str
    host: str
    first_at: float
    last_at: float
    count: int
    created_seq: int  # the sequence that created the record (metadata.creationTimestamp's)
    resource_version: int  # the last sequence that counted on it
    version: int  # the same (a view's version; nothing appends to a record)

    @property
    def uid(self) -> str:
        return f"{_UID_PREFIX}-{self.ordinal:012x}"


Signature = tuple[str, str, str, str, str, str, str, str]


def _signature(n: Occurrence) -> Signature:
    o = n.involved
    return (o.uid, o.kind, o.name, n.type, n.reason, n.message, n.component, n.host)


# ------------------------------------------------------------ involved objects
def _vmi(namespace: str, name: str, uid: str) -> InvolvedObject:
    return InvolvedObject("VirtualMachineInstance", namespace, name, uid, KUBEVIRT)


def _uploads(agg: Aggregate, cluster: FoldReader) -> bool:
    """The DataVolume takes an upload (its source is `upload`)."""
    view = cluster.table(agg.kind).get(f"{agg.namespace}/{agg.name}")
    spec = getattr(view, "spec", None) if view is not None else None
    return isinstance(spec, dict) and "upload" in (spec.get("source") or {})


def _of(agg: Aggregate, kind: str, api_version: str, cluster: FoldReader) -> InvolvedObject:
    uid = agg.uid
    if not uid:
        view = cluster.table(agg.kind).get(f"{agg.namespace}/{agg.name}")
        uid = getattr(view, "uid", "") if view is not None else ""
    return InvolvedObject(kind, agg.namespace, agg.name, uid, api_version)


def _controller_owner(manifest: dict[str, Any], namespace: str) -> InvolvedObject | None:
    for ref in (manifest.get("metadata") or {}).get("ownerReferences") or ():
        if isinstance(ref, dict) and ref.get("controller"):
            return InvolvedObject(
                str(ref.get("kind", "")),
                namespace,
                str(ref.get("name", "")),
                str(ref.get("uid", "")),
                str(ref.get("apiVersion", "")),
            )
    return None


def _by_controller(ev: Event) -> bool:
    return ev.meta.actor.service == CONTROLLER


# ------------------------------------------------------------------ derivation
def occurrences(s: Stored, cluster: FoldReader) -> list[Occurrence]:
    """The Kubernetes events `s` stands for, with KubeVirt's reasons and messages
    (pkg/virt-controller/watch, pkg/virt-handler); `cluster` is the fold before `s`."""
    ev = s.event
    if not isinstance(ev, AnyEvent):
        return []
    agg = ev.meta.aggregate
    k = f"{agg.namespace}/{agg.name}"
    match ev:
        # ------------------------------------------------ the VM and replica set controllers
        case VMICreated(manifest=manifest) if _by_controller(ev):
            owner = _controller_owner(manifest, agg.namespace)
            if owner is None:
                return []
            msg = f"{STARTED_BY_CREATING} {agg.name}"
            return [Occurrence(owner, NORMAL, "SuccessfulCreate", msg, CONTROLLER)]
        case VMICreateFailed(message=message):
            me = InvolvedObject("VirtualMachine", agg.namespace, agg.name, agg.uid, KUBEVIRT)
            msg = f"Error creating virtual machine instance: {message}"
            return [Occurrence(me, WARNING, "FailedCreate", msg, CONTROLLER)]
        case VMIDeleteRequested(grace_period_seconds=grace):
            vmi = cluster.vmis.get(k)
            if vmi is None:
                return []
            out = []
            owner = _controller_owner(vmi.manifest, agg.namespace)
            if owner is not None and _by_controller(ev):
                msg = f"{STOPPED_BY_DELETING} {vmi.uid}"
                out.append(Occurrence(owner, NORMAL, "SuccessfulDelete", msg, CONTROLLER))
            if vmi.node and vmi.phase in ("Scheduled", "Running"):
                me = _vmi(agg.namespace, agg.name, vmi.uid)
                if grace is None:  # the VMI's own grace period (KubeVirt's default: 30 s)
                    grace = (vmi.manifest.get("spec") or {}).get("terminationGracePeriodSeconds")
                if grace == 0:
                    out.append(
                        Occurrence(me, NORMAL, "Deleted", "Signaled Deletion", HANDLER, vmi.node)
                    )
                else:
                    msg = "Signaled Graceful Shutdown"
                    out.append(Occurrence(me, NORMAL, "ShuttingDown", msg, HANDLER, vmi.node))
            return out
        case VMCreated(manifest=manifest) if _by_controller(ev):
            owner = _controller_owner(manifest, agg.namespace)
            if owner is None or owner.kind != "VirtualMachinePool":
                return []
            msg = f"Created VM {agg.namespace}/{agg.name}"
            return [Occurrence(owner, NORMAL, "SuccessfulCreate", msg, CONTROLLER)]
        case VMDeleted() if _by_controller(ev):
            vm = cluster.vms.get(k)
            owner = _controller_owner(vm.manifest, agg.namespace) if vm is not None else None
            if vm is None or owner is None or owner.kind != "VirtualMachinePool":
                return []
            msg = f"Deleted VM {agg.namespace}/{agg.name} with uid {vm.uid} from pool"
            return [Occurrence(owner, NORMAL, "SuccessfulDelete", msg, CONTROLLER)]
        # ------------------------------------------------------- the VMI controller
        case PodScheduled(pod_name=pod):
            me = _of(agg, "VirtualMachineInstance", KUBEVIRT, cluster)
            msg = f"Created virtual machine pod {pod}"
            return [Occurrence(me, NORMAL, "SuccessfulCreate", msg, CONTROLLER)]
        case Unschedulable(message=message):
            # the launcher pod's FailedScheduling, recorded on the VMI (no pods are served)
            me = _of(agg, "VirtualMachineInstance", KUBEVIRT, cluster)
            return [Occurrence(me, WARNING, "FailedScheduling", message, SCHEDULER)]
        case VMIFailed(reason=reason, message=message):
            vmi = cluster.vmis.get(k)
            me = _of(agg, "VirtualMachineInstance", KUBEVIRT, cluster)
            if reason == "NodeUnresponsive":
                node = vmi.node if vmi is not None else ""
                msg = f"virt-handler on node {node} is not responsive, marking VMI as failed"
                return [Occurrence(me, NORMAL, reason, msg, CONTROLLER)]
            return [Occurrence(me, WARNING, reason, message or reason, CONTROLLER)]
        case VMIEvictionBlocked(node=node, message=message):
            me = _of(agg, "VirtualMachineInstance", KUBEVIRT, cluster)
            msg = f"EvictionStrategy is set but vmi is not migratable; {message}"
            return [Occurrence(me, WARNING, "Migrated", msg, HANDLER, node)]
        # ------------------------------------------------------ CDI's importer
        case ImportFinished(error=error) if agg.kind == ResourceKind.PVC:
            me = InvolvedObject("PersistentVolumeClaim", agg.namespace, agg.name, agg.uid, "v1")
            if error:  # CDI's upload controller on a claim of its own
                return [Occurrence(me, WARNING, "Error", error, CDI_UPLOAD_PVC, ev.meta.node)]
            return [Occurrence(me, NORMAL, "UploadSucceeded", "Upload Successful",
                               CDI_UPLOAD_PVC, ev.meta.node)]  # fmt: skip
        case ImportRequested() | UploadReady() if agg.kind == ResourceKind.PVC:
            return []
        case ImportRequested(claim=claim, source=source) if "upload" in source:
            me = _of(agg, "DataVolume", CDI_V1BETA1, cluster)
            msg = f"Upload into {claim} scheduled"
            return [Occurrence(me, NORMAL, "UploadScheduled", msg, CDI_UPLOAD)]
        case ImportRequested(claim=claim):
            me = _of(agg, "DataVolume", CDI_V1BETA1, cluster)
            msg = f"Import into {claim} scheduled"
            return [Occurrence(me, NORMAL, "ImportScheduled", msg, CDI_CONTROLLER)]
        case UploadReady():
            me = _of(agg, "DataVolume", CDI_V1BETA1, cluster)
            msg = f"Upload into {agg.name} ready"
            return [Occurrence(me, NORMAL, "UploadReady", msg, CDI_UPLOAD, ev.meta.node)]
        case ImportFinished(error=error) if _uploads(agg, cluster):
            me = _of(agg, "DataVolume", CDI_V1BETA1, cluster)
            if error:
                msg = f"Upload into {agg.name} failed: {error}"
                return [Occurrence(me, WARNING, "UploadFailed", msg, CDI_UPLOAD, ev.meta.node)]
            msg = f"Successfully uploaded into {agg.name}"
            return [Occurrence(me, NORMAL, "UploadSucceeded", msg, CDI_UPLOAD, ev.meta.node)]
        case ImportProgressed(progress=progress):
            me = _of(agg, "DataVolume", CDI_V1BETA1, cluster)
            msg = f"Import into {agg.name} in progress: {progress}"
            return [Occurrence(me, NORMAL, "ImportInProgress", msg, CDI_CONTROLLER, ev.meta.node)]
        case ImportFinished(error=error):
            me = _of(agg, "DataVolume", CDI_V1BETA1, cluster)
            if error:
                return [Occurrence(me, WARNING, "Error", error, CDI_CONTROLLER, ev.meta.node)]
            msg = f"Successfully imported into PVC {agg.name}"
            return [Occurrence(me, NORMAL, "ImportSucceeded", msg, CDI_CONTROLLER, ev.meta.node)]
        # --------------------------------------------------------- the volume deleter
        case VolumeReclaimed(error=error) if error:
            me = InvolvedObject("PersistentVolume", "", agg.name, agg.uid, "v1")
            return [Occurrence(me, WARNING, "VolumeFailedDelete", error, PV_CONTROLLER)]
        # ------------------------------------------------------------- the handler
        case DomainStarted(node=node):
            me = _of(agg, "VirtualMachineInstance", KUBEVIRT, cluster)
            return [
                Occurrence(me, NORMAL, "Created", "VirtualMachineInstance defined.", HANDLER, node),
                Occurrence(me, NORMAL, "Started", "VirtualMachineInstance started.", HANDLER, node),
            ]
        case DomainPaused(reason=reason) if reason == "PausedByUser":
            return _on_node(agg, cluster, NORMAL, "Paused", "VirtualMachineInstance paused")
        case DomainResumed():
            return _on_node(agg, cluster, NORMAL, "Unpaused", "VirtualMachineInstance unpaused")
        case DomainSoftRebooted():
            msg = "VirtualMachineInstance soft rebooted"
            return _on_node(agg, cluster, NORMAL, "SoftRebooted", msg)
        case DomainStopped(reason=reason, grace_period_expired=expired, message=message):
            return _stopped(agg, cluster, reason, expired, message)
        # ---------------------------------------------------------------- migrations
        case MigrationScheduled(target_pod=pod):
            me = _of(agg, "VirtualMachineInstanceMigration", KUBEVIRT, cluster)
            msg = f"Created migration target pod {pod}"
            return [Occurrence(me, NORMAL, "SuccessfulCreate", msg, CONTROLLER)]
        case TargetPrepared(target_node=node):
            return _on_migrating_vmi(
                agg,
                cluster,
                "PreparingTarget",
                "VirtualMachineInstance Migration Target Prepared.",
                node,
            )
        case MigrationStarted():
            msg = "VirtualMachineInstance is migrating."
            return _on_migrating_vmi(agg, cluster, "Migrating", msg, ev.meta.actor.node)
        case MigrationAborted():
            msg = "VirtualMachineInstance is aborting migration."
            return _on_migrating_vmi(agg, cluster, "Migrating", msg, ev.meta.actor.node)
        case MigrationSucceeded(target_node=node):
            me = _of(agg, "VirtualMachineInstanceMigration", KUBEVIRT, cluster)
            done = "Source node reported migration succeeded"
            out = [Occurrence(me, NORMAL, "SuccessfulMigration", done, CONTROLLER)]
            msg = f"The VirtualMachineInstance migrated to node {node}."
            return out + _on_migrating_vmi(agg, cluster, "Migrated", msg, node)
        case MigrationFailed(reason=reason, message=message):
            me = _of(agg, "VirtualMachineInstanceMigration", KUBEVIRT, cluster)
            why = message or reason
            out = [Occurrence(me, WARNING, "FailedMigration", why, CONTROLLER)]
            mig = cluster.migrations.get(k)
            if mig is not None and mig.source_node:  # it had begun: the handler's word on the VMI
                msg = f"VirtualMachineInstance migration uid {mig.uid} failed. reason:{why}"
                vmi = cluster.vmis.get(f"{agg.namespace}/{mig.vmi_name}")
                if vmi is not None:
                    me = _vmi(agg.namespace, vmi.name, vmi.uid)
                    out.append(Occurrence(me, WARNING, "Migrated", msg, HANDLER, mig.source_node))
            return out
        case MigrationAbortRequested():
            me = _of(agg, "VirtualMachineInstanceMigration", KUBEVIRT, cluster)
            msg = "Migration is ready to be canceled by virt-handler."
            return [Occurrence(me, NORMAL, "SuccessfulAbortMigration", msg, CONTROLLER)]
        case VMIWarning(reason=reason, message=message):  # the handler's recorder
            return _on_node(agg, cluster, WARNING, reason, message)
        # -------------------------------------------------------------------- clones
        case ResourceCreated(manifest=manifest) if _by_controller(ev) and agg.kind in (
            ResourceKind.SNAPSHOT,
            ResourceKind.RESTORE,
        ):
            owner = _controller_owner(manifest, agg.namespace)
            if owner is None or owner.kind != "VirtualMachineClone":
                return []
            what = "snapshot" if agg.kind == ResourceKind.SNAPSHOT else "restore"
            msg = f"created {what} {agg.name} for clone {owner.name}"
            return [Occurrence(owner, NORMAL, f"{what.capitalize()}Created", msg, CONTROLLER)]
        case ResourceStatusChanged(status=status) if agg.kind == ResourceKind.CLONE:
            return _clone(agg, cluster, status)
        # ------------------------------------------------------- snapshots and restores
        case ResourceCreated(manifest=manifest) if _by_controller(ev) and (
            agg.kind == ResourceKind.SNAPSHOT_CONTENT
        ):
            return _content_created(agg, cluster, manifest)
        case ResourceStatusChanged(status=status) if agg.kind == ResourceKind.RESTORE:
            return _restore(agg, cluster, status)
        # --------------------------------------------------------------------- nodes
        case NodeUnresponsive(message=message):
            it = InvolvedObject("Node", "", agg.name, agg.name, "v1")
            return [Occurrence(it, NORMAL, "NodeUnresponsive", message, CONTROLLER)]
        case (
            VMUpdated()
            | VMCreated()
            | VMDeleted()
            | VMStartRequested()
            | VMStopRequested()
            | VMRestartRequested()
            | VMRunStrategyChanged()
            | VMStartFailed()
            | VMStartFailureCleared()
            | VMStateChangeRequestsCleared()
            | VMRevisionRecorded()
            | VMICreated()
            | VMIPauseRequested()
            | VMIUnpauseRequested()
            | VMISoftRebootRequested()
            | VMIRemoved()
            | LauncherStarted()
            | LauncherExited()
            | DomainMigratedIn()
            | DomainPaused()
            | MigrationRequested()
            | MigrationPending()
            | MigrationScheduling()
            | TargetPreparing()
            | MigrationProgressed()
            | NodeJoined()
            | NodeCordoned()
            | NodeUncordoned()
            | NodeDrainRequested()
            | NodeTaintsChanged()
            | NodeMetadataChanged()
            | NodeResponsive()
            | NodeDeleted()
            | PolicyCreated()
            | PolicyUpdated()
            | PolicyDeleted()
            | ResourceCreated()
            | ResourceUpdated()
            | ResourceStatusChanged()
            | ResourceDeleted()
            | VolumesCopyRequested()
            | VolumesCopied()
            | VMIVolumeAdded()
            | VMIVolumeRemoved()
            | VolumeAttached()
            | VolumeDetached()
            | GuestAgentChanged()
            | GuestInterfacesChanged()
            | MetadataChanged()
            | VolumeReclaimRequested()
            | VolumeReclaimed()
            | UploadReceived()
        ):
            return []
        case _:
            assert_never(ev)


SNAPSHOT_API = "snapshot.kubevirt.io/v1beta1"


def _content_created(
    agg: Aggregate, cluster: FoldReader, manifest: dict[str, Any]
) -> list[Occurrence]:
    """KubeVirt's snapshot controller, having created a snapshot's content, says so on the
    snapshot (snapshot.go's createContent)."""
    name = str((manifest.get("spec") or {}).get("virtualMachineSnapshotName") or "")
    snap = cluster.table(ResourceKind.SNAPSHOT).get(f"{agg.namespace}/{name}")
    if not name or snap is None:
        return []
    me = InvolvedObject("VirtualMachineSnapshot", agg.namespace, name, snap.uid, SNAPSHOT_API)
    msg = f"Successfully created VirtualMachineSnapshotContent {agg.name}"
    return [
        Occurrence(me, NORMAL, "SuccessfulVirtualMachineSnapshotContentCreate", msg, CONTROLLER)
    ]


def _failure(status: dict[str, Any]) -> str | None:
    for c in status.get("conditions") or ():
        if isinstance(c, dict) and c.get("type") == "Failure" and c.get("status") == "True":
            return str(c.get("reason") or c.get("message") or "")
    return None


def _restore(agg: Aggregate, cluster: FoldReader, status: dict[str, Any]) -> list[Occurrence]:
    """KubeVirt's restore controller on its restore: complete, or failed (restore.go)."""
    old = cluster.table(ResourceKind.RESTORE).get(f"{agg.namespace}/{agg.name}")
    if old is None:
        return []
    me = _of(agg, "VirtualMachineRestore", SNAPSHOT_API, cluster)
    if status.get("complete") and not old.status.get("complete"):
        msg = f"Successfully completed VirtualMachineRestore {agg.name}"
        return [Occurrence(me, NORMAL, "VirtualMachineRestoreComplete", msg, CONTROLLER)]
    failed = _failure(status)
    if failed is not None and _failure(old.status) is None:
        msg = f"VirtualMachineRestore failed {failed}"
        return [Occurrence(me, WARNING, "Operation failed", msg, CONTROLLER)]
    return []


_CLONE_STEPS = ("", "SnapshotInProgress", "RestoreInProgress", "CreatingTargetVM", "Succeeded")


def _clone(agg: Aggregate, cluster: FoldReader, status: dict[str, Any]) -> list[Occurrence]:
    """KubeVirt's clone controller records each step it passes (clone.go's logAndRecord)."""
    old = cluster.table(ResourceKind.CLONE).get(f"{agg.namespace}/{agg.name}")
    if old is None:
        return []
    before, after = old.status, status
    me = _of(agg, "VirtualMachineClone", "clone.kubevirt.io/v1beta1", cluster)
    was, now = str(before.get("phase") or ""), str(after.get("phase") or "")
    name = agg.name
    source = old.spec.get("source") or {}
    notes: list[Occurrence] = []

    def note(reason: str, msg: str) -> None:
        notes.append(Occurrence(me, NORMAL, reason, msg, CONTROLLER))

    if now == "Failed" and was != "Failed":
        kind, src = str(source.get("kind") or ""), str(source.get("name") or "")
        table = cluster.vms if kind == "VirtualMachine" else cluster.table(ResourceKind.SNAPSHOT)
        if f"{agg.namespace}/{src}" not in table:
            note("SourceDoesNotExist", f"{kind} {src} does not exist in namespace {agg.namespace}")
        else:
            snap = before.get("snapshotName") or src
            note("SnapshotDeleted", f"snapshot {snap} does not exist anymore")
        return notes
    if was not in _CLONE_STEPS or now not in _CLONE_STEPS:
        return notes
    step = _CLONE_STEPS.index
    snap = before.get("snapshotName") or source.get("name")
    restore = before.get("restoreName") or after.get("restoreName")
    if step(was) <= step("SnapshotInProgress") < step(now):
        note("SnapshotReady", f"snapshot {snap} for clone {name} is ready to use")
    if step(was) <= step("RestoreInProgress") < step(now):
        note("RestoreReady", f"restore {restore} for clone {name} is ready to use")
    if step(was) < step("Succeeded") == step(now):
        target = after.get("targetName") or before.get("targetName")
        note("TargetVMCreated", f"created target VM {target} for clone {name}")
    if before.get("restoreName") and not after.get("restoreName"):
        note("PVCBound", f"all PVC for clone {name} are bound")
    return notes


def _on_node(
    agg: Aggregate, cluster: FoldReader, etype: str, reason: str, msg: str
) -> list[Occurrence]:
    vmi = cluster.vmis.get(f"{agg.namespace}/{agg.name}")
    me = _of(agg, "VirtualMachineInstance", KUBEVIRT, cluster)
    return [Occurrence(me, etype, reason, msg, HANDLER, vmi.node if vmi is not None else "")]


def _stopped(
    agg: Aggregate, cluster: FoldReader, reason: StopReason, expired: bool, message: str
) -> list[Occurrence]:
    """The handler's phase-change events: Succeeded → Stopped, Failed → Stopped (crashed),
    and a launcher's failure as SyncFailed with its words."""
    vmi = cluster.vmis.get(f"{agg.namespace}/{agg.name}")
    if vmi is not None and vmi.final:
        return []  # reported when it stopped; the launcher's exit adds nothing
    me = _of(agg, "VirtualMachineInstance", KUBEVIRT, cluster)
    host = vmi.node if vmi is not None else ""
    match reason:
        case StopReason.MIGRATED:
            return []
        case StopReason.SHUTDOWN:
            failed = False
        case StopReason.DESTROYED:
            failed = expired
        case StopReason.CRASHED | StopReason.FAILED:
            failed = True
        case never:
            assert_never(never)
    if not failed:
        msg = "The VirtualMachineInstance was shut down."
        return [Occurrence(me, NORMAL, "Stopped", msg, HANDLER, host)]
    out = []
    if message:
        out.append(Occurrence(me, WARNING, "SyncFailed", message, HANDLER, host))
    out.append(
        Occurrence(me, WARNING, "Stopped", "The VirtualMachineInstance crashed.", HANDLER, host)
    )
    return out


def _on_migrating_vmi(
    agg: Aggregate, cluster: FoldReader, reason: str, msg: str, host: str
) -> list[Occurrence]:
    mig = cluster.migrations.get(f"{agg.namespace}/{agg.name}")
    if mig is None:
        return []
    vmi = cluster.vmis.get(f"{agg.namespace}/{mig.vmi_name}")
    if vmi is None:
        return []
    me = _vmi(agg.namespace, vmi.name, vmi.uid)
    return [Occurrence(me, NORMAL, reason, msg, HANDLER, host)]


# ---------------------------------------------------------------------- records
class KubeEvents:
    """The Event records, by "namespace/name", with the correlator's index (signature →
    record), each object's records oldest first, and every record by the time of its last
    occurrence (the window drops the earliest; a heap, as a clock running ahead on one node
    stamps records later than the ones folded after them). `apply` is the one place that
    mutates."""

    def __init__(self) -> None:
        self.table: dict[str, KubeEventView] = {}
        self._by_signature: dict[Signature, str] = {}
        self._by_object: dict[str, list[str]] = {}
        # (last occurrence, key): an entry whose record was dropped or counted since is stale
        self._due: list[tuple[float, str]] = []
        self._objects: dict[str, InvolvedObject] = {}

    @classmethod
    def of(cls, records: dict[str, KubeEventView]) -> KubeEvents:
        """The records as a snapshot kept them; the indexes are derived."""
        out = cls()
        # each object's records in the order they were made (the bound drops the first)
        for k, r in sorted(records.items(), key=lambda kv: kv[1].ordinal):
            out._index(k, r)
        return out

    def _index(self, k: str, r: KubeEventView) -> None:
        self.table[k] = r
        self._by_signature[_signature_of(r)] = k
        self._by_object.setdefault(_object_key(r.involved), []).append(k)
        self._objects.setdefault(_object_key(r.involved), r.involved)
        heapq.heappush(self._due, (r.last_at, k))

    def apply(self, s: Stored, cluster: FoldReader) -> list[str]:
        """Record what `s` stands for (`cluster`: the fold before `s`); the keys of the
        records made or counted on."""
        found = occurrences(s, cluster)
        now = s.event.meta.occurred_at
        touched = self._expire(now)
        for i, note in enumerate(found):
            touched.append(self._record(note, s.seq, now, i))
        return touched

    def _record(self, note: Occurrence, seq: int, at: float, i: int) -> str:
        sig = _signature(note)
        k = self._by_signature.get(sig)
        if k is not None:
            old = self.table[k]
            self.table[k] = msgspec.structs.replace(
                old, count=old.count + 1, last_at=at, resource_version=seq, version=seq
            )
            if at != old.last_at:
                heapq.heappush(self._due, (at, k))
            return k
        o = note.involved
        namespace = o.namespace or DEFAULT_NAMESPACE
        nanos = int(at * 1e9) + i
        name = f"{o.name}.{nanos:x}"
        while f"{namespace}/{name}" in self.table:
            nanos += 1
            name = f"{o.name}.{nanos:x}"
        k = f"{namespace}/{name}"
        record = KubeEventView(
            namespace=namespace,
            name=name,
            ordinal=seq * 16 + min(i, 15),
            involved=self._objects.setdefault(_object_key(o), o),  # one per object, shared
            type=note.type,
            reason=note.reason,
            message=note.message,
            component=note.component,
            host=note.host,
            first_at=at,
            last_at=at,
            count=1,
            created_seq=seq,
            resource_version=seq,
            version=seq,
        )
        self._index(k, record)
        keys = self._by_object[_object_key(o)]
        while len(keys) > PER_OBJECT:
            self._drop(keys[0])
        return k

    def _expire(self, now: float) -> list[str]:
        out = []
        horizon = now - WINDOW
        while self._due and self._due[0][0] < horizon:
            at, k = heapq.heappop(self._due)
            r = self.table.get(k)
            if r is None or r.last_at != at:
                continue  # dropped, or counted again since: its newer entry stands
            self._drop(k)
            out.append(k)
        return out

    def _drop(self, k: str) -> None:
        r = self.table.pop(k)
        self._by_signature.pop(_signature_of(r), None)
        keys = self._by_object.get(_object_key(r.involved))
        if keys is not None:
            keys.remove(k)
            if not keys:
                del self._by_object[_object_key(r.involved)]
                self._objects.pop(_object_key(r.involved), None)


def _signature_of(r: KubeEventView) -> Signature:
    o = r.involved
    return (o.uid, o.kind, o.name, r.type, r.reason, r.message, r.component, r.host)


def _object_key(o: InvolvedObject) -> str:
    return f"{o.kind}/{o.namespace}/{o.name}/{o.uid}"
