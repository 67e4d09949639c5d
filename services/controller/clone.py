"""The VirtualMachineClone controller, pure (KubeVirt's pkg/virt-controller/watch/clone:
clone.go, util.go, vm-target.go).

A clone is a snapshot and a restore, as in KubeVirt, so it copies what a snapshot copies
(in qemu mode the VM's disks, into new claims) and nothing is cloned by a second path:
1. SnapshotInProgress: from a VM, the snapshot `clone-<clone>-snapshot-<vm>-<suffix>`
   (owned by the clone) is created; from a VirtualMachineSnapshot, that snapshot is used.
   Once it is ready to use:
2. RestoreInProgress: the restore `clone-<clone>-restore-<vm>-<suffix>` onto the target
   name (`<vm>-clone-<suffix>` when the clone names none), with the clone's patches:
   every interface's macAddress replaced (`newMacAddresses`, else blank), the firmware's
   serial (`newSMBiosSerial`, else blank) and uuid blanked, and the labels and annotations
   of the VM and of its template that the filters leave out removed. Once complete:
3. CreatingTargetVM, then Succeeded once the target VM exists; the restore (and the
   snapshot the clone took) is then deleted and `snapshotName`/`restoreName` cleared.
A missing source fails the clone (`SourceDoesNotExist`), as does its snapshot deleted
under it (`SnapshotDeleted`); a succeeded clone whose target VM is gone is deleted.

The suffix is derived from the clone's uid (KubeVirt draws it at random), so deciding
again names the same objects. Conditions follow KubeVirt's updateStatus: a condition is
replaced only when its status changes."""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any

from events.catalog import ResourceCreated, ResourceDeleted
from events.envelope import Context, Decision
from events.meta import Aggregate, ResourceKind
from projections.cluster import Cluster, key
from projections.render import rfc3339
from projections.views import ResourceView
from services.controller import emit

JSON = dict[str, Any]
GROUP_VERSION = "clone.kubevirt.io/v1beta1"
SNAPSHOT_VERSION = "snapshot.kubevirt.io/v1beta1"
LAST_RESTORE = "restore.kubevirt.io/lastRestoreUID"
# k8s.io/apimachinery's rand alphabet (no vowels, no look-alikes)
_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"
MAX_NAME = 252  # util.go: a longer generated name becomes "clone-object"

# KubeVirt's phases
UNSET, SNAPSHOTTING, RESTORING = "", "SnapshotInProgress", "RestoreInProgress"
CREATING, SUCCEEDED, FAILED = "CreatingTargetVM", "Succeeded", "Failed"
# condition reasons
PROCESSING, READY, FAILED_REASON = "Still processing", "Ready", "Failed"


def suffix(clone: ResourceView) -> str:
    digest = hashlib.sha256(clone.uid.encode()).digest()
    return "".join(_ALPHABET[b % len(_ALPHABET)] for b in digest[:5])


def _name(clone: ResourceView, *parts: str) -> str:
    name = "-".join(parts)
    if len(name) > MAX_NAME:
        name = "clone-object"
    return f"{name}-{suffix(clone)}"


def snapshot_name(clone: ResourceView, vm: str) -> str:
    return _name(clone, "clone", clone.name, "snapshot", vm)


def restore_name(clone: ResourceView, vm: str) -> str:
    return _name(clone, "clone", clone.name, "restore", vm)


def target_name(clone: ResourceView, vm: str) -> str:
    return str(_target(clone).get("name") or "") or _name(clone, vm, "clone")


def _source(clone: ResourceView) -> JSON:
    return clone.spec.get("source") or {}


def _target(clone: ResourceView) -> JSON:
    return clone.spec.get("target") or {}


def _owner(clone: ResourceView) -> JSON:
    return {
        "apiVersion": GROUP_VERSION,
        "kind": "VirtualMachineClone",
        "name": clone.name,
        "uid": clone.uid,
        "controller": True,
        "blockOwnerDeletion": True,
    }


# --------------------------------------------------------------------- patches
def _escape(k: str) -> str:
    return k.replace("~", "~0").replace("/", "~1")


def _matches(pattern: str, k: str) -> bool:
    """Go's regexp.MatchString: the filter is a regular expression searched anywhere in
    the key (so `*` after a prefix repeats its last character, as in KubeVirt)."""
    try:
        return re.search(pattern, k) is not None
    except re.error:
        return False


def removed_keys(m: dict[str, Any], filters: Any) -> list[str]:
    """The keys the filters leave out: none without filters; a key is kept when a filter
    matches it and no negated filter does (`*` alone matches everything)."""
    if not isinstance(filters, list):
        return []
    regular = [".*" if f == "*" else str(f) for f in filters if not str(f).startswith("!")]
    negated = [str(f)[1:] for f in filters if str(f).startswith("!") and f != "*"]
    kept = {
        k
        for k in m
        if any(_matches(f, k) for f in regular) and not any(_matches(f, k) for f in negated)
    }
    return [k for k in m if k not in kept]


def patches(vm: JSON, spec: JSON) -> list[str]:
    """KubeVirt's generatePatches for the VM a clone restores, then the clone's own."""
    vm_spec = vm.get("spec") or {}
    template = vm_spec.get("template") or {}
    domain = (template.get("spec") or {}).get("domain") or {}
    interfaces = (domain.get("devices") or {}).get("interfaces") or []
    firmware = domain.get("firmware")
    meta = vm.get("metadata") or {}
    tmeta = template.get("metadata") or {}
    new_macs = spec.get("newMacAddresses") or {}
    ops: list[JSON] = []
    base = "/spec/template/spec/domain"
    for i, iface in enumerate(interfaces):
        mac = str(new_macs.get(iface.get("name"), ""))
        ops.append(
            {"op": "replace", "path": f"{base}/devices/interfaces/{i}/macAddress", "value": mac}
        )
    if firmware is not None:
        serial = spec.get("newSMBiosSerial")
        value = "" if serial is None else str(serial)
        ops.append({"op": "replace", "path": f"{base}/firmware/serial", "value": value})
    annotations = {k: v for k, v in (meta.get("annotations") or {}).items() if k != LAST_RESTORE}
    template_spec = spec.get("template") or {}
    for m, filters, path in (
        (meta.get("labels") or {}, spec.get("labelFilters"), "/metadata/labels"),
        (annotations, spec.get("annotationFilters"), "/metadata/annotations"),
        (
            tmeta.get("labels") or {},
            template_spec.get("labelFilters"),
            "/spec/template/metadata/labels",
        ),
        (
            tmeta.get("annotations") or {},
            template_spec.get("annotationFilters"),
            "/spec/template/metadata/annotations",
        ),
    ):
        for k in removed_keys(m, filters):
            ops.append({"op": "remove", "path": f"{path}/{_escape(k)}"})
    if firmware is not None:
        ops.append({"op": "replace", "path": f"{base}/firmware/uuid", "value": ""})
    return [json.dumps(op, separators=(",", ":")) for op in ops] + [
        str(p) for p in spec.get("patches") or []
    ]


# ------------------------------------------------------------------ reconcile
class _Sync:
    """What one pass found (KubeVirt's syncInfoType)."""

    def __init__(self) -> None:
        self.snapshot_name = ""
        self.snapshot_ready = False
        self.restore_name = ""
        self.restore_ready = False
        self.target_name = ""
        self.target_created = False
        self.pvc_bound = False
        self.failing = False


def _snapshot_ready(snap: ResourceView) -> bool:
    return bool(snap.status.get("readyToUse"))


def _restore_progressing(restore: ResourceView) -> bool:
    return not restore.status.get("complete")


def _content_vm(cluster: Cluster, snap: ResourceView) -> JSON | None:
    name = str(snap.status.get("virtualMachineSnapshotContentName") or "")
    content = cluster.resources[ResourceKind.SNAPSHOT_CONTENT].get(key(snap.namespace, name))
    vm = ((content.spec.get("source") or {}) if content else {}).get("virtualMachine")
    return vm if isinstance(vm, dict) else None


def reconcile_clone(cluster: Cluster, clone: ResourceView, ctx: Context) -> list[Decision]:
    st = clone.status
    phase = str(st.get("phase") or UNSET)
    if phase == FAILED:
        return []
    ns = clone.namespace
    snaps = cluster.resources[ResourceKind.SNAPSHOT]
    restores = cluster.resources[ResourceKind.RESTORE]
    if phase == SUCCEEDED:
        target = cluster.vms.get(key(ns, str(st.get("targetName") or "")))
        if target is None or target.deleted_at is not None:
            # KubeVirt deletes a succeeded clone whose target VM is gone
            gone = ResourceDeleted(
                meta=emit.meta(
                    ctx,
                    emit.resource_aggregate(ResourceKind.CLONE, clone),
                    f"clone-gone/{clone.uid}",
                )
            )
            return [Decision(gone)]
    source = _source(clone)
    source_kind, source_name = source.get("kind"), str(source.get("name") or "")
    out: list[Decision] = []
    sync = _Sync()
    from_vm = source_kind == "VirtualMachine"
    if from_vm:
        vm = cluster.vms.get(key(ns, source_name))
        exists = vm is not None and vm.deleted_at is None
    else:
        exists = key(ns, source_name) in snaps
    if not exists and phase != SUCCEEDED:
        sync.failing = True
        return _status(clone, sync, ctx)
    snap_name = str(st.get("snapshotName") or "") or ("" if from_vm else source_name)
    vm_name = source_name
    snap: ResourceView | None = None
    if phase in (UNSET, SNAPSHOTTING):
        if from_vm and not st.get("snapshotName"):
            sync.snapshot_name = snapshot_name(clone, vm_name)
            out.append(_create_snapshot(clone, vm_name, sync.snapshot_name, ctx))
            return _status(clone, sync, ctx) + out
        snap = snaps.get(key(ns, snap_name))
        if snap is None or not _snapshot_ready(snap):
            return _status(clone, sync, ctx)
        sync.snapshot_ready = True
        phase = RESTORING
    if phase == RESTORING:
        snap = snap or snaps.get(key(ns, snap_name))
        if snap is None:
            sync.failing = True
            return _status(clone, sync, ctx)
        if not st.get("restoreName"):
            content_vm = _content_vm(cluster, snap)
            if content_vm is None:
                return _status(clone, sync, ctx)
            name = str((content_vm.get("metadata") or {}).get("name") or vm_name)
            sync.restore_name = restore_name(clone, name)
            out.append(_create_restore(clone, content_vm, name, sync.restore_name, snap.name, ctx))
            return _status(clone, sync, ctx) + out
        restore = restores.get(key(ns, str(st["restoreName"])))
        if restore is None or _restore_progressing(restore):
            return _status(clone, sync, ctx)
        sync.restore_ready = True
        sync.target_name = str((restore.spec.get("target") or {}).get("name") or "")
        phase = CREATING
    if phase == CREATING:
        name = sync.target_name or str(st.get("targetName") or "")
        target = cluster.vms.get(key(ns, name))
        if target is None:
            return _status(clone, sync, ctx)
        sync.target_created = True
    if st.get("restoreName"):
        # the restore's claims exist once it is complete (their copies are done): bound
        sync.pvc_bound = True
        for kind, name, owned in (
            (ResourceKind.RESTORE, str(st["restoreName"]), True),
            (ResourceKind.SNAPSHOT, str(st.get("snapshotName") or ""), from_vm),
        ):
            found = cluster.resources[kind].get(key(ns, name))
            if owned and found is not None:
                ev = ResourceDeleted(
                    meta=emit.meta(
                        ctx, emit.resource_aggregate(kind, found), f"clone-cleanup/{found.uid}"
                    )
                )
                out.append(Decision(ev, occ=False))
    return _status(clone, sync, ctx) + out


def _create_snapshot(clone: ResourceView, vm: str, name: str, ctx: Context) -> Decision:
    decision_key = f"clone-snapshot/{clone.uid}"
    uid = emit.new_uid(ctx, decision_key)
    manifest = {
        "apiVersion": SNAPSHOT_VERSION,
        "kind": "VirtualMachineSnapshot",
        "metadata": {
            "name": name,
            "namespace": clone.namespace,
            "uid": uid,
            "ownerReferences": [_owner(clone)],
        },
        "spec": {"source": {"apiGroup": "kubevirt.io", "kind": "VirtualMachine", "name": vm}},
    }
    agg = Aggregate(kind=ResourceKind.SNAPSHOT, namespace=clone.namespace, name=name, uid=uid)
    return Decision(ResourceCreated(meta=emit.meta(ctx, agg, decision_key), manifest=manifest))


def _create_restore(
    clone: ResourceView, vm: JSON, vm_name: str, name: str, snap: str, ctx: Context
) -> Decision:
    decision_key = f"clone-restore/{clone.uid}"
    uid = emit.new_uid(ctx, decision_key)
    manifest = {
        "apiVersion": SNAPSHOT_VERSION,
        "kind": "VirtualMachineRestore",
        "metadata": {
            "name": name,
            "namespace": clone.namespace,
            "uid": uid,
            "ownerReferences": [_owner(clone)],
        },
        "spec": {
            "target": {
                "apiGroup": "kubevirt.io",
                "kind": "VirtualMachine",
                "name": target_name(clone, vm_name),
            },
            "virtualMachineSnapshotName": snap,
            "patches": patches(vm, clone.spec),
            # KubeVirt's VolumeNamePolicy.ToVolumeRestorePolicy: the policies share names
            **(
                {"volumeRestorePolicy": clone.spec["volumeNamePolicy"]}
                if clone.spec.get("volumeNamePolicy")
                else {}
            ),
        },
    }
    agg = Aggregate(kind=ResourceKind.RESTORE, namespace=clone.namespace, name=name, uid=uid)
    return Decision(ResourceCreated(meta=emit.meta(ctx, agg, decision_key), manifest=manifest))


def _condition(ctype: str, status: str, reason: str, now: float) -> JSON:
    return {
        "type": ctype,
        "status": status,
        "reason": reason,
        "lastProbeTime": None,
        "lastTransitionTime": rfc3339(now),
    }


def _update(conds: list[JSON], new: JSON) -> list[JSON]:
    """KubeVirt's updateCondition without the reason: replaced when its status changes."""
    out = list(conds)
    for i, c in enumerate(out):
        if c.get("type") == new["type"]:
            if c.get("status") != new["status"]:
                out[i] = new
            return out
    return [*out, new]


def _status(clone: ResourceView, sync: _Sync, ctx: Context) -> list[Decision]:
    """KubeVirt's updateStatus: the phase moves as far as the pass found, then the
    conditions (a failing clone's Failed ones, then "Still processing" where the status
    differs, then Ready once Succeeded)."""
    old = clone.status
    st: JSON = {k: v for k, v in old.items() if k != "conditions"}
    conds: list[JSON] = list(old.get("conditions") or [])
    now = ctx.now

    def both(status: str, reason: str) -> None:
        nonlocal conds
        ready = "True" if status == "False" and reason == READY else "False"
        conds = _update(conds, _condition("Progressing", status, reason, now))
        conds = _update(conds, _condition("Ready", ready, reason, now))

    if sync.failing:
        st["phase"] = FAILED
        both("False", FAILED_REASON)
    both("True", PROCESSING)
    phase = st.get("phase") or UNSET
    if phase == UNSET:
        phase = SNAPSHOTTING
    if phase == SNAPSHOTTING:
        if sync.snapshot_name:
            st["snapshotName"] = sync.snapshot_name
        if sync.snapshot_ready:
            phase = RESTORING
    if phase == RESTORING:
        if sync.restore_name:
            st["restoreName"] = sync.restore_name
        if sync.restore_ready:
            phase = CREATING
    if phase == CREATING:
        if sync.target_name:
            st["targetName"] = sync.target_name
        if sync.target_created:
            phase = SUCCEEDED
    if phase == SUCCEEDED:
        both("False", READY)
    st["phase"] = phase
    if sync.pvc_bound:
        st.pop("snapshotName", None)
        st.pop("restoreName", None)
    # a condition the pass left as it was keeps its transition time (KubeVirt's pass
    # re-stamps it, once per event; here every tick would)
    before = {c.get("type"): c for c in old.get("conditions") or []}
    st["conditions"] = [
        prev
        if (prev := before.get(c["type"])) is not None
        and (prev.get("status"), prev.get("reason")) == (c["status"], c["reason"])
        else c
        for c in conds
    ]
    return emit.status_change(ResourceKind.CLONE, clone, st, ctx)
