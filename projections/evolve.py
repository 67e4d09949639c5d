"""Pure evolve functions, one per aggregate kind: (view | None, stored event) → view | None.

None means "does not exist (any more)". Events that do not concern a view return it
unchanged. Cross-aggregate effects (a migration moving its VMI) live in `cluster.py`."""

from __future__ import annotations

import datetime as dt
import sys
from typing import Any, assert_never

from msgspec.structs import replace

from events.catalog import (
    ERR_IMAGE_PULL,
    IMAGE_PULL_PREFIX,
    SYNC_FAILED,
    USER_METADATA,
    DomainMigratedIn,
    DomainPaused,
    DomainResumed,
    DomainSoftRebooted,
    DomainStarted,
    DomainStopped,
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
    MigrationEvent,
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
    NodeEvent,
    NodeJoined,
    NodeMetadataChanged,
    NodeResponsive,
    NodeTaintsChanged,
    NodeUncordoned,
    NodeUnresponsive,
    PodScheduled,
    PolicyCreated,
    PolicyDeleted,
    PolicyEvent,
    PolicyUpdated,
    ResourceCreated,
    ResourceDeleted,
    ResourceEvent,
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
    VMEvent,
    VMICreated,
    VMICreateFailed,
    VMIDeleteRequested,
    VMIEvent,
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
from events.meta import ResourceKind
from projections import datavolumes, volumes
from projections.views import (
    MigrationView,
    NodeView,
    PolicyView,
    ResourceView,
    StartFailure,
    StateChangeRequest,
    VMIView,
    VMView,
    pack_manifest,
)

# Strings that many views (and a VM's and its VMI's view) repeat are interned, so each
# process holds one copy instead of one per decoded event: namespaces, names, uids, nodes.
_s = sys.intern


def run_strategy_of(manifest: dict[str, Any]) -> str:
    spec = manifest.get("spec") or {}
    if spec.get("runStrategy"):
        return _s(str(spec["runStrategy"]))
    running = spec.get("running")
    return "Always" if running else "Halted"


def _uid(manifest: dict[str, Any]) -> str:
    return _s(str((manifest.get("metadata") or {}).get("uid") or ""))


def _born(manifest: dict[str, Any], s: Stored) -> dict[str, Any]:
    """The fields every view takes from the event that creates its object."""
    m = manifest["metadata"]
    return {
        "namespace": _s(m.get("namespace", "")),
        "name": _s(m["name"]),
        "uid": _uid(manifest),
        "manifest_json": pack_manifest(manifest),
        "created_at": s.event.meta.occurred_at,
        "version": s.seq,
        "resource_version": s.seq,
    }


def with_metadata(
    manifest: dict[str, Any], metadata: dict[str, Any], deleted_at: float | None = None
) -> dict[str, Any]:
    """The manifest with a `MetadataChanged`'s fields in place of its own (and, from
    `deleted_at`, the deletionTimestamp it keeps from then on)."""
    meta = {k: v for k, v in (manifest.get("metadata") or {}).items() if k not in USER_METADATA}
    meta.update({k: v for k, v in metadata.items() if k in USER_METADATA})
    if deleted_at is not None and not meta.get("deletionTimestamp"):
        when = dt.datetime.fromtimestamp(int(deleted_at), dt.UTC)
        meta["deletionTimestamp"] = when.strftime("%Y-%m-%dT%H:%M:%SZ")
    return {**manifest, "metadata": meta}


def _relabelled(v: Any, ev: MetadataChanged) -> bytes:
    at = ev.meta.occurred_at if ev.deletion else None
    return pack_manifest(with_metadata(v.manifest, ev.metadata, at))


# --------------------------------------------------------------------------- VM
def evolve_vm(view: VMView | None, s: Stored) -> VMView | None:
    ev = s.event
    at = ev.meta.occurred_at
    if view is None:
        if isinstance(ev, VMCreated):
            return VMView(**_born(ev.manifest, s), run_strategy=run_strategy_of(ev.manifest))
        return None
    v = replace(view, version=s.seq, resource_version=s.seq)
    if not isinstance(ev, VMEvent):
        return v  # not this kind's event: only the version moves
    match ev:
        case VMUpdated(manifest=manifest):
            return replace(
                v,
                manifest_json=pack_manifest(manifest),
                run_strategy=run_strategy_of(manifest),
                generation=v.generation + 1,
                revision_json=_kept_revision(v, manifest),
            )
        case VMRevisionRecorded(instancetype=it, preference=pref):
            recorded = {k: r for k, r in (("instancetype", it), ("preference", pref)) if r}
            return replace(v, revision_json=pack_manifest(recorded) if recorded else b"")
        case VMDeleted(grace_period_seconds=grace):
            return replace(v, deleted_at=at, deletion_grace_period_seconds=grace)
        case VMStartRequested(paused=paused):
            return replace(
                v,
                requests=(*v.requests, StateChangeRequest("Start", seq=s.seq)),
                start_paused=paused,
            )
        case VMStopRequested(vmi_uid=uid, grace_period_seconds=grace):
            stop = StateChangeRequest("Stop", uid, grace, s.seq)
            return replace(v, requests=(*v.requests, stop))
        case VMRestartRequested(vmi_uid=uid, grace_period_seconds=grace):
            reqs = (
                StateChangeRequest("Stop", uid, grace, s.seq),
                StateChangeRequest("Start", seq=s.seq),
            )
            return replace(v, requests=(*v.requests, *reqs))
        case VMStateChangeRequestsCleared():
            return replace(v, requests=(), start_paused=False)
        case VMRunStrategyChanged(run_strategy=rs):
            manifest = v.manifest
            spec = dict(manifest.get("spec") or {})
            spec.pop("running", None)
            spec["runStrategy"] = rs
            packed = pack_manifest({**manifest, "spec": spec})
            return replace(v, run_strategy=rs, manifest_json=packed)
        case VMStartFailed():
            failure = StartFailure(
                ev.consecutive_fail_count, ev.last_failed_vmi_uid, ev.retry_after
            )
            return replace(v, start_failure=failure)
        case VMStartFailureCleared():
            return replace(v, start_failure=None)
        case VMICreateFailed(generation=generation, message=message):
            return replace(v, create_failure=message, create_failure_generation=generation)
        case MetadataChanged(metadata=metadata, deletion=deletion):
            # a VM whose deletion begins is torn down as by VMDeleted (its view stays while
            # it has finalizers: `Cluster._apply_vm`), unless its VMI is to be orphaned
            orphaning = "orphan" in (metadata.get("finalizers") or [])
            tear_down = deletion and not orphaning and v.deleted_at is None
            gone_at = at if tear_down else v.deleted_at
            return replace(v, manifest_json=_relabelled(v, ev), deleted_at=gone_at)
        case VMCreated():
            return v
        case _:
            assert_never(ev)
    return v


# -------------------------------------------------------------------------- VMI
def _phase(v: VMIView, phase: str, at: float, **changes: Any) -> VMIView:
    if v.phase == phase:
        return replace(v, **changes)
    return replace(v, phase=phase, transitions=(*v.transitions, (phase, at)), **changes)


def evolve_vmi(view: VMIView | None, s: Stored) -> VMIView | None:
    ev = s.event
    at = ev.meta.occurred_at
    if view is None:
        if isinstance(ev, VMICreated):
            return VMIView(
                **_born(ev.manifest, s),
                owner_vm_uid=_s(ev.owner_vm_uid),
                transitions=(("Pending", at),),
            )
        return None
    v = replace(view, version=s.seq, resource_version=s.seq)
    if not isinstance(ev, VMIEvent):
        return v  # not this kind's event: only the version moves
    match ev:
        case PodScheduled(node=node, pod_name=pod, pod_uid=pod_uid, pod_address=address):
            return _phase(
                v, "Scheduling", at, node=_s(node), pod_name=pod, pod_uid=pod_uid,
                unschedulable="", pod_address=address, attachments=ev.attachments,
            )  # fmt: skip
        case Unschedulable(message=msg):
            # KubeVirt: the launcher pod exists but cannot be placed → Scheduling
            if v.phase == "Pending":
                return _phase(v, "Scheduling", at, unschedulable=msg)
            return replace(v, unschedulable=msg)
        case LauncherStarted(pid=pid, node=node, pod_uid=pod_uid):
            if v.final:
                return v
            pods = ((pod_uid, _s(node)),)
            return _phase(v, "Scheduled", at, launcher_pid=pid, active_pods=pods)
        case DomainStarted(paused=paused, qemu_pid=qpid, domain_type=dtype):
            if v.final:
                return v
            return _phase(
                v,
                "Running",
                at,
                paused=paused,
                pause_reason="PausedByUser" if paused else "",
                ever_running=True,
                qemu_pid=qpid,
                domain_type=dtype or v.domain_type,
                sync_failure="",
            )
        case DomainMigratedIn(qemu_pid=qpid, domain_type=dtype):
            # the target's domain after a live migration: no phase change (Running throughout)
            if v.final:
                return v
            return replace(v, qemu_pid=qpid, domain_type=dtype or v.domain_type)
        case DomainPaused(reason=why):
            return replace(v, paused=True, pause_reason=why, sync_failure="")
        case DomainResumed():
            return replace(v, paused=False, pause_reason="", sync_failure="")
        case VMIWarning(reason=why, message=msg):
            return replace(v, sync_failure=msg) if why == SYNC_FAILED else v
        case VMIVolumeAdded(volume=volume, disk=disk):
            return replace(v, manifest_json=volumes.added(v.manifest_json, volume, disk))
        case VMIVolumeRemoved(name=name):
            return replace(v, manifest_json=volumes.removed(v.manifest_json, name))
        case VolumeAttached(name=name, target=target):
            kept = tuple(t for t in v.volume_targets if t[0] != name)
            return replace(v, volume_targets=(*kept, (name, target)))
        case VolumeDetached(name=name):
            return replace(v, volume_targets=tuple(t for t in v.volume_targets if t[0] != name))
        case GuestAgentChanged(connected=connected):
            return replace(v, agent_connected=connected and not v.final)
        case GuestInterfacesChanged(interfaces=interfaces):
            return v if v.final else replace(v, interfaces=interfaces)
        case DomainStopped(reason=reason, grace_period_expired=expired, message=msg):
            if v.final or reason is StopReason.MIGRATED:
                return v
            failed = reason in (StopReason.CRASHED, StopReason.FAILED) or (
                reason is StopReason.DESTROYED and expired
            )
            phase = "Failed" if failed else "Succeeded"
            why = str(reason) if failed else ""
            if failed and msg.startswith(IMAGE_PULL_PREFIX):
                # the launcher could not find the disk's image (KubeVirt's reason)
                why, msg = ERR_IMAGE_PULL, msg.removeprefix(IMAGE_PULL_PREFIX)
            return _phase(
                v,
                phase,
                at,
                reason=why,
                message=msg,
                paused=False,
                agent_connected=False,
                interfaces=(),
            )
        case VMIFailed(reason=reason, message=msg):
            if v.final:
                return v
            return _phase(v, "Failed", at, reason=reason, message=msg, paused=False)
        case LauncherExited(pod_uid=pod_uid):
            if v.migration and pod_uid and pod_uid != v.pod_uid:
                # another pod of this VMI: a migration's source after the handoff, or a
                # failed target; the VMI's own launcher lives on
                return replace(v, active_pods=tuple(p for p in v.active_pods if p[0] != pod_uid))
            return replace(v, launcher_exited=True, active_pods=())
        case VMIDeleteRequested(grace_period_seconds=grace):
            if v.deletion_requested_at is not None:
                return v
            return replace(v, deletion_requested_at=at, grace_period_seconds=grace)
        case VMIRemoved():
            return None
        case MetadataChanged(metadata=metadata):
            # a VMI orphaned from its VM (no reference to it left) is a VMI of its own
            refs = metadata.get("ownerReferences") or []
            owned = any(isinstance(r, dict) and r.get("uid") == v.owner_vm_uid for r in refs)
            owner = v.owner_vm_uid if owned else ""
            return replace(v, manifest_json=_relabelled(v, ev), owner_vm_uid=owner)
        case (
            VMICreated()
            | VMIPauseRequested()
            | VMIUnpauseRequested()
            | VMISoftRebootRequested()
            | VMIEvictionBlocked()
            | DomainSoftRebooted()
        ):
            return v  # wishes the handler acts on; the view shows their outcome
        case _:
            assert_never(ev)
    return v


# -------------------------------------------------------------------- Migration
def evolve_migration(view: MigrationView | None, s: Stored) -> MigrationView | None:
    ev = s.event
    at = ev.meta.occurred_at
    if view is None or (view.deleted and view.final and isinstance(ev, MigrationRequested)):
        # a deleted migration that finished is gone: its name makes a new one
        if isinstance(ev, MigrationRequested):
            return MigrationView(
                **_born(ev.manifest, s),
                vmi_name=(ev.manifest.get("spec") or {}).get("vmiName", ""),
                transitions=(("Pending", at),),
            )
        return None
    v = replace(view, version=s.seq, resource_version=s.seq)
    if not isinstance(ev, MigrationEvent):
        return v  # not this kind's event: only the version moves

    def phase(p: str, **changes: Any) -> MigrationView:
        if v.final or v.phase == p:
            return replace(v, **changes)
        return replace(v, phase=p, transitions=(*v.transitions, (p, at)), **changes)

    match ev:
        case MigrationPending(message=msg):
            return replace(v, message=msg)
        case MigrationScheduling(vmi_uid=uid, source_node=src, source_pod=pod):
            return phase("Scheduling", vmi_uid=uid, source_node=src, source_pod=pod)
        case MigrationScheduled():
            return phase(
                "Scheduled",
                vmi_uid=ev.vmi_uid,
                source_node=ev.source_node,
                source_pod=ev.source_pod,
                target_node=ev.target_node,
                target_pod=ev.target_pod,
                target_pod_uid=ev.target_pod_uid,
                policy=ev.settings.policy,
            )
        case TargetPreparing():
            return phase("PreparingTarget")
        case TargetPrepared(target_address=addr):
            return phase("TargetReady", target_address=addr)
        case MigrationStarted(mode=mode):
            return phase("Running", start_timestamp=at, mode=mode)
        case MigrationProgressed():
            return replace(
                v,
                data_processed=ev.data_processed_bytes,
                data_remaining=ev.data_remaining_bytes,
                data_total=ev.data_total_bytes,
            )
        case MigrationSucceeded():
            # an abort that came too late: the migration completed, the abort failed
            status = "Failed" if v.abort_requested else v.abort_status
            return phase("Succeeded", end_timestamp=at, abort_status=status)
        case MigrationAborted(reason=reason):
            return phase(
                "Failed",
                end_timestamp=at,
                failure_reason=reason or "migration aborted",
                abort_status="Succeeded" if v.abort_requested else v.abort_status,
            )
        case MigrationFailed(reason=reason, message=msg):
            return phase(
                "Failed",
                end_timestamp=at,
                failure_reason=msg or reason,
                abort_status="Succeeded" if v.abort_requested else v.abort_status,
            )
        case MigrationAbortRequested():
            if v.final:
                return replace(v, deleted=True)
            return replace(v, abort_requested=True, abort_status="Aborting", deleted=True)
        case MetadataChanged():
            return replace(v, manifest_json=_relabelled(v, ev))
        case MigrationRequested():
            return v
        case _:
            assert_never(ev)
    return v


# ------------------------------------------------------------------------- Node
def evolve_node(view: NodeView | None, s: Stored) -> NodeView | None:
    ev = s.event
    at = ev.meta.occurred_at
    if isinstance(ev, NodeJoined):
        # (re)joining updates capacity and the agent's labels but keeps what users wrote
        # (other labels, annotations, taints, the cordon), as a kubelet registering again
        return NodeView(
            name=ev.node,
            capacity=ev.capacity,
            created_at=view.created_at if view else at,
            version=s.seq,
            resource_version=s.seq,
            labels={**view.labels, **ev.labels} if view else ev.labels,
            annotations=view.annotations if view else {},
            taints=view.taints if view else ev.taints,
            address=ev.address,
            hypervisor=ev.hypervisor,
            console_port=ev.console_port,
            info=ev.info,
            pod_cidr=ev.pod_cidr,
            pod_network_message=ev.pod_network_message,
            cordoned=view.cordoned if view else False,
            last_heartbeat=at,
        )
    if view is None:
        return None
    v = replace(view, version=s.seq, resource_version=s.seq)
    if not isinstance(ev, NodeEvent):
        return v  # not this kind's event: only the version moves
    match ev:
        case NodeCordoned():
            return replace(v, cordoned=True)
        case NodeUncordoned():
            return replace(v, cordoned=False, draining=False)
        case NodeDrainRequested():
            return replace(v, cordoned=True, draining=True)
        case NodeTaintsChanged(taints=taints):
            added = dict(zip(((t.key, t.effect) for t in v.taints), v.taints_added, strict=False))
            times = tuple(added.get((t.key, t.effect), at) for t in taints)
            return replace(v, taints=taints, taints_added=times)
        case NodeMetadataChanged(labels=labels, annotations=annotations):
            return replace(v, labels=labels, annotations=annotations)
        case NodeUnresponsive(last_heartbeat=hb):
            return replace(v, unresponsive=True, last_heartbeat=hb)
        case NodeResponsive(last_heartbeat=hb):
            return replace(v, unresponsive=False, last_heartbeat=hb)
        case NodeDeleted():
            return None
        case NodeJoined():
            return v  # handled above
        case _:
            assert_never(ev)
    return v


def _kept_revision(v: VMView, manifest: dict[str, Any]) -> bytes:
    """An update keeps the recorded revisions only while the VM still names them (same
    kind, name and revisionName): clearing `revisionName` or choosing another instance type
    or preference takes the current one at the next start, as KubeVirt's."""
    spec = manifest.get("spec") or {}
    for field, rev in v.revision.items():
        matcher = spec.get(field) or {}
        if (matcher.get("name"), matcher.get("revisionName")) != (
            rev.get("name"),
            rev.get("revisionName"),
        ):
            return b""
    return v.revision_json


# ----------------------------------------------------------------------- Policy
def evolve_policy(view: PolicyView | None, s: Stored) -> PolicyView | None:
    ev = s.event
    if not isinstance(ev, PolicyEvent):
        return view
    match ev:
        case PolicyCreated(manifest=manifest) | PolicyUpdated(manifest=manifest):
            return PolicyView(
                name=manifest["metadata"]["name"],
                uid=_uid(manifest) or (view.uid if view else ""),
                manifest_json=pack_manifest(manifest),
                created_at=view.created_at if view else ev.meta.occurred_at,
                version=s.seq,
                resource_version=s.seq,
            )
        case PolicyDeleted():
            return None
        case MetadataChanged():
            if view is None:
                return None
            return replace(
                view,
                manifest_json=_relabelled(view, ev),
                version=s.seq,
                resource_version=s.seq,
            )
        case _:
            assert_never(ev)


# --------------------------------------------------------------------- Resources
def evolve_resource(view: ResourceView | None, s: Stored) -> ResourceView | None:
    """Instance types, preferences, replica sets, pools, snapshots, restores: the spec from
    the user, the status from its controller."""
    ev = s.event
    if not isinstance(ev, ResourceEvent):
        return view
    match ev:
        case ResourceCreated(manifest=manifest):
            if view is not None:
                return view
            return ResourceView(**_born(manifest, s))
        case ResourceUpdated(manifest=manifest):
            if view is None:
                return None
            changed = (manifest.get("spec") or {}) != view.spec
            return replace(
                view,
                manifest_json=pack_manifest(manifest),
                generation=view.generation + (1 if changed else 0),
                version=s.seq,
                resource_version=s.seq,
            )
        case ResourceStatusChanged(status=status):
            if view is None:
                return None
            return replace(
                view, status_json=pack_manifest(status), version=s.seq, resource_version=s.seq
            )
        case ResourceDeleted():
            return None
        case MetadataChanged():
            if view is None:
                return None
            return replace(
                view,
                manifest_json=_relabelled(view, ev),
                version=s.seq,
                resource_version=s.seq,
            )
        case VolumesCopyRequested(copies=copies, restore=restore):
            if view is None:
                return None
            if restore:
                return replace(view, version=s.seq)
            pending = [{"volumeSnapshotName": c.backup, "readyToUse": False} for c in copies]
            status = {**view.status, "volumeSnapshotStatus": pending}
            return replace(
                view, status_json=pack_manifest(status), version=s.seq, resource_version=s.seq
            )
        case (
            ImportRequested()
            | ImportProgressed()
            | ImportFinished()
            | UploadReady()
            | UploadReceived()
        ):
            if view is None:
                return None
            if ev.meta.aggregate.kind == ResourceKind.PVC:  # a bare claim's upload
                notes = datavolumes.claim_upload_notes(view.name, ev)
                if not notes:
                    return replace(view, version=s.seq)
                manifest = view.manifest
                metadata = dict(manifest.get("metadata") or {})
                metadata["annotations"] = {**(metadata.get("annotations") or {}), **notes}
                return replace(
                    view,
                    manifest_json=pack_manifest({**manifest, "metadata": metadata}),
                    version=s.seq,
                    resource_version=s.seq,
                )
            status = datavolumes.imported(view.status, ev, s.event.meta.occurred_at)
            return replace(
                view, status_json=pack_manifest(status), version=s.seq, resource_version=s.seq
            )
        case VolumeReclaimRequested() | VolumeReclaimed():
            # the controller records the outcome (the PV deleted, or its phase Failed)
            return None if view is None else replace(view, version=s.seq)
        case VolumesCopied():
            if view is None:
                return None
            status = _volumes_copied(view.status, ev)
            return replace(
                view, status_json=pack_manifest(status), version=s.seq, resource_version=s.seq
            )
        case _:
            assert_never(ev)


def _volumes_copied(status: dict[str, Any], ev: VolumesCopied) -> dict[str, Any]:
    """A handler's copy result in the object's status, as KubeVirt shapes it: a content's
    `volumeSnapshotStatus`, a restore's `restores`; `error` when a copy failed."""
    status = dict(status)
    at = dt.datetime.fromtimestamp(ev.meta.occurred_at, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    if ev.error:
        status["error"] = {"time": at, "message": ev.error}
    elif ev.restore:
        status["restores"] = [
            {
                "volumeName": c.volume,
                "persistentVolumeClaim": c.claim,
                "volumeSnapshotName": c.backup,
            }
            for c in ev.copies
        ]
    else:
        status["volumeSnapshotStatus"] = [
            {"volumeSnapshotName": c.backup, "creationTime": at, "readyToUse": True}
            for c in ev.copies
        ]
    return status
