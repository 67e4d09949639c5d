"""The claims' controller, pure: Kubernetes' PV binder and provisioner and its
StorageObjectInUseProtection, for the classes `kinds/storage.py` declares.

- Binding. An Immediate class's claim binds at once; a WaitForFirstConsumer class's once a
  consumer is placed: the first VMI that names it is scheduled (or a DataVolume's importer
  is given a node), which writes the node into `volume.kubernetes.io/selected-node`. The
  claim then gets `spec.volumeName: pvc-<claim uid>` and the binder's annotations, and,
  decided on that, the PersistentVolume (a local one with the node's affinity, a shared one
  without) and its status `Bound` with its access modes and capacity. A bound local claim
  pins every later VMI to its node (the scheduler reads `projections/storage.py`).
- Protection. A claim is created with `kubernetes.io/pvc-protection`; once its deletion
  began the finalizer is removed only when no VMI that has not ended names it, and the
  garbage collector finishes the deletion. Its volume goes with it (reclaim policy Delete;
  Retain keeps it, Released).
- Expansion. A bound claim whose request grew (its class allows expansion) gets the new
  capacity; the launcher grows the disk when a VMI next prepares it (qemu-img resize).

Each decision is keyed by the claim's uid and the version it was decided on, so a repeat
is a duplicate."""

from __future__ import annotations

from typing import Any

from events.catalog import (
    MetadataChanged,
    ResourceCreated,
    ResourceDeleted,
    ResourceStatusChanged,
    ResourceUpdated,
    VolumeReclaimRequested,
)
from events.envelope import Context, Decision
from events.meta import CLUSTER_SCOPE, Aggregate, ResourceKind
from projections import storage
from projections.cluster import Cluster
from projections.views import ResourceView
from services.controller import emit

JSON = dict[str, Any]


def reconcile_claim(
    cluster: Cluster, claim: ResourceView, users: frozenset[str], ctx: Context
) -> list[Decision]:
    if storage.deleting(claim):
        # a VMI not placed yet does not hold the claim (it waits for it: Kubernetes'
        # protection counts only scheduled pods)
        placed = frozenset(k for k in users if (v := cluster.vmis.get(k)) and v.node)
        return _unprotect(claim, placed, ctx)
    klass = storage.find_class(cluster, str(claim.spec.get("storageClassName") or ""))
    if klass is None:
        return emit.status_change(ResourceKind.PVC, claim, {"phase": "Pending"}, ctx)
    if not claim.spec.get("volumeName"):
        node = storage.claim_node(claim)
        if storage.binding_mode(klass) == storage.WFFC and not storage.is_shared(klass):
            node = node or _consumer_node(cluster, users)
            if not node:
                return emit.status_change(ResourceKind.PVC, claim, {"phase": "Pending"}, ctx)
        return [_bind(claim, klass, node, ctx)]
    out: list[Decision] = []
    pv = cluster.resources[ResourceKind.PV].get(str(claim.spec["volumeName"]))
    if pv is None and claim.spec["volumeName"] == storage.pv_name(claim):
        out.append(_provision(claim, klass, ctx))
    capacity = str((claim.status.get("capacity") or {}).get("storage") or "")
    wanted = storage.requested(claim.spec)
    grows = bool(klass.manifest.get("allowVolumeExpansion"))
    if not capacity or (grows and storage.size_bytes(wanted) > storage.size_bytes(capacity)):
        capacity = wanted
    status = {
        "phase": "Bound",
        "accessModes": storage.access_modes(claim),
        "capacity": {"storage": capacity},
    }
    return out + emit.status_change(ResourceKind.PVC, claim, status, ctx)


def _consumer_node(cluster: Cluster, users: frozenset[str]) -> str:
    """The node of the first scheduled VMI that uses the claim ("" when none is yet)."""
    for k in sorted(users):
        vmi = cluster.vmis.get(k)
        if vmi is not None and vmi.node:
            return vmi.node
    return ""


def _bind(claim: ResourceView, klass: ResourceView, node: str, ctx: Context) -> Decision:
    manifest = claim.manifest
    meta = dict(manifest.get("metadata") or {})
    annotations = dict(meta.get("annotations") or {})
    annotations[storage.BIND_COMPLETED] = "yes"
    annotations[storage.BOUND_BY_CONTROLLER] = "yes"
    annotations[storage.STORAGE_PROVISIONER] = str(klass.manifest.get("provisioner") or "")
    if node:
        annotations[storage.SELECTED_NODE] = node
    meta["annotations"] = annotations
    spec = {**(manifest.get("spec") or {}), "volumeName": storage.pv_name(claim)}
    manifest = {**manifest, "metadata": meta, "spec": spec}
    agg = emit.resource_aggregate(ResourceKind.PVC, claim)
    event = ResourceUpdated(meta=emit.meta(ctx, agg, f"pvc-bind/{claim.uid}"), manifest=manifest)
    return Decision(event)


def _provision(claim: ResourceView, klass: ResourceView, ctx: Context) -> Decision:
    """The claim's PersistentVolume, as a provisioner makes it."""
    name = storage.pv_name(claim)
    node = storage.claim_node(claim)
    provisioner = str(klass.manifest.get("provisioner") or "")
    path = f"volumes/{claim.namespace}/{claim.name}.qcow2"
    spec: JSON = {
        "capacity": {"storage": storage.requested(claim.spec)},
        "accessModes": storage.access_modes(claim),
        "persistentVolumeReclaimPolicy": str(klass.manifest.get("reclaimPolicy") or "Delete"),
        "storageClassName": klass.name,
        "volumeMode": str(claim.spec.get("volumeMode") or "Filesystem"),
        "claimRef": {
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "namespace": claim.namespace,
            "name": claim.name,
            "uid": claim.uid,
        },
    }
    if node:
        spec["local"] = {"path": path}
        spec["nodeAffinity"] = {
            "required": {
                "nodeSelectorTerms": [
                    {
                        "matchExpressions": [
                            {"key": "kubernetes.io/hostname", "operator": "In", "values": [node]}
                        ]
                    }
                ]
            }
        }
    else:
        spec["hostPath"] = {"path": path, "type": ""}
    manifest: JSON = {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {
            "name": name,
            "uid": emit.new_uid(ctx, f"pv/{claim.uid}"),
            "annotations": {
                storage.PROVISIONED_BY: provisioner,
                storage.CLAIM_OF_PV: f"{claim.namespace}/{claim.name}",
            },
        },
        "spec": spec,
        "status": {"phase": "Bound"},
    }
    agg = Aggregate(kind=ResourceKind.PV, namespace=CLUSTER_SCOPE, name=name)
    meta = emit.meta(ctx, agg, f"pv/{claim.uid}")
    return Decision(ResourceCreated(meta=meta, manifest=manifest), expected=0)


def _unprotect(claim: ResourceView, users: frozenset[str], ctx: Context) -> list[Decision]:
    fins = list((claim.manifest.get("metadata") or {}).get("finalizers") or [])
    if storage.PVC_PROTECTION not in fins or users:
        return []
    metadata = {
        k: v
        for k, v in (claim.manifest.get("metadata") or {}).items()
        if k in ("labels", "annotations", "ownerReferences", "managedFields")
    }
    rest = [f for f in fins if f != storage.PVC_PROTECTION]
    if rest:
        metadata["finalizers"] = rest
    agg = emit.resource_aggregate(ResourceKind.PVC, claim)
    meta = emit.meta(ctx, agg, f"pvc-unprotect/{claim.uid}")
    return [Decision(MetadataChanged(meta=meta, metadata=metadata))]


def released(cluster: Cluster, claim_uid: str, ctx: Context) -> list[Decision]:
    """A deleted claim's volume: Released and kept (reclaim policy Retain), or its disk
    deleted by the node that holds it (Delete: `VolumeReclaimRequested`, `reclaimed`
    deletes the PV once the disk is gone). Storage every node reaches goes to the first
    responsive node; with none, the PV goes at once (no handler could delete the disk)."""
    name = f"pvc-{claim_uid}"
    pv = cluster.resources[ResourceKind.PV].get(name)
    if pv is None:
        return []
    agg = Aggregate(kind=ResourceKind.PV, namespace=CLUSTER_SCOPE, name=name, uid=pv.uid)
    if pv.spec.get("persistentVolumeReclaimPolicy") == "Retain":
        if pv.status.get("phase") == "Released":
            return []
        meta = emit.meta(ctx, agg, f"pv-released/{pv.uid}")
        return [Decision(ResourceStatusChanged(meta=meta, status={"phase": "Released"}))]
    node = _volume_node(cluster, pv)
    claim = pv.spec.get("claimRef") or {}
    if not node or not claim.get("name"):
        meta = emit.meta(ctx, agg, f"pv-delete/{pv.uid}")
        return [Decision(ResourceDeleted(meta=meta), occ=False)]
    meta = emit.meta(ctx, agg, f"pv-reclaim/{pv.uid}", node=node)
    ns, claim_name = str(claim.get("namespace") or ""), str(claim["name"])
    return [Decision(VolumeReclaimRequested(meta=meta, namespace=ns, claim=claim_name), occ=False)]


def _volume_node(cluster: Cluster, pv: ResourceView) -> str:
    """The node whose handler deletes the volume's disk: a local volume's own, else the
    first responsive node ("" when there is none)."""
    affinity = (pv.spec.get("nodeAffinity") or {}).get("required") or {}
    for term in affinity.get("nodeSelectorTerms") or []:
        for expr in term.get("matchExpressions") or []:
            if expr.get("key") == "kubernetes.io/hostname" and expr.get("values"):
                return str(expr["values"][0])
    live = sorted(n.name for n in cluster.nodes.values() if not n.unresponsive)
    return live[0] if live else ""


def reclaimed(cluster: Cluster, pv_name: str, error: str, ctx: Context) -> list[Decision]:
    """The disk of a volume of reclaim policy Delete is gone: the PV goes. One that could
    not be deleted stays, phase Failed with the deleter's words (Kubernetes' deleter)."""
    pv = cluster.resources[ResourceKind.PV].get(pv_name)
    if pv is None:
        return []
    agg = Aggregate(kind=ResourceKind.PV, namespace=CLUSTER_SCOPE, name=pv_name, uid=pv.uid)
    if error:
        if pv.status.get("phase") == "Failed":
            return []
        meta = emit.meta(ctx, agg, f"pv-failed/{pv.uid}")
        status = {"phase": "Failed", "message": error}
        return [Decision(ResourceStatusChanged(meta=meta, status=status))]
    meta = emit.meta(ctx, agg, f"pv-delete/{pv.uid}")
    return [Decision(ResourceDeleted(meta=meta), occ=False)]


def restored_claim(
    cluster: Cluster, namespace: str, name: str, like: JSON, k: str, ctx: Context
) -> list[Decision]:
    """A claim a restore (or a clone) filled, made an object when it is not one yet: the
    spec of the claim it was copied from (`like`, without its binding), marked populated
    so a DataVolume of its name adopts it rather than importing over it."""
    if storage.find_claim(cluster, namespace, name) is not None:
        return []
    spec = {k2: v for k2, v in like.items() if k2 != "volumeName"}
    spec.setdefault("accessModes", ["ReadWriteOnce"])
    spec.setdefault("volumeMode", "Filesystem")
    if not storage.requested(spec):
        spec["resources"] = {"requests": {"storage": "1Gi"}}
    if not spec.get("storageClassName"):
        default = storage.default_class(cluster)
        if default is not None:
            spec["storageClassName"] = default.name
    manifest: JSON = {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": emit.new_uid(ctx, k),
            "annotations": {"cdi.kubevirt.io/storage.populatedFor": name},
            "finalizers": [storage.PVC_PROTECTION],
        },
        "spec": spec,
    }
    agg = Aggregate(kind=ResourceKind.PVC, namespace=namespace, name=name)
    return [Decision(ResourceCreated(meta=emit.meta(ctx, agg, k), manifest=manifest), expected=0)]
