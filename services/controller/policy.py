"""Migration settings: the cluster's defaults, overridden by the winning MigrationPolicy.

KubeVirt's selectors are plain label maps; a policy applies when every label of both its
namespaceSelector and its virtualMachineInstanceSelector is on the namespace / the VMI.
Namespaces carry no labels here except the one Kubernetes always sets,
`kubernetes.io/metadata.name`. The policy matching the most labels wins; ties go to the one
matching more VMI labels, then to name order."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import msgspec

from events.catalog import MigrationSettings
from events.quantity import parse_quantity
from projections.views import PolicyView, VMIView

NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"


class MigrationConfig(msgspec.Struct, frozen=True, kw_only=True):
    """KubeVirt's spec.configuration.migrations (defaults as KubeVirt's)."""

    parallel_migrations_per_cluster: int = 5
    parallel_outbound_migrations_per_node: int = 2
    bandwidth_per_migration: int = 0  # bytes/s, 0 = unlimited
    progress_timeout: int = 150
    completion_timeout_per_gib: int = 150
    allow_auto_converge: bool = False
    allow_post_copy: bool = False
    allow_workload_disruption: bool = False
    # a target that fits nowhere for this long fails the migration (KubeVirt: 5 minutes)
    unschedulable_timeout: float = 300.0
    # a drained VMI whose evacuation migration failed gets a new one after this long
    evacuation_retry_seconds: float = 10.0


def _matched(selector: Mapping[str, str] | None, labels: Mapping[str, str]) -> int | None:
    """How many of the selector's labels match, None if one does not."""
    selector = selector or {}
    if any(labels.get(k) != v for k, v in selector.items()):
        return None
    return len(selector)


def namespace_labels(namespace: str) -> dict[str, str]:
    return {NAMESPACE_NAME_LABEL: namespace}


def vmi_labels(vmi: VMIView) -> dict[str, str]:
    return dict((vmi.manifest.get("metadata") or {}).get("labels") or {})


def _selectors(policy: PolicyView) -> tuple[dict[str, str], dict[str, str]]:
    sel = (policy.manifest.get("spec") or {}).get("selectors") or {}
    return (
        dict(sel.get("namespaceSelector") or {}),
        dict(sel.get("virtualMachineInstanceSelector") or {}),
    )


def matching_policy(vmi: VMIView, policies: Iterable[PolicyView]) -> PolicyView | None:
    ns_labels, labels = namespace_labels(vmi.namespace), vmi_labels(vmi)
    best: tuple[int, int, str] | None = None
    winner = None
    for p in policies:
        ns_sel, vmi_sel = _selectors(p)
        ns_n, vmi_n = _matched(ns_sel, ns_labels), _matched(vmi_sel, labels)
        if ns_n is None or vmi_n is None:
            continue
        # highest total, then most VMI labels, then the first name: negate for min()
        score = (-(ns_n + vmi_n), -vmi_n, p.name)
        if best is None or score < best:
            best, winner = score, p
    return winner


def effective_settings(
    vmi: VMIView, policies: Iterable[PolicyView], config: MigrationConfig
) -> MigrationSettings:
    settings = MigrationSettings(
        bandwidth_bytes_per_second=config.bandwidth_per_migration,
        completion_timeout_per_gib=config.completion_timeout_per_gib,
        progress_timeout=config.progress_timeout,
        allow_auto_converge=config.allow_auto_converge,
        allow_post_copy=config.allow_post_copy,
        allow_workload_disruption=config.allow_workload_disruption,
    )
    policy = matching_policy(vmi, policies)
    if policy is None:
        return settings
    spec: dict[str, Any] = policy.manifest.get("spec") or {}
    changes: dict[str, Any] = {"policy": policy.name}
    if spec.get("bandwidthPerMigration") is not None:
        changes["bandwidth_bytes_per_second"] = parse_quantity(spec["bandwidthPerMigration"])
    if spec.get("completionTimeoutPerGiB") is not None:
        changes["completion_timeout_per_gib"] = int(spec["completionTimeoutPerGiB"])
    for field, name in (
        ("allow_auto_converge", "allowAutoConverge"),
        ("allow_post_copy", "allowPostCopy"),
        ("allow_workload_disruption", "allowWorkloadDisruption"),
    ):
        if spec.get(name) is not None:
            changes[field] = bool(spec[name])
    return msgspec.structs.replace(settings, **changes)
