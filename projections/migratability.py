"""KubeVirt's LiveMigratable rule: whether a VMI can be live-migrated, and why not."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from projections import storage

if TYPE_CHECKING:
    from projections.cluster import Cluster

JSON = dict[str, Any]


def live_migratable(manifest: JSON, cluster: Cluster | None = None) -> tuple[bool, str, str]:
    """KubeVirt's LiveMigratable condition: (ok, reason, message). Every claim (a
    persistentVolumeClaim or a dataVolume's) must be ReadWriteMany; without the cluster
    only persistentVolumeClaim volumes are judged, and as not shared."""
    spec = manifest.get("spec") or {}
    if cluster is not None:
        ns = str((manifest.get("metadata") or {}).get("namespace") or "")
        claim = storage.not_shared(cluster, ns, manifest)
    else:
        claim = next(
            (
                str((v["persistentVolumeClaim"] or {}).get("claimName", ""))
                for v in spec.get("volumes") or []
                if isinstance(v, dict) and "persistentVolumeClaim" in v
            ),
            "",
        )
    if claim:
        return (
            False,
            "DisksNotLiveMigratable",
            f"cannot migrate VMI: PVC {claim} is not shared, live migration requires that "
            "all PVCs must be shared (using ReadWriteMany access mode)",
        )
    for iface in ((spec.get("domain") or {}).get("devices") or {}).get("interfaces") or []:
        if "bridge" in iface and any("pod" in n for n in spec.get("networks") or []):
            return (
                False,
                "InterfaceNotLiveMigratable",
                "cannot migrate VMI which does not use masquerade, bridge with "
                "kubevirt.io/allow-pod-bridge-network-live-migration VM annotation or a "
                "migratable plugin to connect to the pod network",
            )
    return True, "", ""
