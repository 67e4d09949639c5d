"""CDI's DataVolume controller, pure (containerized-data-importer's import, clone and
blank controllers, one importer per DataVolume).

- A VM's `spec.dataVolumeTemplates` become DataVolumes of their names, owned by the VM
  (controller reference: the garbage collector deletes them with it), as KubeVirt's VM
  controller makes them.
- A DataVolume makes its claim (same name, owned by it, the spec's `storage` or `pvc`,
  ReadWriteOnce when the `storage` form names no access mode, CDI's annotations); phase
  `Pending` with Bound False until the claim binds. A WaitForFirstConsumer claim is given
  the importer's node (CDI's importer pod is its first consumer).
- Once bound, `ImportRequested` goes to the handler of the claim's node (any schedulable
  node for shared storage): http (the URL), blank (an empty disk), pvc (a clone of
  another claim's disk), registry (a containerDisk of the catalogue). The handler's
  `ImportProgressed` and `ImportFinished` are folded into the status
  (`projections/datavolumes.py`); the controller mirrors the phase onto the claim's
  annotations (`cdi.kubevirt.io/storage.pod.phase`, `...condition.running.reason`).
- `sourceRef` names a DataSource: the claim it names is cloned. A DataSource is Ready
  once that claim holds its data.
- A claim of its name it did not make (a restore's, marked
  `cdi.kubevirt.io/storage.populatedFor`, or one a user made) is adopted as populated:
  Succeeded, nothing imported over it.
- A claim no DataVolume owns that carries `cdi.kubevirt.io/storage.upload.target` (CDI's
  upload controller, `virtctl image-upload pvc`): once bound (a WaitForFirstConsumer one
  is given the upload server's node), `ImportRequested` with an upload source on the
  claim's aggregate goes to its node; the steps of the upload are folded into CDI's
  annotations on the claim (`projections/datavolumes.py: claim_upload_notes`)."""

from __future__ import annotations

from typing import Any

from events.catalog import ImportRequested, ResourceCreated, ResourceUpdated
from events.envelope import Context, Decision
from events.meta import Aggregate, ResourceKind
from projections import datavolumes as dvs
from projections import storage
from projections.cluster import Cluster, key
from projections.views import ResourceView, VMView
from services.controller import emit

JSON = dict[str, Any]
TEMPLATES = b'"dataVolumeTemplates"'
_DONE = (dvs.SUCCEEDED, dvs.FAILED)
_REQUESTED = (
    dvs.SCHEDULED,
    dvs.IN_PROGRESS,
    dvs.CLONE_SCHEDULED,
    dvs.CLONE_IN_PROGRESS,
    dvs.UPLOAD_SCHEDULED,
    dvs.UPLOAD_READY,
    *_DONE,
)


# ------------------------------------------------------------- VM templates
def reconcile_templates(cluster: Cluster, vm: VMView, ctx: Context) -> list[Decision]:
    """The DataVolumes a VM's templates ask for and that do not exist yet."""
    if TEMPLATES not in vm.manifest_json or vm.deleted_at is not None:
        return []
    out: list[Decision] = []
    table = cluster.resources[ResourceKind.DATA_VOLUME]
    for template in (vm.manifest.get("spec") or {}).get("dataVolumeTemplates") or []:
        meta = dict(template.get("metadata") or {})
        name = str(meta.get("name") or "")
        if not name or key(vm.namespace, name) in table:
            continue
        owner = {
            "apiVersion": "kubevirt.io/v1",
            "kind": "VirtualMachine",
            "name": vm.name,
            "uid": vm.uid,
            "controller": True,
            "blockOwnerDeletion": True,
        }
        k = f"dv-template/{vm.uid}/{name}"
        metadata = {
            **{f: meta[f] for f in ("labels", "annotations") if meta.get(f)},
            "name": name,
            "namespace": vm.namespace,
            "uid": emit.new_uid(ctx, k),
            "ownerReferences": [owner],
        }
        out.append(create(vm.namespace, name, metadata, template, k, ctx))
    return out


def create(namespace: str, name: str, metadata: JSON, template: JSON, k: str, ctx: Context
           ) -> Decision:  # fmt: skip
    """A DataVolume made from a template's spec (a VM's, a DataImportCron's), once: it must
    not exist (`expected=0`), and its id and uid are keyed by `k`."""
    manifest = {
        "apiVersion": "cdi.kubevirt.io/v1beta1",
        "kind": "DataVolume",
        "metadata": metadata,
        "spec": dict(template.get("spec") or {}),
    }
    agg = Aggregate(kind=ResourceKind.DATA_VOLUME, namespace=namespace, name=name)
    created = ResourceCreated(meta=emit.meta(ctx, agg, k), manifest=manifest)
    return Decision(created, expected=0)


# --------------------------------------------------------------- DataVolumes
def reconcile_dv(cluster: Cluster, dv: ResourceView, ctx: Context) -> list[Decision]:
    claim = storage.find_claim(cluster, dv.namespace, dv.name)
    phase = str(dv.status.get("phase") or "")
    source = source_of(cluster, dv)
    if claim is None:
        if phase in _DONE:
            return []  # its claim was deleted after: nothing to fill again
        if source is None:  # its DataSource is not there (yet)
            return _pending(dv, False, ctx)
        return [_claim(cluster, dv, source, ctx), *_pending(dv, False, ctx)]
    if storage.annotations_of(claim).get(dvs.CREATED_FOR) != dv.uid:
        return _adopt(claim, dv, ctx)
    out = _annotate(claim, dv, phase, ctx)
    if phase in _REQUESTED:
        return out
    if not storage.bound(claim):
        if not storage.claim_node(claim) and not claim.spec.get("volumeName"):
            node = _importer_node(cluster, claim)
            if node and _waits_for_consumer(cluster, claim) and not out:
                out.append(_select(claim, node, ctx))
        return out + _pending(dv, False, ctx)
    node = storage.claim_node(claim) or _importer_node(cluster, claim)
    if not node:
        return out + _pending(dv, True, ctx)
    if source is None:
        return out + _pending(dv, True, ctx)
    size = str((claim.status.get("capacity") or {}).get("storage") or "")
    agg = emit.resource_aggregate(ResourceKind.DATA_VOLUME, dv)
    meta = emit.meta(ctx, agg, f"dv-import/{dv.uid}", node=node)
    return [*out, Decision(ImportRequested(meta=meta, claim=claim.name, source=source, size=size))]


def _adopt(claim: ResourceView, dv: ResourceView, ctx: Context) -> list[Decision]:
    """A claim of the DataVolume's name it did not make (a restore's, a user's) is taken
    as populated: the DataVolume succeeds without importing over it."""
    running = ("False", "Completed", dvs.COMPLETE)
    status: JSON = {
        "phase": dvs.SUCCEEDED,
        "claimName": dv.name,
        "restartCount": 0,
        "progress": "100.0%",
        "conditions": dvs.conditions(
            dv.status, dv.name, storage.bound(claim), True, running, ctx.now
        ),
    }
    return emit.status_change(ResourceKind.DATA_VOLUME, dv, status, ctx)


def _waits_for_consumer(cluster: Cluster, claim: ResourceView) -> bool:
    klass = storage.find_class(cluster, str(claim.spec.get("storageClassName") or ""))
    return klass is not None and storage.binding_mode(klass) == storage.WFFC


def _importer_node(cluster: Cluster, claim: ResourceView) -> str:
    """Where the importer runs: the first schedulable node by name."""
    for name in sorted(cluster.nodes):
        node = cluster.nodes[name]
        if node.schedulable:
            return name
    return ""


def _pending(dv: ResourceView, bound: bool, ctx: Context) -> list[Decision]:
    old = dv.status
    status: JSON = {
        "phase": dvs.PENDING,
        "claimName": dv.name,
        "restartCount": 0,
        "progress": "N/A",
        "conditions": dvs.conditions(old, dv.name, bound, False, ("False", "", ""), ctx.now),
    }
    return emit.status_change(ResourceKind.DATA_VOLUME, dv, status, ctx)


def source_of(cluster: Cluster, dv: ResourceView) -> JSON | None:
    """The DataVolume's source: `spec.source`, or the claim its `sourceRef` DataSource
    names (a clone of it); None while that DataSource does not exist."""
    source = dict(dv.spec.get("source") or {})
    if source:
        return source
    ref = dv.spec.get("sourceRef") or {}
    if ref.get("kind") != "DataSource":
        return None
    ds = cluster.resources[ResourceKind.DATA_SOURCE].get(
        key(str(ref.get("namespace") or dv.namespace), str(ref.get("name") or ""))
    )
    pvc = ((ds.spec.get("source") or {}).get("pvc") or {}) if ds is not None else {}
    if ds is None or not pvc.get("name"):
        return None
    return {"pvc": {"namespace": str(pvc.get("namespace") or ds.namespace), "name": pvc["name"]}}


def reconcile_source(cluster: Cluster, ds: ResourceView, ctx: Context) -> list[Decision]:
    """A DataSource is Ready once the claim it names holds its data (bound, and its
    DataVolume, if it has one, succeeded)."""
    pvc = (ds.spec.get("source") or {}).get("pvc") or {}
    ns, name = str(pvc.get("namespace") or ds.namespace), str(pvc.get("name") or "")
    claim = storage.find_claim(cluster, ns, name) if name else None
    dv = cluster.resources[ResourceKind.DATA_VOLUME].get(key(ns, name))
    ready = claim is not None and (dv is None or dv.status.get("phase") == dvs.SUCCEEDED)
    reason = "Ready" if ready else ("NotFound" if claim is None else "NotReady")
    status: JSON = {
        "source": dict(ds.spec.get("source") or {}),
        "conditions": [
            dvs.condition(ds.status, "Ready", "True" if ready else "False", reason, "", ctx.now)
        ],
    }
    return emit.status_change(ResourceKind.DATA_SOURCE, ds, status, ctx)


def _claim(cluster: Cluster, dv: ResourceView, source: JSON, ctx: Context) -> Decision:
    """The DataVolume's claim, as CDI renders it from `spec.storage` (or `spec.pvc`)."""
    form = dict(dv.spec.get("storage") or dv.spec.get("pvc") or {})
    spec: JSON = {
        "accessModes": form.get("accessModes") or ["ReadWriteOnce"],
        "resources": form.get("resources") or {},
        "volumeMode": form.get("volumeMode") or "Filesystem",
    }
    klass = str(form.get("storageClassName") or "")
    if not klass:
        default = storage.default_class(cluster)
        klass = default.name if default is not None else ""
    if klass:
        spec["storageClassName"] = klass
    if not storage.requested(spec) and (clone := source.get("pvc")):
        src = storage.find_claim(
            cluster, str(clone.get("namespace") or dv.namespace), str(clone.get("name") or "")
        )
        if src is not None:
            spec["resources"] = {"requests": {"storage": storage.requested(src.spec)}}
    kind = next(iter(source), "none")
    annotations: dict[str, str] = {
        dvs.POD_PHASE: "Pending",
        dvs.CREATED_FOR: dv.uid,
        dvs.CONTENT_TYPE: str(dv.spec.get("contentType") or "kubevirt"),
    }
    if kind == "upload":
        annotations[dvs.UPLOAD_TARGET] = ""
    else:
        annotations[dvs.SOURCE] = "none" if kind == "blank" else kind
    if kind == "http":
        annotations[dvs.ENDPOINT] = str((source["http"] or {}).get("url") or "")
    elif kind == "registry":
        annotations[dvs.ENDPOINT] = str((source["registry"] or {}).get("url") or "")
    elif kind == "pvc":
        pvc = source["pvc"] or {}
        annotations[dvs.CLONE_REQUEST] = f"{pvc.get('namespace') or dv.namespace}/{pvc.get('name')}"
    owner = {
        "apiVersion": "cdi.kubevirt.io/v1beta1",
        "kind": "DataVolume",
        "name": dv.name,
        "uid": dv.uid,
        "controller": True,
        "blockOwnerDeletion": True,
    }
    k = f"dv-claim/{dv.uid}"
    manifest = {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {
            "name": dv.name,
            "namespace": dv.namespace,
            "uid": emit.new_uid(ctx, k),
            "labels": {"app": "containerized-data-importer"},
            "annotations": annotations,
            "ownerReferences": [owner],
            "finalizers": [storage.PVC_PROTECTION],
        },
        "spec": spec,
    }
    agg = Aggregate(kind=ResourceKind.PVC, namespace=dv.namespace, name=dv.name)
    return Decision(ResourceCreated(meta=emit.meta(ctx, agg, k), manifest=manifest), expected=0)


def _select(claim: ResourceView, node: str, ctx: Context) -> Decision:
    """The importer's node on a WaitForFirstConsumer claim (the scheduler's annotation)."""
    return _updated(claim, {storage.SELECTED_NODE: node}, f"dv-select/{claim.uid}", ctx)


def _annotate(claim: ResourceView, dv: ResourceView, phase: str, ctx: Context) -> list[Decision]:
    """CDI's importer annotations on the claim, following the DataVolume's phase."""
    if dvs.CREATED_FOR not in storage.annotations_of(claim):
        return []  # a claim the user made: not CDI's to annotate
    pod, reason, message = dvs.pod_phase(phase)
    if phase == dvs.FAILED:
        running: JSON = next(
            (c for c in dv.status.get("conditions") or [] if c.get("type") == "Running"), {}
        )
        message = str(running.get("message") or "")
    wanted = {dvs.POD_PHASE: pod, dvs.RUNNING_REASON: reason, dvs.RUNNING_MESSAGE: message}
    if dvs.UPLOAD_TARGET in storage.annotations_of(claim):
        # the upload server's readiness, which virtctl and the upload proxy wait for
        wanted[dvs.POD_READY] = "true" if phase == dvs.UPLOAD_READY else "false"
        if phase == dvs.SUCCEEDED:
            wanted[dvs.RUNNING_MESSAGE] = dvs.UPLOAD_COMPLETE
    if phase in _DONE:
        wanted[dvs.POPULATED_FOR] = dv.name
    have = storage.annotations_of(claim)
    if all(have.get(k) == v for k, v in wanted.items()):
        return []
    return [_updated(claim, wanted, f"dv-annotate/{claim.uid}/{claim.version}", ctx)]


def _updated(claim: ResourceView, annotations: dict[str, str], k: str, ctx: Context) -> Decision:
    manifest = claim.manifest
    meta = dict(manifest.get("metadata") or {})
    meta["annotations"] = {**(meta.get("annotations") or {}), **annotations}
    agg = emit.resource_aggregate(ResourceKind.PVC, claim)
    event = ResourceUpdated(meta=emit.meta(ctx, agg, k), manifest={**manifest, "metadata": meta})
    return Decision(event)


# --------------------------------------------------- uploads into bare claims
def is_bare_upload(cluster: Cluster, claim: ResourceView) -> bool:
    """A claim that asks for an upload and that no DataVolume makes."""
    if b"storage.upload.target" not in claim.manifest_json:
        return False  # most claims: no decoding of their annotations
    notes = storage.annotations_of(claim)
    return (
        dvs.UPLOAD_TARGET in notes
        and dvs.CREATED_FOR not in notes
        and key(claim.namespace, claim.name) not in cluster.resources[ResourceKind.DATA_VOLUME]
    )


def reconcile_claim_upload(cluster: Cluster, claim: ResourceView, ctx: Context) -> list[Decision]:
    """The upload server's request for a bare upload claim, once (its pod phase annotation
    says it was made); a WaitForFirstConsumer claim is given the node first."""
    if not is_bare_upload(cluster, claim) or storage.deleting(claim):
        return []
    if storage.annotations_of(claim).get(dvs.POD_PHASE):
        return []
    node = storage.claim_node(claim) or _importer_node(cluster, claim)
    if not storage.bound(claim):
        waits = not storage.claim_node(claim) and not claim.spec.get("volumeName")
        if node and waits and _waits_for_consumer(cluster, claim):
            return [_select(claim, node, ctx)]
        return []
    if not node:
        return []
    agg = emit.resource_aggregate(ResourceKind.PVC, claim)
    meta = emit.meta(ctx, agg, f"pvc-upload/{claim.uid}", node=node)
    size = str((claim.status.get("capacity") or {}).get("storage") or "")
    request = ImportRequested(meta=meta, claim=claim.name, source={"upload": {}}, size=size)
    return [Decision(request, occ=False)]
