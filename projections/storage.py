"""Storage read from the cluster's views, pure: the classes, the claims a VMI names, a
claim's class, binding and node, and what the scheduler and the migration rule ask of
them. Every lookup is by key (a claim by namespace and name, a class by name)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from events.meta import ResourceKind
from events.quantity import parse_quantity
from projections.cluster import Cluster, key
from projections.views import ResourceView
from projections.volumes import claim_of

JSON = dict[str, Any]

LOCAL, SHARED = "local", "shared"
LOCAL_PROVISIONER, SHARED_PROVISIONER = "virtstream.io/local", "virtstream.io/shared"
IMMEDIATE, WFFC = "Immediate", "WaitForFirstConsumer"
DEFAULT_CLASS = "storageclass.kubernetes.io/is-default-class"
PVC_PROTECTION = "kubernetes.io/pvc-protection"
SELECTED_NODE = "volume.kubernetes.io/selected-node"
BIND_COMPLETED = "pv.kubernetes.io/bind-completed"
BOUND_BY_CONTROLLER = "pv.kubernetes.io/bound-by-controller"
PROVISIONED_BY = "pv.kubernetes.io/provisioned-by"
STORAGE_PROVISIONER = "volume.kubernetes.io/storage-provisioner"
CLAIM_OF_PV = "virtstream.io/claim"  # a PV's "ns/name" claim, for its table's CLAIM column
ACCESS_MODES = ("ReadWriteOnce", "ReadOnlyMany", "ReadWriteMany", "ReadWriteOncePod")
DV_SOURCES = ("http", "blank", "pvc", "registry", "upload", "s3", "gcs", "imageio", "vddk")
SHORT_MODES = {
    "ReadWriteOnce": "RWO",
    "ReadOnlyMany": "ROX",
    "ReadWriteMany": "RWX",
    "ReadWriteOncePod": "RWOP",
}


def requested(spec: JSON) -> str:
    """`resources.requests.storage` of a claim's spec (or a DataVolume's storage/pvc)."""
    return str(((spec.get("resources") or {}).get("requests") or {}).get("storage") or "")


def size_bytes(quantity: str, default: int = 1 << 30) -> int:
    try:
        return parse_quantity(quantity) if quantity else default
    except ValueError:
        return default


# ------------------------------------------------------------------ classes
def find_class(cluster: Cluster, name: str) -> ResourceView | None:
    return cluster.resources[ResourceKind.STORAGE_CLASS].get(name) if name else None


def default_class(cluster: Cluster) -> ResourceView | None:
    """The class marked default (the first by name when several are: Kubernetes then
    picks the newest; the classes are few)."""
    table = cluster.resources[ResourceKind.STORAGE_CLASS]
    for name in sorted(table):
        view = table[name]
        annotations = (view.manifest.get("metadata") or {}).get("annotations") or {}
        if str(annotations.get(DEFAULT_CLASS, "")).lower() == "true":
            return view
    return None


def is_shared(klass: ResourceView) -> bool:
    return str(klass.manifest.get("provisioner") or "") == SHARED_PROVISIONER


def binding_mode(klass: ResourceView) -> str:
    return str(klass.manifest.get("volumeBindingMode") or IMMEDIATE)


# ------------------------------------------------------------------- claims
def find_claim(cluster: Cluster, namespace: str, name: str) -> ResourceView | None:
    return cluster.resources[ResourceKind.PVC].get(key(namespace, name))


def claims_of(manifest: JSON) -> Iterator[str]:
    """The claims a VMI's volumes name, in order, each once."""
    seen: set[str] = set()
    for volume in (manifest.get("spec") or {}).get("volumes") or []:
        name = claim_of(volume) if isinstance(volume, dict) else ""
        if name and name not in seen:
            seen.add(name)
            yield name


def annotations_of(view: ResourceView) -> JSON:
    return dict((view.manifest.get("metadata") or {}).get("annotations") or {})


def access_modes(claim: ResourceView) -> list[str]:
    return [str(m) for m in claim.spec.get("accessModes") or []]


def is_rwx(claim: ResourceView) -> bool:
    return "ReadWriteMany" in access_modes(claim)


def bound(claim: ResourceView) -> bool:
    return claim.status.get("phase") == "Bound"


def claim_node(claim: ResourceView) -> str:
    """The node a claim's disk is on ("" for storage every node reaches, or not yet)."""
    return str(annotations_of(claim).get(SELECTED_NODE) or "")


def deleting(view: ResourceView) -> bool:
    return bool((view.manifest.get("metadata") or {}).get("deletionTimestamp"))


def pv_name(claim: ResourceView) -> str:
    """The volume a claim is bound to: the provisioner's `pvc-<claim uid>`."""
    return f"pvc-{claim.uid}"


# ------------------------------------------------------------ what VMIs need
MISSING = "does not exist, waiting for it to appear"  # KubeVirt's FailedPvcNotFound
PROVISIONING = "DataVolume"


def printable(unschedulable: str) -> str:
    """The VM's printableStatus a pending VMI's storage gives ("" for none): KubeVirt's
    ErrorPvcNotFound, or Provisioning while a DataVolume is not ready."""
    if unschedulable.startswith("PVC ") and unschedulable.endswith(MISSING):
        return "ErrorPvcNotFound"
    if unschedulable.startswith(f"{PROVISIONING} "):
        return "Provisioning"
    return ""


def placement(cluster: Cluster, namespace: str, manifest: JSON) -> tuple[str, str]:
    """(the node the VMI's claims pin it to, "" for any; the reason it cannot be placed
    yet, "" when it can): a missing claim is KubeVirt's "PVC ns/x does not exist, waiting
    for it to appear"; one being deleted is the scheduler's; a claim bound to a node's
    disk pins the VMI there."""
    node = ""
    for name in claims_of(manifest):
        claim = find_claim(cluster, namespace, name)
        if claim is None:
            return "", f"PVC {namespace}/{name} {MISSING}"
        if deleting(claim):
            return "", f'persistentvolumeclaim "{name}" is being deleted'
        dv = cluster.resources[ResourceKind.DATA_VOLUME].get(key(namespace, name))
        if dv is not None and dv.status.get("phase") != "Succeeded":
            phase = dv.status.get("phase") or "Pending"
            return "", f"{PROVISIONING} {namespace}/{name} is not ready yet (phase {phase})"
        if not bound(claim) and not _waits_for_consumer(cluster, claim):
            return "", f'pod has unbound immediate PersistentVolumeClaims (claim "{name}")'
        pinned = claim_node(claim)
        if pinned and node and pinned != node:
            return "", "node(s) had volume node affinity conflict"
        node = pinned or node
    return node, ""


def _waits_for_consumer(cluster: Cluster, claim: ResourceView) -> bool:
    klass = find_class(cluster, str(claim.spec.get("storageClassName") or ""))
    return klass is not None and binding_mode(klass) == WFFC


def not_shared(cluster: Cluster, namespace: str, manifest: JSON) -> str:
    """The first claim of the VMI that is not ReadWriteMany ("" when all are). A name with
    no claim object (a log written before claims were objects) is not shared either."""
    for name in claims_of(manifest):
        claim = find_claim(cluster, namespace, name)
        if claim is None or not is_rwx(claim):
            return name
    return ""
