"""VirtualMachineSnapshot and VirtualMachineRestore controllers, pure (KubeVirt's
pkg/storage/snapshot: snapshot.go, restore.go).

Snapshot, one step per pass, each step a status or object event keyed by the state it
answers (so a redelivered event or a restarted controller decides a duplicate):
1. source VM found → status InProgress, "Source locked and operation in progress" (the VM
   then shows `status.snapshotInProgress`), and the VirtualMachineSnapshotContent
   `vmsnapshot-content-<snapshot uid>` holding the VM's metadata and spec;
2. the content is marked ready (`creationTime`, `readyToUse`);
3. the snapshot copies them: Succeeded, "Operation complete", Ready.
No source VM: InProgress with "Source does not exist" until `spec.failureDeadline`
(default 5m, "0s" = none) passes, then Failed, "snapshot deadline exceeded".

What a snapshot holds: the VM's spec, and in qemu mode (a node with hypervisor "qemu")
a copy of every persistentVolumeClaim/dataVolume volume. Those are the content's
`volumeBackups` (`vmsnapshot-<snapshot uid>-volume-<volume>`); the controller asks a node's
handler to copy them (`VolumesCopyRequested`, routed to the VMI's node when it runs, else
the first schedulable qemu node), and the content is ready only once `VolumesCopied` is
folded (`volumeSnapshotStatus`). A failed copy fails the snapshot with its message. The
other volumes (and in test mode every volume) are `snapshotVolumes.excludedVolumes`.

Restore: the target VM must have no running VMI ("Waiting for target to be ready";
`targetReadinessPolicy` FailImmediate, StopTarget, WaitEventually, or the default
WaitGracePeriodAndFail: failed 5 minutes after creation). Then the target's spec is set
from the content (an existing VM keeps its run strategy; a new VM name is created Halted),
annotated `restore.kubevirt.io/lastRestoreUID: <restore>-<uid>`, and once that is folded
the restore is complete. A content with `volumeBackups` is first copied back into new
claims `restore-<restore uid>-<volume>` (KubeVirt's names; `status.restores`) by a node's
handler, and the restored spec's volumes name those claims."""

from __future__ import annotations

import copy
import json
import re
from typing import Any

import jsonpatch

from events.catalog import (
    Event,
    ResourceCreated,
    VMCreated,
    VMRunStrategyChanged,
    VMStopRequested,
    VMUpdated,
    VolumeCopy,
    VolumesCopyRequested,
)
from events.envelope import Context, Decision
from events.meta import Aggregate, Kind, KindToken, ResourceKind
from projections import storage
from projections.cluster import Cluster, key
from projections.render import rfc3339
from projections.snapshots import failed as _failed
from projections.views import ResourceView, VMIView, VMView
from services.controller import emit
from services.controller import storage as claim_objects

JSON = dict[str, Any]
GROUP_VERSION = "snapshot.kubevirt.io/v1beta1"
LAST_RESTORE = "restore.kubevirt.io/lastRestoreUID"
DEFAULT_FAILURE_DEADLINE = 300.0  # KubeVirt's 5m
RESTORE_GRACE = 300.0  # snapshotv1.DefaultGracePeriod

# KubeVirt's texts (snapshot.go, source.go, restore.go)
LOCKED = "Source locked and operation in progress"
NO_SOURCE = "Source does not exist"
COMPLETE = "Operation complete"
FAILED = "Operation failed"
DEADLINE = "snapshot deadline exceeded"
INITIALIZING = "Initializing VirtualMachineRestore"
WAITING_TARGET = "Waiting for target to be ready"
TARGET_NOT_READY = "Restore target not ready"
GRACE_EXCEEDED = "Restore target failed to be ready within 5m0s"
UPDATING = "Updating target spec"
WAITING_UPDATE = "Waiting for target update"
RESTORING_VOLUMES = "Restoring volumes"
VOLUME_COPY_FAILED = "Volume copy failed: "
EXISTING_TARGET = (
    "restore source and restore target are different but restore target already exists"
)
INDICATIONS = {
    "Online": "Snapshot taken while the VM was running. Consistency depends on guest-agent "
    "quiescing.",
    "NoGuestAgent": "Guest agent was not available. Snapshot is crash-consistent and may not "
    "be application-consistent.",
    "GuestAgent": "Guest agent was active and attempted to quiesce the filesystem for "
    "application consistency",
}

_DURATION = re.compile(r"(\d+(?:\.\d+)?)(h|ms|m|s)")
_UNIT = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 0.001}


def parse_duration(text: Any, default: float) -> float:
    """A metav1.Duration ("5m", "1h30m", "90s"); the default when absent or unreadable."""
    if not isinstance(text, str) or not text:
        return default
    parts = _DURATION.findall(text)
    if not parts or "".join(n + u for n, u in parts) != text:
        return default
    return sum(float(n) * _UNIT[u] for n, u in parts)


def content_name(snapshot: ResourceView) -> str:
    return f"vmsnapshot-content-{snapshot.uid}"


def _conditions(old: JSON, new: list[tuple[str, str, str]], now: float) -> list[JSON]:
    """KubeVirt's updateCondition: a condition keeps its lastTransitionTime while its status
    is unchanged, so a pass that changes nothing decides nothing."""
    before = {c.get("type"): c for c in old.get("conditions") or []}
    out = []
    for ctype, status, reason in new:
        prev = before.get(ctype)
        at = prev.get("lastTransitionTime") if prev and prev.get("status") == status else None
        out.append(
            {
                "type": ctype,
                "status": status,
                "reason": reason,
                "lastProbeTime": None,
                "lastTransitionTime": at or rfc3339(now),
            }
        )
    return out


def _volume_names(spec: JSON) -> list[str]:
    volumes = ((spec.get("template") or {}).get("spec") or {}).get("volumes") or []
    return [str(v.get("name")) for v in volumes if isinstance(v, dict) and v.get("name")]


def _claim(volume: JSON) -> str:
    if "persistentVolumeClaim" in volume:
        return str((volume["persistentVolumeClaim"] or {}).get("claimName") or "")
    if "dataVolume" in volume:
        return str((volume["dataVolume"] or {}).get("name") or "")
    return ""


def persistent_volumes(spec: JSON) -> list[tuple[str, str]]:
    """(volume name, claim) of the VM's persistentVolumeClaim and dataVolume volumes."""
    volumes = ((spec.get("template") or {}).get("spec") or {}).get("volumes") or []
    return [
        (str(v["name"]), claim)
        for v in volumes
        if isinstance(v, dict) and v.get("name") and (claim := _claim(v))
    ]


def qemu_mode(cluster: Cluster) -> bool:
    """Disks are real files only where a node runs QEMU."""
    return any(n.hypervisor == "qemu" for n in cluster.nodes.values())


def _copy_node(cluster: Cluster, vmi: VMIView | None) -> str:
    """Where a copy runs: the node of the running VMI (it pauses the domain), else the
    first schedulable qemu node (every node of a machine shares the disk dir)."""
    if vmi is not None and not vmi.final and vmi.node:
        return vmi.node
    nodes = sorted(
        n.name for n in cluster.nodes.values() if n.hypervisor == "qemu" and n.schedulable
    )
    return nodes[0] if nodes else ""


def _backups(content: ResourceView) -> list[VolumeCopy]:
    out = []
    for b in content.spec.get("volumeBackups") or []:
        claim = ((b.get("persistentVolumeClaim") or {}).get("metadata") or {}).get("name") or ""
        out.append(
            VolumeCopy(str(b.get("volumeName")), str(claim), str(b.get("volumeSnapshotName")))
        )
    return out


def _request_copies(
    cluster: Cluster,
    kind: KindToken,
    res: ResourceView,
    copies: list[VolumeCopy],
    vmi: VMIView | None,
    ctx: Context,
    *,
    restore: bool,
) -> list[Decision]:
    node = _copy_node(cluster, vmi)
    if not node:
        return []  # no qemu node ready: decided again on the next pass
    running = vmi is not None and not vmi.final and vmi.node == node
    ev = VolumesCopyRequested(
        meta=emit.meta(
            ctx, emit.resource_aggregate(kind, res), f"volumes-copy/{res.uid}", node=node
        ),
        copies=tuple(copies),
        restore=restore,
        vmi=f"{vmi.namespace}/{vmi.name}" if running and vmi is not None else "",
    )
    return [Decision(ev, occ=False)]


def source_vm(cluster: Cluster, snapshot: ResourceView) -> VMView | None:
    name = (snapshot.spec.get("source") or {}).get("name") or ""
    vm = cluster.vms.get(key(snapshot.namespace, name))
    return vm if vm is not None and vm.deleted_at is None else None


# -------------------------------------------------------------------- snapshot
def reconcile_snapshot(cluster: Cluster, snap: ResourceView, ctx: Context) -> list[Decision]:
    old = snap.status
    if old.get("phase") in ("Succeeded", "Failed"):
        return []
    vm = source_vm(cluster, snap)
    contents = cluster.resources[ResourceKind.SNAPSHOT_CONTENT]
    content = contents.get(key(snap.namespace, content_name(snap)))
    out: list[Decision] = []
    status: JSON = {"readyToUse": False}
    deadline = parse_duration(snap.spec.get("failureDeadline"), DEFAULT_FAILURE_DEADLINE)
    if vm is not None:
        status["sourceUID"] = vm.uid
    elif old.get("sourceUID"):
        status["sourceUID"] = old["sourceUID"]
    if content is not None:
        status["virtualMachineSnapshotContentName"] = content.name
        cstatus = content.status
        if cstatus.get("creationTime"):
            status["creationTime"] = cstatus["creationTime"]
            status["readyToUse"] = bool(cstatus.get("readyToUse"))
    copy_error = ((content.status.get("error") or {}) if content else {}).get("message")
    if copy_error and "creationTime" not in status:
        status["phase"] = "Failed"
        status["error"] = content.status["error"] if content else {}
        conds = [
            ("Failure", "True", VOLUME_COPY_FAILED + copy_error),
            ("Progressing", "False", FAILED),
        ]
    elif deadline > 0 and ctx.now > snap.created_at + deadline and "creationTime" not in status:
        status["phase"] = "Failed"
        conds = [("Failure", "True", DEADLINE), ("Progressing", "False", FAILED)]
    elif "creationTime" in status:
        status["phase"] = "Succeeded"
        conds = [("Progressing", "False", COMPLETE)]
        if old.get("indications"):
            status["indications"] = old["indications"]
            status["sourceIndications"] = old.get("sourceIndications")
        content_vm = ((content.spec.get("source") if content else None) or {}).get(
            "virtualMachine"
        ) or {}
        included = [
            str(b.get("volumeName"))
            for b in (content.spec if content else {}).get("volumeBackups") or []
        ]
        excluded = [n for n in _volume_names(content_vm.get("spec") or {}) if n not in included]
        volumes: JSON = {}
        if included:
            volumes["includedVolumes"] = included
        if excluded:
            volumes["excludedVolumes"] = excluded
        status["snapshotVolumes"] = volumes
    elif vm is None:
        status["phase"] = "InProgress"
        conds = [("Progressing", "False", NO_SOURCE)]
    else:
        status["phase"] = "InProgress"
        conds = [("Progressing", "True", LOCKED)]
        vmi = cluster.vmi_of_vm(vm)
        if vmi is not None and not vmi.final:  # online: the handler freezes with an agent
            names = ["Online", "GuestAgent" if vmi.agent_connected else "NoGuestAgent"]
            status["indications"] = names
            status["sourceIndications"] = [
                {"indication": n, "message": INDICATIONS[n]} for n in names
            ]
        if content is None:
            out.append(_create_content(cluster, snap, vm, qemu_mode(cluster), ctx))
        else:
            out += _content_progress(cluster, content, vmi, ctx)
    ready = status["readyToUse"]
    conds.append(("Ready", "True", "Ready") if ready else ("Ready", "False", "Not ready"))
    status["conditions"] = _conditions(old, conds, ctx.now)
    return emit.status_change(ResourceKind.SNAPSHOT, snap, status, ctx) + out


def _content_progress(
    cluster: Cluster, content: ResourceView, vmi: VMIView | None, ctx: Context
) -> list[Decision]:
    """Copy the content's volumes (when it has any), then mark it ready."""
    cstatus = content.status
    backups = _backups(content)
    copied = cstatus.get("volumeSnapshotStatus") or []
    if cstatus.get("creationTime") or cstatus.get("error"):
        return []
    if backups and not copied:
        return _request_copies(
            cluster, ResourceKind.SNAPSHOT_CONTENT, content, backups, vmi, ctx, restore=False
        )
    if backups and not all(v.get("readyToUse") for v in copied):
        return []  # the handler is copying
    ready = {**cstatus, "creationTime": rfc3339(ctx.now), "readyToUse": True}
    return emit.status_change(ResourceKind.SNAPSHOT_CONTENT, content, ready, ctx)


def _create_content(
    cluster: Cluster, snap: ResourceView, vm: VMView, qemu: bool, ctx: Context
) -> Decision:
    name = content_name(snap)
    decision_key = f"vmsnapshot-content/{snap.uid}"
    uid = emit.new_uid(ctx, decision_key)
    manifest = vm.manifest
    meta = manifest.get("metadata") or {}
    source_meta = {
        k: meta[k] for k in ("name", "namespace", "labels", "annotations") if meta.get(k)
    }
    source_meta["uid"] = vm.uid
    owner = {
        "apiVersion": GROUP_VERSION,
        "kind": "VirtualMachineSnapshot",
        "name": snap.name,
        "uid": snap.uid,
        "controller": True,
        "blockOwnerDeletion": True,
    }
    metadata: JSON = {"name": name, "namespace": snap.namespace, "uid": uid}
    if snap.spec.get("deletionPolicy") != "Retain":  # Delete, the default: owned
        metadata["ownerReferences"] = [owner]
    content = {
        "apiVersion": GROUP_VERSION,
        "kind": "VirtualMachineSnapshotContent",
        "metadata": metadata,
        "spec": {
            "source": {
                "virtualMachine": {
                    "apiVersion": "kubevirt.io/v1",
                    "kind": "VirtualMachine",
                    "metadata": source_meta,
                    "spec": copy.deepcopy(manifest.get("spec") or {}),
                }
            },
            "virtualMachineSnapshotName": snap.name,
            "volumeBackups": [
                {
                    "volumeName": volume,
                    "persistentVolumeClaim": _claim_copy(cluster, snap.namespace, claim),
                    "volumeSnapshotName": f"vmsnapshot-{snap.uid}-volume-{volume}",
                }
                for volume, claim in (
                    persistent_volumes(manifest.get("spec") or {}) if qemu else []
                )
            ],
        },
    }
    agg = Aggregate(
        kind=ResourceKind.SNAPSHOT_CONTENT, namespace=snap.namespace, name=name, uid=uid
    )
    ev = ResourceCreated(meta=emit.meta(ctx, agg, decision_key), manifest=content)
    return Decision(ev)  # OCC: the content does not exist yet


def _claim_copy(cluster: Cluster, namespace: str, claim: str) -> JSON:
    """A volume backup's claim: its name, and its spec when the claim is an object (what a
    restore makes the new claim like)."""
    found = storage.find_claim(cluster, namespace, claim)
    out: JSON = {"metadata": {"name": claim}}
    if found is not None:
        out["spec"] = {k: v for k, v in found.spec.items() if k != "volumeName"}
    return out


def _restored_claims(
    cluster: Cluster,
    restore: ResourceView,
    content: ResourceView | None,
    restores: list[JSON],
    ctx: Context,
) -> list[Decision]:
    """The restored claims as objects, each like the claim it was backed up from."""
    like: dict[str, JSON] = {}
    for b in (content.spec.get("volumeBackups") or []) if content is not None else []:
        like[str(b.get("volumeName"))] = (b.get("persistentVolumeClaim") or {}).get("spec") or {}
    out: list[Decision] = []
    for r in restores:
        name, volume = str(r["persistentVolumeClaim"]), str(r["volumeName"])
        k = f"restore-claim/{restore.uid}/{volume}"
        out += claim_objects.restored_claim(
            cluster, restore.namespace, name, like.get(volume, {}), k, ctx
        )
    return out


# --------------------------------------------------------------------- restore
def _restore_key(restore: ResourceView) -> str:
    return f"{restore.name}-{restore.uid}"


def _restore_claim(restore: ResourceView, volume: str) -> str:
    """KubeVirt's `restoreVolumeName`: `restore-<uid>-<volume>` (RandomizeNames), or with
    `volumeRestorePolicy: PrefixTargetName` `<target>-<volume>`, within a DNS-1035 label."""
    if restore.spec.get("volumeRestorePolicy") == PREFIX_TARGET_NAME:
        target = str((restore.spec.get("target") or {}).get("name") or "")
        return prefixed_name(target, volume, 63)
    return f"restore-{restore.uid}-{volume}"


PREFIX_TARGET_NAME = "PrefixTargetName"


def _fnv32a(text: str) -> str:
    h = 0x811C9DC5
    for byte in text.encode():
        h = ((h ^ byte) * 0x01000193) & 0xFFFFFFFF
    return f"{h:08x}"


def prefixed_name(base: str, suffix: str, most: int) -> str:
    """openshift's `naming.GetName`, which KubeVirt names restored volumes with: `base-suffix`,
    or, too long, the base cut and a hash of the whole put between them."""
    name = f"{base}-{suffix}"
    if len(name) <= most:
        return name
    base_length = most - 10 - len(suffix)
    if base_length <= 0:
        short = f"{base[: max(0, most - 9)]}-{_fnv32a(name)}"
        return short[:most]
    return f"{base[:base_length]}-{_fnv32a(base)}-{suffix}"


def _content_of(cluster: Cluster, snap: ResourceView) -> ResourceView | None:
    name = str(snap.status.get("virtualMachineSnapshotContentName") or "")
    return cluster.resources[ResourceKind.SNAPSHOT_CONTENT].get(key(snap.namespace, name))


def _snapshot_content(
    cluster: Cluster, restore: ResourceView
) -> tuple[ResourceView | None, JSON | None, str]:
    """The snapshot and its content's VM, or KubeVirt's error text."""
    name = str(restore.spec.get("virtualMachineSnapshotName") or "")
    ref = key(restore.namespace, name)
    snap = cluster.resources[ResourceKind.SNAPSHOT].get(ref)
    if snap is None:
        return None, None, f"VMSnapshot {ref} does not exist"
    st = snap.status
    if st.get("phase") == "Failed":
        return None, None, f"VMSnapshot {ref} failed and is invalid to use"
    if not st.get("readyToUse"):
        return None, None, f"VMSnapshot {ref} not ready"
    cref = key(restore.namespace, str(st.get("virtualMachineSnapshotContentName") or ""))
    content = cluster.resources[ResourceKind.SNAPSHOT_CONTENT].get(cref)
    if content is None:
        return None, None, f"VMSnapshotContent {cref} does not exist"
    if not content.status.get("readyToUse"):
        return None, None, f"VMSnapshotContent {cref} not ready"
    vm = (content.spec.get("source") or {}).get("virtualMachine")
    if not isinstance(vm, dict):
        return None, None, "unexpected snapshot source"
    return snap, vm, ""


def restored(vm: VMView | None, restore: ResourceView) -> bool:
    annotations = ((vm.manifest.get("metadata") or {}).get("annotations") or {}) if vm else {}
    return annotations.get(LAST_RESTORE) == _restore_key(restore)


def reconcile_restore(cluster: Cluster, restore: ResourceView, ctx: Context) -> list[Decision]:
    old = restore.status
    if old.get("complete") or _failed(old):
        return []
    if not old:
        status = {
            "complete": False,
            "conditions": _conditions(
                {},
                [("Progressing", "True", INITIALIZING), ("Ready", "False", INITIALIZING)],
                ctx.now,
            ),
        }
        return emit.status_change(ResourceKind.RESTORE, restore, status, ctx)
    status = {k: v for k, v in old.items() if k != "conditions"}

    def conditions(*conds: tuple[str, str, str]) -> list[Decision]:
        status["conditions"] = _conditions(old, list(conds), ctx.now)
        return emit.status_change(ResourceKind.RESTORE, restore, status, ctx)

    def error(text: str) -> list[Decision]:
        return conditions(("Progressing", "False", text), ("Ready", "False", text))

    target_name = str((restore.spec.get("target") or {}).get("name") or "")
    if (ahead := _restore_ahead(cluster, restore)) is not None:
        # KubeVirt's webhook refuses the second one; two that raced past it go one by one
        return error(f'VirtualMachineRestore "{ahead}" in progress')
    target = cluster.vms.get(key(restore.namespace, target_name))
    if target is not None and target.deleted_at is not None:
        target = None
    vmi = cluster.vmi_of_vm(target) if target is not None else None
    if target is not None and vmi is not None and not vmi.final:
        return _target_not_ready(restore, target, vmi.uid, ctx, conditions)
    snap, snap_vm, err = _snapshot_content(cluster, restore)
    if snap is None or snap_vm is None:
        return error(err)
    done = restored(target, restore)
    if target is not None and not done and snap.status.get("sourceUID") != target.uid:
        return error(EXISTING_TARGET)
    content = _content_of(cluster, snap)
    backups = _backups(content) if content is not None and not done else []
    if backups and not old.get("restores"):
        if (old.get("error") or {}).get("message"):
            status.pop("error", None)
            return conditions(
                ("Progressing", "False", FAILED),
                ("Ready", "False", FAILED),
                ("Failure", "True", VOLUME_COPY_FAILED + old["error"]["message"]),
            )
        copies = [
            VolumeCopy(c.volume, _restore_claim(restore, c.volume), c.backup) for c in backups
        ]
        waiting = conditions(
            ("Progressing", "True", RESTORING_VOLUMES), ("Ready", "False", RESTORING_VOLUMES)
        )
        if _reason(old, "Progressing") == RESTORING_VOLUMES:
            return waiting  # asked already: the handler is copying
        return (
            _request_copies(cluster, ResourceKind.RESTORE, restore, copies, None, ctx, restore=True)
            + waiting
        )
    made: list[Decision] = []
    if backups:
        snap_vm = _with_claims(
            snap_vm, {r["volumeName"]: r["persistentVolumeClaim"] for r in old["restores"]}
        )
        made = _restored_claims(cluster, restore, content, old["restores"], ctx)
    if done:
        status["complete"] = True
        status["restoreTime"] = old.get("restoreTime") or rfc3339(ctx.now)
        return conditions(("Progressing", "False", COMPLETE), ("Ready", "True", COMPLETE))
    try:
        out = [*made, _restore_target(restore, target, snap_vm, ctx)]
    except PatchError as e:
        return error(f"error patching VM {target_name}: {e}")
    if target is not None:
        dropped = _dropped_templates(target.manifest.get("spec") or {}, snap_vm.get("spec") or {})
        if dropped:
            status["deletedDataVolumes"] = dropped
    return conditions(("Progressing", "True", UPDATING), ("Ready", "False", WAITING_UPDATE)) + out


def _reason(status: JSON, ctype: str) -> str:
    for c in status.get("conditions") or []:
        if c.get("type") == ctype:
            return str(c.get("reason") or "")
    return ""


def _with_claims(snap_vm: JSON, claims: dict[str, str]) -> JSON:
    """The snapshot's VM with its persistent volumes on the restored claims (a dataVolume
    volume and its template renamed alike)."""
    vm = copy.deepcopy(snap_vm)
    spec = vm.setdefault("spec", {})
    renamed: dict[str, str] = {}
    for v in ((spec.get("template") or {}).get("spec") or {}).get("volumes") or []:
        claim = claims.get(v.get("name"))
        if not claim:
            continue
        if "persistentVolumeClaim" in v:
            v["persistentVolumeClaim"] = {**(v["persistentVolumeClaim"] or {}), "claimName": claim}
        elif "dataVolume" in v:
            renamed[str((v["dataVolume"] or {}).get("name"))] = claim
            v["dataVolume"] = {**(v["dataVolume"] or {}), "name": claim}
    for t in spec.get("dataVolumeTemplates") or []:
        meta = t.get("metadata") or {}
        if meta.get("name") in renamed:
            t["metadata"] = {**meta, "name": renamed[meta["name"]]}
    return vm


def _target_not_ready(
    restore: ResourceView, target: VMView, vmi_uid: str, ctx: Context, conditions: Any
) -> list[Decision]:
    policy = restore.spec.get("targetReadinessPolicy") or "WaitGracePeriodAndFail"
    waiting = (("Progressing", "False", WAITING_TARGET), ("Ready", "False", WAITING_TARGET))
    match policy:
        case "FailImmediate":
            return conditions(
                ("Progressing", "False", FAILED),
                ("Ready", "False", FAILED),
                ("Failure", "True", TARGET_NOT_READY),
            )
        case "StopTarget":
            agg = emit.vm_aggregate(target)
            stop_key = f"restore-stop/{restore.uid}/{vmi_uid}"
            out: list[Decision] = conditions(*waiting)
            if target.run_strategy != "Halted":
                halted = VMRunStrategyChanged(
                    meta=emit.meta(ctx, agg, f"{stop_key}/halted"), run_strategy="Halted"
                )
                out.append(Decision(halted, occ=False))
            if not target.requests:
                request = VMStopRequested(meta=emit.meta(ctx, agg, stop_key), vmi_uid=vmi_uid)
                out.append(Decision(request, occ=False))
            return out
        case "WaitEventually":
            return conditions(*waiting)
        case _:
            if ctx.now > restore.created_at + RESTORE_GRACE:
                return conditions(
                    ("Progressing", "False", FAILED),
                    ("Ready", "False", FAILED),
                    ("Failure", "True", GRACE_EXCEEDED),
                )
            return conditions(*waiting)


def _dropped_templates(old_spec: JSON, new_spec: JSON) -> list[str]:
    """KubeVirt's deletedDataVolumes: the target's dataVolumeTemplates the restored spec
    no longer has."""
    new = {t.get("metadata", {}).get("name") for t in new_spec.get("dataVolumeTemplates") or []}
    return [
        name
        for t in old_spec.get("dataVolumeTemplates") or []
        if (name := (t.get("metadata") or {}).get("name")) and name not in new
    ]


class PatchError(ValueError):
    """A restore's JSON patch that does not apply to the restored VM."""


def apply_patches(manifest: JSON, patches: list[Any]) -> JSON:
    """A restore's `spec.patches` (each a JSON patch operation as a string) applied in
    order to the VM it creates, as KubeVirt's patchVM does. A `replace` of a field the VM
    does not have sets it (a clone blanks every interface's macAddress, set or not)."""
    out = copy.deepcopy(manifest)
    for raw in patches:
        try:
            op = json.loads(str(raw))
        except ValueError as e:
            raise PatchError(f"patch is not valid JSON ({raw})") from e
        ops = op if isinstance(op, list) else [op]
        for one in ops:
            try:
                out = jsonpatch.apply_patch(out, [one])
            except jsonpatch.JsonPatchConflict:
                if not isinstance(one, dict) or one.get("op") != "replace":
                    raise PatchError(f"cannot apply {json.dumps(one)}") from None
                try:
                    out = jsonpatch.apply_patch(out, [{**one, "op": "add"}])
                except (jsonpatch.JsonPatchException, jsonpatch.JsonPointerException) as e:
                    raise PatchError(f"cannot apply {json.dumps(one)}: {e}") from None
            except (jsonpatch.JsonPatchException, jsonpatch.JsonPointerException) as e:
                raise PatchError(f"cannot apply {json.dumps(one)}: {e}") from None
    return out


def _restore_ahead(cluster: Cluster, restore: ResourceView) -> str | None:
    """The name of an unfinished restore onto the same target made before this one (by
    creation time, then name: the same answer whatever order events come in), if any."""
    target = restore.spec.get("target")
    mine = (restore.created_at, restore.name)
    for other in cluster.resources[ResourceKind.RESTORE].values():
        if other.namespace != restore.namespace or (other.created_at, other.name) >= mine:
            continue
        done = other.status.get("complete") or _failed(other.status) or other.marked
        if not done and other.spec.get("target") == target:
            return other.name
    return None


def _restore_target(
    restore: ResourceView, target: VMView | None, snap_vm: JSON, ctx: Context
) -> Decision:
    spec = copy.deepcopy(snap_vm.get("spec") or {})
    decision_key = f"vmrestore/{restore.uid}"
    ev: Event
    if target is None:  # a new VM, Halted (KubeVirt creates it stopped)
        if "running" in spec:
            spec["running"] = False
        else:
            spec["runStrategy"] = "Halted"
        src_meta = snap_vm.get("metadata") or {}
        uid = emit.new_uid(ctx, decision_key)
        metadata: JSON = {"name": restore.spec["target"]["name"], "namespace": restore.namespace}
        metadata["uid"] = uid
        if src_meta.get("labels"):
            metadata["labels"] = dict(src_meta["labels"])
        metadata["annotations"] = {
            **(src_meta.get("annotations") or {}),
            LAST_RESTORE: _restore_key(restore),
        }
        manifest = {
            "apiVersion": "kubevirt.io/v1",
            "kind": "VirtualMachine",
            "metadata": metadata,
            "spec": spec,
        }
        manifest = apply_patches(manifest, restore.spec.get("patches") or [])
        firmware = ((manifest["spec"].get("template") or {}).get("spec") or {}).get("domain", {})
        firmware = firmware.get("firmware") if isinstance(firmware, dict) else None
        if isinstance(firmware, dict) and not firmware.get("uuid"):
            # the api gives a VM without one its own (KubeVirt's VM mutator likewise)
            firmware["uuid"] = emit.new_uid(ctx, f"{decision_key}/firmware")
        agg = Aggregate(kind=Kind.VM, namespace=restore.namespace, name=metadata["name"], uid=uid)
        ev = VMCreated(meta=emit.meta(ctx, agg, decision_key), manifest=manifest)
        return Decision(ev)  # OCC: no such VM yet
    manifest = target.manifest
    old_spec = manifest.get("spec") or {}
    # an existing VM keeps its run strategy (KubeVirt's generateRestoredVMSpec)
    spec.pop("running", None)
    spec.pop("runStrategy", None)
    if "running" in old_spec:
        spec["running"] = False
    else:
        spec["runStrategy"] = target.run_strategy
    meta = dict(manifest.get("metadata") or {})
    meta["annotations"] = {**(meta.get("annotations") or {}), LAST_RESTORE: _restore_key(restore)}
    manifest = {**manifest, "metadata": meta, "spec": spec}
    ev = VMUpdated(meta=emit.meta(ctx, emit.vm_aggregate(target), decision_key), manifest=manifest)
    return Decision(ev)
