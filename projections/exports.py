"""What a VirtualMachineExport exports, pure: shared by its controller (the status links)
and the api's export server (which file a link names). In qemu mode a claim is the file
`<disk_dir>/volumes/<namespace>/<claim>.qcow2` and a snapshot's volume backup
`<disk_dir>/backups/<namespace>/<volumeSnapshotName>.qcow2` (services/launcher/storage.py)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from events.meta import ResourceKind
from projections.cluster import Cluster, key
from projections.views import ResourceView

JSON = dict[str, Any]
GROUP_VERSION = "export.kubevirt.io/v1"
TOKEN_HEADER = "x-kubevirt-export-token"  # header or query parameter, as KubeVirt's server


@dataclass(frozen=True)
class Exported:
    name: str  # the volume's name in the links (its claim, as KubeVirt names it)
    area: str  # "volumes" or "backups" under the disk dir
    file: str  # the qcow2's name in <area>/<namespace>/


def secret_name(export: ResourceView) -> str:
    """The export's token Secret: the user's, else the one its controller makes."""
    return str(export.spec.get("tokenSecretRef") or "") or f"export-token-{export.name}"


def base_path(namespace: str, name: str) -> str:
    return f"/api/{GROUP_VERSION}/namespaces/{namespace}/virtualmachineexports/{name}"


def _claims(vm_spec: JSON) -> list[str]:
    volumes = ((vm_spec.get("template") or {}).get("spec") or {}).get("volumes") or []
    out = []
    for v in volumes:
        if not isinstance(v, dict):
            continue
        if "persistentVolumeClaim" in v:
            out.append(str((v["persistentVolumeClaim"] or {}).get("claimName") or ""))
        elif "dataVolume" in v:
            out.append(str((v["dataVolume"] or {}).get("name") or ""))
    return [c for c in out if c]


def source_vm_spec(cluster: Cluster, export: ResourceView) -> JSON | None:
    """The VM the export's manifests describe: the source VM's, or the snapshot's copy."""
    source = export.spec.get("source") or {}
    name = str(source.get("name") or "")
    match source.get("kind"):
        case "VirtualMachine":
            vm = cluster.vms.get(key(export.namespace, name))
            return vm.manifest if vm is not None and vm.deleted_at is None else None
        case "VirtualMachineSnapshot":
            content = _content(cluster, export.namespace, name)
            vm = ((content.spec.get("source") or {}) if content else {}).get("virtualMachine")
            return vm if isinstance(vm, dict) else None
        case _:
            return None


def _content(cluster: Cluster, namespace: str, snapshot: str) -> ResourceView | None:
    snap = cluster.resources[ResourceKind.SNAPSHOT].get(key(namespace, snapshot))
    if snap is None or not snap.status.get("readyToUse"):
        return None
    name = str(snap.status.get("virtualMachineSnapshotContentName") or "")
    return cluster.resources[ResourceKind.SNAPSHOT_CONTENT].get(key(namespace, name))


def exported(cluster: Cluster, export: ResourceView) -> list[Exported] | None:
    """The volumes the export serves, or None while its source does not exist."""
    source = export.spec.get("source") or {}
    name = str(source.get("name") or "")
    match source.get("kind"):
        case "PersistentVolumeClaim":
            return [Exported(name, "volumes", name)] if name else None
        case "VirtualMachine":
            vm = cluster.vms.get(key(export.namespace, name))
            if vm is None or vm.deleted_at is not None:
                return None
            return [Exported(c, "volumes", c) for c in _claims(vm.manifest.get("spec") or {})]
        case "VirtualMachineSnapshot":
            content = _content(cluster, export.namespace, name)
            if content is None:
                return None
            return [
                Exported(
                    str(b.get("volumeName") or ""), "backups", str(b.get("volumeSnapshotName"))
                )
                for b in content.spec.get("volumeBackups") or []
            ]
        case _:
            return None
