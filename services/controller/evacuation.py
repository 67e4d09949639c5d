"""Node drain: empty a draining node (NodeDrainRequested: cordoned + draining) of its VMIs.

Per non-final VMI on the node, by its spec.evictionStrategy:
- LiveMigrate, or LiveMigrateIfPossible when live-migratable: a migration is requested
  (MigrationRequested on a new migration aggregate `kubevirt-evacuation-xxxxx`, named from
  the VMI uid and the attempt number), so the usual limits and queueing apply. One that
  failed is replaced after `evacuation_retry_seconds`.
- LiveMigrate but not live-migratable: it stays; VMIEvictionBlocked records KubeVirt's
  reason once ("VMI X is configured with an eviction strategy but is not live-migratable").
- None (the default), External, LiveMigrateIfPossible when not migratable: the VMI is
  deleted (VMIDeleteRequested to its node) and its VM's run strategy decides what next;
  the cordon keeps a replacement off this node.
Level-triggered: a VMI with an active migration or a pending deletion is left alone."""

from __future__ import annotations

import hashlib
from typing import Any

from events.catalog import Event, MigrationRequested, VMIDeleteRequested, VMIEvictionBlocked
from events.envelope import Context
from events.meta import Aggregate, Kind
from projections.cluster import Cluster
from projections.migratability import live_migratable
from projections.views import MigrationView, NodeView, VMIView
from services.controller import emit
from services.controller.policy import MigrationConfig
from services.controller.state import ControllerState

EVACUATION_PREFIX = "kubevirt-evacuation-"
EVACUATION_ANNOTATION = "kubevirt.io/evacuationMigration"  # value: the drained node
VMI_UID_ANNOTATION = "virtstream.io/vmi-uid"
_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"  # Kubernetes' generateName alphabet


def eviction_strategy(vmi: VMIView) -> str:
    return str((vmi.manifest.get("spec") or {}).get("evictionStrategy") or "None")


def blocked_message(vmi: VMIView) -> str:
    return f"VMI {vmi.name} is configured with an eviction strategy but is not live-migratable"


def evacuation_name(vmi_uid: str, attempt: int) -> str:
    digest = hashlib.sha256(f"{vmi_uid}/{attempt}".encode()).digest()
    return EVACUATION_PREFIX + "".join(_ALPHABET[b % len(_ALPHABET)] for b in digest[:5])


def _attempts(cluster: Cluster, vmi: VMIView) -> list[MigrationView]:
    return [
        m
        for m in cluster.migrations.values()
        if m.namespace == vmi.namespace
        and ((m.manifest.get("metadata") or {}).get("annotations") or {}).get(VMI_UID_ANNOTATION)
        == vmi.uid
    ]


def reconcile(state: ControllerState, ctx: Context, config: MigrationConfig) -> list[Event]:
    c = state.cluster
    out: list[Event] = []
    draining = [n for n in c.nodes.values() if n.draining]
    for node in sorted(draining, key=lambda n: n.name) if draining else ():
        for vmi in sorted(c.vmis_on(node.name), key=lambda v: (v.namespace, v.name)):
            if not settled(state, vmi, node):
                out += evict(state, node, vmi, ctx, config)
    return out


def settled(state: ControllerState, vmi: VMIView, node: NodeView) -> bool:
    """Gone, going, elsewhere, or moving already: nothing to evict."""
    return (
        vmi.final
        or vmi.deletion_requested_at is not None
        or vmi.node != node.name
        or state.cluster.active_migration(vmi.namespace, vmi.name) is not None
    )


def evict(
    state: ControllerState, node: NodeView, vmi: VMIView, ctx: Context, config: MigrationConfig
) -> list[Event]:
    strategy = eviction_strategy(vmi)
    migratable, _, _ = live_migratable(vmi.manifest, state.cluster)
    vmi_agg = emit.vmi_aggregate(vmi)
    if strategy == "LiveMigrate" and not migratable:
        if (vmi.uid, node.name) in state.eviction_blocked:
            return []
        return [
            VMIEvictionBlocked(
                meta=emit.meta(ctx, vmi_agg, f"evict-blocked/{vmi.uid}/{node.name}"),
                node=node.name,
                reason="NotLiveMigratable",
                message=blocked_message(vmi),
            )
        ]
    if strategy in ("LiveMigrate", "LiveMigrateIfPossible") and migratable:
        if vmi.phase != "Running":
            return []  # still starting: migrated once it runs (or deleted if it fails)
        attempts = _attempts(state.cluster, vmi)
        last_end = max((m.transitions[-1][1] for m in attempts), default=None)
        if last_end is not None and ctx.now - last_end < config.evacuation_retry_seconds:
            return []  # the last attempt failed just now: give the cluster a moment
        return [_request(node, vmi, len(attempts), ctx)]
    # None, External, LiveMigrateIfPossible without live migration: the VMI goes
    return [VMIDeleteRequested(meta=emit.meta(ctx, vmi_agg, f"evict/{vmi.uid}", node=vmi.node))]


def _request(node: NodeView, vmi: VMIView, attempt: int, ctx: Context) -> MigrationRequested:
    name = evacuation_name(vmi.uid, attempt)
    k = f"evacuate/{vmi.uid}/{attempt}"
    uid = emit.new_uid(ctx, k)
    manifest: dict[str, Any] = {
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachineInstanceMigration",
        "metadata": {
            "name": name,
            "generateName": EVACUATION_PREFIX,
            "namespace": vmi.namespace,
            "uid": uid,
            "annotations": {EVACUATION_ANNOTATION: node.name, VMI_UID_ANNOTATION: vmi.uid},
        },
        "spec": {"vmiName": vmi.name},
    }
    agg = Aggregate(kind=Kind.MIGRATION, namespace=vmi.namespace, name=name, uid=uid)
    return MigrationRequested(meta=emit.meta(ctx, agg, k), manifest=manifest)
