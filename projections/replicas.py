"""What replica sets and pools decide on, pure: label selectors, the objects a set owns,
readiness, and the status it reports (KubeVirt's replicas / readyReplicas /
labelSelector)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

from projections.cluster import Cluster
from projections.views import ResourceView, VMIView, VMView

JSON = dict[str, Any]


def label_selector(selector: JSON) -> str:
    """A LabelSelector as Kubernetes prints it (`app=x,tier in (a,b)`), sorted by key."""
    parts: list[tuple[str, str]] = [
        (k, f"{k}={v}") for k, v in (selector.get("matchLabels") or {}).items()
    ]
    for req in selector.get("matchExpressions") or []:
        key, op, values = req.get("key", ""), req.get("operator", ""), req.get("values") or []
        match op:
            case "In":
                parts.append((key, f"{key} in ({','.join(sorted(values))})"))
            case "NotIn":
                parts.append((key, f"{key} notin ({','.join(sorted(values))})"))
            case "Exists":
                parts.append((key, key))
            case "DoesNotExist":
                parts.append((key, f"!{key}"))
    return ",".join(text for _, text in sorted(parts))


def selector_matches(selector: JSON, labels: dict[str, str]) -> bool:
    if not selector.get("matchLabels") and not selector.get("matchExpressions"):
        return False  # an empty selector selects nothing a set could own
    for k, v in (selector.get("matchLabels") or {}).items():
        if labels.get(k) != v:
            return False
    for req in selector.get("matchExpressions") or []:
        key, op, values = req.get("key", ""), req.get("operator", ""), req.get("values") or []
        present = key in labels
        ok = {
            "In": present and labels.get(key) in values,
            "NotIn": not present or labels.get(key) not in values,
            "Exists": present,
            "DoesNotExist": not present,
        }.get(op, False)
        if not ok:
            return False
    return True


def _owned_by(manifest: JSON, uid: str) -> bool:
    refs = (manifest.get("metadata") or {}).get("ownerReferences") or []
    return any(r.get("uid") == uid and r.get("controller") for r in refs)


def owned_vmis(cluster: Cluster, rs: ResourceView) -> Iterator[VMIView]:
    """The VMIs a replica set created: named `<set><suffix>`, controller reference to it."""
    prefix = f"{rs.namespace}/{rs.name}"
    for k, vmi in cluster.vmis.items():
        if k.startswith(prefix) and _owned_by(vmi.manifest, rs.uid):
            yield vmi


_ORDINAL = re.compile(r"^(?P<pool>.+)-(?P<n>[0-9]+)$")


def ordinal(pool: str, vm_name: str) -> int | None:
    m = _ORDINAL.match(vm_name)
    return int(m["n"]) if m and m["pool"] == pool else None


def owned_vms(cluster: Cluster, pool: ResourceView) -> dict[int, VMView]:
    """A pool's VMs by ordinal (`<pool>-<n>`)."""
    out: dict[int, VMView] = {}
    prefix = f"{pool.namespace}/{pool.name}-"
    for k, vm in cluster.vms.items():
        if not k.startswith(prefix):
            continue
        n = ordinal(pool.name, vm.name)
        if n is not None and _owned_by(vm.manifest, pool.uid):
            out[n] = vm
    return out


def vmi_ready(vmi: VMIView) -> bool:
    return vmi.phase == "Running" and not vmi.paused and vmi.deletion_requested_at is None


def vmi_active(vmi: VMIView) -> bool:
    return not vmi.final and vmi.deletion_requested_at is None


def status(selector: JSON, replicas: int, ready: int, paused: bool) -> JSON:
    out: JSON = {
        "replicas": replicas,
        "readyReplicas": ready,
        "labelSelector": label_selector(selector),
    }
    if paused:
        out["conditions"] = [
            {
                "type": "ReplicaPaused",
                "status": "True",
                "reason": "Paused",
                "message": "Controller is paused",
            }
        ]
    return out
