"""Storage as Kubernetes and CDI have it: StorageClasses and PersistentVolumes
(cluster-scoped), PersistentVolumeClaims (core/v1) and CDI's DataVolumes
(cdi.kubevirt.io/v1beta1). Their controllers are services/controller/storage.py (binding,
protection, volumes) and services/controller/datavolume.py (imports); the disk files are
the handler's (`<disk_dir>/volumes/<ns>/<claim>.qcow2`, services/launcher/storage.py).

Two classes exist from the first start (`ensure_classes`, run by the api's bootstrap):
`local`, the default, a node's own disk (WaitForFirstConsumer: a claim binds where its
first VMI is scheduled and later VMIs follow it there; ReadWriteOnce), and `shared`, a
volume every node reaches (Immediate; ReadWriteMany too, so its VMs live-migrate)."""

from __future__ import annotations

import copy
from typing import Any

from core import admission, intents
from core.context import Append, Outcome, RequestContext
from core.errors import unavailable
from core.kind import SpecRefusal
from events.catalog import UploadReceived
from events.meta import ResourceKind
from events.objects import (
    DataSource,
    DataVolume,
    PersistentVolume,
    PersistentVolumeClaim,
    StorageClass,
)
from events.quantity import parse_quantity
from kinds.resource import resource_spec
from kinds.spec import PrinterColumn, Scope
from projections import datavolumes as dvs
from projections import storage
from projections.cluster import Cluster, key

JSON = dict[str, Any]
CDI = "cdi.kubevirt.io"


# ------------------------------------------------------------------ StorageClass
def _class(name: str, provisioner: str, binding: str, default: bool, path: str) -> JSON:
    annotations = {storage.DEFAULT_CLASS: "true"} if default else {}
    return {
        "apiVersion": "storage.k8s.io/v1",
        "kind": "StorageClass",
        "metadata": {"name": name, "annotations": annotations},
        "provisioner": provisioner,
        "parameters": {"path": path},
        "reclaimPolicy": "Delete",
        "volumeBindingMode": binding,
        "allowVolumeExpansion": True,
    }


#: the classes every cluster has: a node's own disk, and storage every node reaches (one
#: machine: a directory of the data dir all its nodes share; many hosts: an NFS export
#: mounted at the same path on each, docs/KINDS.md)
CLASSES: tuple[JSON, ...] = (
    _class(storage.LOCAL, storage.LOCAL_PROVISIONER, storage.WFFC, True, "volumes"),
    _class(storage.SHARED, storage.SHARED_PROVISIONER, storage.IMMEDIATE, False, "volumes"),
)


def ensure_class(body: JSON, cluster: Cluster, ctx: RequestContext) -> Outcome:
    """A bundled class created when missing (nothing when it exists, or was changed)."""
    name = str(body["metadata"]["name"])
    if name in cluster.resources[ResourceKind.STORAGE_CLASS]:
        return Outcome((), ResourceKind.STORAGE_CLASS, name, 200)
    return intents.create(cluster, STORAGE_CLASS, "", copy.deepcopy(body), ctx)


def _admit_class(_: Cluster, typed: Any, __: str) -> tuple[Any, list[Any]]:
    causes = admission.validate_name(typed.metadata.name, typed.metadata.generate_name)
    if not typed.provisioner:
        causes.append(admission.cause("FieldValueRequired", "Required value", "provisioner"))
    typed.reclaim_policy = typed.reclaim_policy or "Delete"
    typed.volume_binding_mode = typed.volume_binding_mode or storage.IMMEDIATE
    if typed.volume_binding_mode not in (storage.IMMEDIATE, storage.WFFC):
        message = (
            f'Unsupported value: "{typed.volume_binding_mode}": supported values: '
            f'"{storage.IMMEDIATE}", "{storage.WFFC}"'
        )
        causes.append(admission.cause("FieldValueNotSupported", message, "volumeBindingMode"))
    return typed, causes


STORAGE_CLASS = resource_spec(
    group="storage.k8s.io",
    version="v1",
    kind="StorageClass",
    plural="storageclasses",
    singular="storageclass",
    short_names=("sc",),
    categories=(),
    scope=Scope.CLUSTER,
    event_kind=ResourceKind.STORAGE_CLASS,
    object_type=StorageClass,
    admit=_admit_class,
    subresource_group="",
    printer_columns=(
        PrinterColumn("Provisioner", "string", ".provisioner"),
        PrinterColumn("ReclaimPolicy", "string", ".reclaimPolicy"),
        PrinterColumn("VolumeBindingMode", "string", ".volumeBindingMode"),
        PrinterColumn("AllowVolumeExpansion", "boolean", ".allowVolumeExpansion"),
        PrinterColumn("Age", "date", ".metadata.creationTimestamp"),
    ),
)


# ----------------------------------------------------- PersistentVolumeClaim
def _admit_claim(cluster: Cluster, typed: Any, uid: str) -> tuple[Any, list[Any]]:
    """The API server's validation and its admission plugins: DefaultStorageClass (an
    unset class is the default one), StorageObjectInUseProtection (the
    `kubernetes.io/pvc-protection` finalizer), `volumeMode` defaulted to Filesystem. An
    update may only grow the request (on a class that allows expansion); the binder's
    `volumeName` is kept."""
    causes = admission.validate_name(typed.metadata.name, typed.metadata.generate_name)
    spec: JSON = typed.spec
    ns, name = str(typed.metadata.namespace or ""), str(typed.metadata.name or "")
    current = storage.find_claim(cluster, ns, name) if name else None
    if current is not None and current.uid == uid:
        return typed, causes + _claim_update(cluster, current, spec)
    modes = spec.get("accessModes") or []
    if not modes:
        message = "Required value: at least 1 access mode is required"
        causes.append(admission.cause("FieldValueRequired", message, "spec.accessModes"))
    for mode in modes:
        if mode not in storage.ACCESS_MODES:
            supported = ", ".join(f'"{m}"' for m in storage.ACCESS_MODES)
            message = f'Unsupported value: "{mode}": supported values: {supported}'
            causes.append(admission.cause("FieldValueNotSupported", message, "spec.accessModes"))
    size = storage.requested(spec)
    if not size:
        causes.append(
            admission.cause("FieldValueRequired", "Required value", "spec.resources[storage]")
        )
    else:
        try:
            if parse_quantity(size) <= 0:
                raise ValueError
        except ValueError:
            message = f'Invalid value: "{size}": must be greater than zero'
            causes.append(admission.cause("FieldValueInvalid", message, "spec.resources[storage]"))
    mode = spec.setdefault("volumeMode", "Filesystem")
    if mode not in ("Filesystem", "Block"):
        message = f'Unsupported value: "{mode}": supported values: "Block", "Filesystem"'
        causes.append(admission.cause("FieldValueNotSupported", message, "spec.volumeMode"))
    if not spec.get("storageClassName") and not spec.get("volumeName"):
        default = storage.default_class(cluster)
        if default is not None:
            spec["storageClassName"] = default.name
    klass = storage.find_class(cluster, str(spec.get("storageClassName") or ""))
    if klass is not None and "ReadWriteMany" in modes and not storage.is_shared(klass):
        message = (
            f'Unsupported value: "ReadWriteMany": storage class "{klass.name}" gives each '
            f'claim one node\'s disk; use "{storage.SHARED}" for ReadWriteMany'
        )
        causes.append(admission.cause("FieldValueNotSupported", message, "spec.accessModes"))
    fins = list(typed.metadata.finalizers or [])
    if storage.PVC_PROTECTION not in fins:
        typed.metadata.finalizers = [*fins, storage.PVC_PROTECTION]
    return typed, causes


def _claim_update(cluster: Cluster, current: Any, spec: JSON) -> list[Any]:
    before: JSON = current.spec
    for k in ("volumeName", "storageClassName", "volumeMode"):
        if before.get(k) and not spec.get(k):
            spec[k] = before[k]
    fixed = ("resources",)
    if {k: v for k, v in spec.items() if k not in fixed} != {
        k: v for k, v in before.items() if k not in fixed
    }:
        message = (
            "Forbidden: spec is immutable after creation except resources.requests and "
            "volumeAttributesClassName for bound claims"
        )
        return [admission.cause("FieldValueForbidden", message, "spec")]
    old, new = storage.requested(before), storage.requested(spec)
    if new == old:
        return []
    if storage.size_bytes(new, 0) < storage.size_bytes(old, 0):
        message = "Forbidden: field can not be less than previous value"
        return [admission.cause("FieldValueForbidden", message, "spec.resources.requests.storage")]
    klass = storage.find_class(cluster, str(spec.get("storageClassName") or ""))
    if klass is None or not klass.manifest.get("allowVolumeExpansion"):
        message = (
            "Forbidden: only dynamically provisioned pvc can be resized and the storageclass "
            "that provisions the pvc must support resize"
        )
        return [admission.cause("FieldValueForbidden", message, "spec")]
    return []


PVC = resource_spec(
    group="",
    version="v1",
    kind="PersistentVolumeClaim",
    plural="persistentvolumeclaims",
    singular="persistentvolumeclaim",
    short_names=("pvc",),
    categories=("all",),
    event_kind=ResourceKind.PVC,
    object_type=PersistentVolumeClaim,
    admit=_admit_claim,
    subresource_group="",
    printer_columns=(
        PrinterColumn("Status", "string", ".status.phase"),
        PrinterColumn("Volume", "string", ".spec.volumeName"),
        PrinterColumn("Capacity", "string", ".status.capacity.storage"),
        PrinterColumn("Access Modes", "string", ".status.accessModes[0]"),
        PrinterColumn("StorageClass", "string", ".spec.storageClassName"),
        PrinterColumn("VolumeMode", "string", ".spec.volumeMode", priority=1),
        PrinterColumn("Age", "date", ".metadata.creationTimestamp"),
    ),
)


# ----------------------------------------------------------- PersistentVolume
PV = resource_spec(
    group="",
    version="v1",
    kind="PersistentVolume",
    plural="persistentvolumes",
    singular="persistentvolume",
    short_names=("pv",),
    categories=(),
    scope=Scope.CLUSTER,
    event_kind=ResourceKind.PV,
    object_type=PersistentVolume,
    subresource_group="",
    printer_columns=(
        PrinterColumn("Capacity", "string", ".spec.capacity.storage"),
        PrinterColumn("Access Modes", "string", ".spec.accessModes[0]"),
        PrinterColumn("Reclaim Policy", "string", ".spec.persistentVolumeReclaimPolicy"),
        PrinterColumn("Status", "string", ".status.phase"),
        PrinterColumn("Claim", "string", ".metadata.annotations.virtstream\\.io/claim"),
        PrinterColumn("StorageClass", "string", ".spec.storageClassName"),
        PrinterColumn("Age", "date", ".metadata.creationTimestamp"),
    ),
)


# ---------------------------------------------------------------- DataVolume
def _admit_dv(cluster: Cluster, typed: Any, __: str) -> tuple[Any, list[Any]]:
    """CDI's DataVolume webhook (datavolume-validate.go), the rules a user meets first."""
    causes = admission.validate_name(typed.metadata.name, typed.metadata.generate_name)
    spec: JSON = typed.spec
    source = spec.get("source") or {}
    if not source and not spec.get("sourceRef"):
        message = "Data volume should have either Source or SourceRef, or be externally populated"
        causes.append(admission.cause("FieldValueRequired", message, "spec.source"))
    elif len(source) > 1:
        message = "Multiple Data volume sources"
        causes.append(admission.cause("FieldValueInvalid", message, "spec.source"))
    elif source and next(iter(source)) not in storage.DV_SOURCES:
        message = "Missing Data volume source"
        causes.append(admission.cause("FieldValueInvalid", message, "spec.source"))
    if (http := source.get("http")) is not None and not (http or {}).get("url"):
        message = "source http url is missing"
        causes.append(admission.cause("FieldValueRequired", message, "spec.source.http.url"))
    if (pvc := source.get("pvc")) is not None and not (pvc or {}).get("name"):
        message = "source PVC is not valid"
        causes.append(admission.cause("FieldValueInvalid", message, "spec.source.pvc"))
    form = spec.get("storage") if spec.get("storage") is not None else spec.get("pvc")
    if form is None:
        message = "Missing Data volume PVC"
        causes.append(admission.cause("FieldValueRequired", message, "spec.pvc"))
    elif not storage.requested(form) and "pvc" not in source:
        message = "PVC size is missing"
        causes.append(admission.cause("FieldValueInvalid", message, "spec.pvc.resources.requests"))
    return typed, causes


DATA_VOLUME = resource_spec(
    group=CDI,
    version="v1beta1",
    kind="DataVolume",
    plural="datavolumes",
    singular="datavolume",
    short_names=("dv", "dvs"),
    categories=("all",),
    event_kind=ResourceKind.DATA_VOLUME,
    object_type=DataVolume,
    admit=_admit_dv,
    subresource_group="upload.cdi.kubevirt.io",
    updatable=False,
    spec_refusal=SpecRefusal(
        admission.WEBHOOKS["DataVolume"],
        "Cannot update spec for DataVolume",
        "FieldValueInvalid",
        "spec",
    ),
    printer_columns=(
        PrinterColumn("Phase", "string", ".status.phase"),
        PrinterColumn("Progress", "string", ".status.progress"),
        PrinterColumn("Restarts", "integer", ".status.restartCount"),
        PrinterColumn("Age", "date", ".metadata.creationTimestamp"),
    ),
)


# ------------------------------------------------------------------ uploads
class NotReady(Exception):
    """The claim will take an upload, but its upload server is not ready yet."""


def upload_target(cluster: Cluster, namespace: str, claim: str) -> tuple[Any, Any]:
    """(the kind, the object) whose aggregate an upload into `claim` goes to: its upload
    DataVolume, or the claim itself when no DataVolume owns it. Refused as CDI's proxy
    refuses (503): no such claim, not an upload target, done already; `NotReady` while
    its upload server is not ready."""
    found = storage.find_claim(cluster, namespace, claim)
    if found is None:
        raise unavailable(f"rejecting Upload Request for PVC {claim} that doesn't exist")
    notes = storage.annotations_of(found)
    if dvs.UPLOAD_TARGET not in notes:
        raise unavailable(f"PVC {claim} is not an upload target")
    dv = cluster.resources[ResourceKind.DATA_VOLUME].get(key(namespace, claim))
    owned = dv is not None and notes.get(dvs.CREATED_FOR) == dv.uid
    if notes.get(dvs.POD_PHASE) in ("Succeeded", "Failed") or (
        owned and dv is not None and dv.status.get("phase") in (dvs.SUCCEEDED, dvs.FAILED)
    ):
        raise unavailable(
            f"rejecting Upload Request for PVC {claim} that already finished uploading"
        )
    if owned and dv is not None:
        if dv.status.get("phase") != dvs.UPLOAD_READY:
            raise NotReady(claim)
        return ResourceKind.DATA_VOLUME, dv
    if notes.get(dvs.POD_READY) != "true":
        raise NotReady(claim)
    return ResourceKind.PVC, found


def upload_received(
    namespace: str, claim: str, node: str, file: str, size: int, expected: int,
    cluster: Cluster, ctx: RequestContext,
) -> Outcome:  # fmt: skip
    """The upload proxy staged a claim's image: `UploadReceived` for the node that said
    `UploadReady`, expecting the target's history as the proxy read it (`expected`), so
    two uploads raced to one claim land one."""
    try:
        kind, target = upload_target(cluster, namespace, claim)
    except NotReady:
        raise unavailable(not_ready(claim)) from None
    meta = ctx.meta(kind, namespace, claim, uid=target.uid, node=node)
    event = UploadReceived(meta=meta, file=file, size=size)
    return Outcome((Append(event, expected),), kind, key(namespace, claim))


def not_ready(claim: str) -> str:
    return f"rejecting Upload Request for PVC {claim}: its upload server is not ready"


# ---------------------------------------------------------------- DataSource
def _admit_ds(_: Cluster, typed: Any, __: str) -> tuple[Any, list[Any]]:
    causes = admission.validate_name(typed.metadata.name, typed.metadata.generate_name)
    source = typed.spec.get("source") or {}
    if not (source.get("pvc") or {}).get("name") and not source.get("snapshot"):
        message = "Required value: a source pvc (name, namespace) or snapshot"
        causes.append(admission.cause("FieldValueRequired", message, "spec.source"))
    return typed, causes


DATA_SOURCE = resource_spec(
    group=CDI,
    version="v1beta1",
    kind="DataSource",
    plural="datasources",
    singular="datasource",
    short_names=("das",),
    categories=("all",),
    event_kind=ResourceKind.DATA_SOURCE,
    object_type=DataSource,
    admit=_admit_ds,
    subresource_group="",
)

SPECS = (STORAGE_CLASS, PV, PVC, DATA_VOLUME, DATA_SOURCE)
