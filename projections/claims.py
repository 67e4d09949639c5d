"""The sizes of a VMI's persistent volumes: what the launcher's "pod" mounts.

KubeVirt's VM controller creates a DataVolume per `spec.dataVolumeTemplates` entry and the
launcher pod mounts its claim, of the size the template requests
(`spec.storage.resources.requests.storage`, or `spec.pvc...` for the older form). Here
there is no claim object: the scheduler writes the sizes into the pod's copy of the VMI
(`PodScheduled.manifest`, annotation `CLAIM_SIZES`), and the launcher creates a claim's
file at that size on first use (`services/launcher/storage.py`). The VMI the api serves
does not carry it."""

from __future__ import annotations

import json
from typing import Any

JSON = dict[str, Any]
CLAIM_SIZES = "virtstream.io/claim-sizes"


def template_sizes(vm_manifest: JSON) -> dict[str, str]:
    """dataVolumeTemplates name → requested storage."""
    out: dict[str, str] = {}
    for t in (vm_manifest.get("spec") or {}).get("dataVolumeTemplates") or []:
        name = (t.get("metadata") or {}).get("name")
        spec = t.get("spec") or {}
        size = None
        for form in ("storage", "pvc"):
            size = (((spec.get(form) or {}).get("resources") or {}).get("requests") or {}).get(
                "storage"
            )
            if size:
                break
        if name and size:
            out[str(name)] = str(size)
    return out


def claim_sizes(vmi_manifest: JSON, vm_manifest: JSON | None) -> dict[str, str]:
    """Claim name → size, for the VMI's dataVolume and persistentVolumeClaim volumes that
    its VM's dataVolumeTemplates size."""
    sizes = template_sizes(vm_manifest) if vm_manifest is not None else {}
    out: dict[str, str] = {}
    for volume in (vmi_manifest.get("spec") or {}).get("volumes") or []:
        claim = (volume.get("dataVolume") or {}).get("name") or (
            volume.get("persistentVolumeClaim") or {}
        ).get("claimName")
        if claim and claim in sizes:
            out[str(claim)] = sizes[claim]
    return out


def with_claim_sizes(vmi_manifest: JSON, sizes: dict[str, str]) -> JSON:
    """The pod's copy of the VMI: the manifest with the sizes annotated (unchanged when
    there are none)."""
    if not sizes:
        return vmi_manifest
    meta = dict(vmi_manifest.get("metadata") or {})
    meta["annotations"] = {
        **(meta.get("annotations") or {}),
        CLAIM_SIZES: json.dumps(sizes, sort_keys=True),
    }
    return {**vmi_manifest, "metadata": meta}


def sizes_of(vmi_manifest: JSON) -> dict[str, str]:
    """The annotated sizes ({} without them, or when unreadable)."""
    raw = ((vmi_manifest.get("metadata") or {}).get("annotations") or {}).get(CLAIM_SIZES)
    try:
        found = json.loads(raw) if raw else {}
    except ValueError:
        return {}
    return {str(k): str(v) for k, v in found.items()} if isinstance(found, dict) else {}
