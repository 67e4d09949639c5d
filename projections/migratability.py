"""KubeVirt's LiveMigratable rule: whether a VMI can be live-migrated, and why not."""

from __future__ import annotations

from typing import Any

JSON = dict[str, Any]


def live_migratable(manifest: JSON) -> tuple[bool, str, str]:
    """KubeVirt's LiveMigratable condition: (ok, reason, message)."""
    spec = manifest.get("spec") or {}
    for vol in spec.get("volumes") or []:
        pvc = vol.get("persistentVolumeClaim") or (vol.get("dataVolume") and {})
        if pvc is not None and "persistentVolumeClaim" in vol:
            return (
                False,
                "DisksNotLiveMigratable",
                f"cannot migrate VMI: PVC {pvc.get('claimName', '')} is not shared, live "
                "migration requires that all PVCs must be shared (using ReadWriteMany access "
                "mode)",
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
