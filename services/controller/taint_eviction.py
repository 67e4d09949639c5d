"""NoExecute taints: Kubernetes' taint manager evicts the pods of a node that do not
tolerate its NoExecute taints, and a VMI's launcher pod is evicted as a drain evicts it
(KubeVirt's eviction webhook turns the eviction of a LiveMigrate VMI's pod into an
evacuation migration). So a VMI on such a node goes as evacuation.py makes it go, by its
evictionStrategy, once it does not tolerate a taint: at once without a matching
toleration, `tolerationSeconds` after the taint was added with one that has them, never
with one that has none. The controller's tick makes the later ones due."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from events.catalog import Event
from events.envelope import Context
from projections.views import NodeView
from services.controller import evacuation
from services.controller.policy import MigrationConfig
from services.controller.scheduler import tolerates
from services.controller.state import ControllerState

JSON = dict[str, Any]
NO_EXECUTE = "NoExecute"


def due_at(tolerations: Sequence[JSON], node: NodeView) -> float | None:
    """When the VMI must leave `node` (the epoch for "now"), None while it may stay."""
    due: float | None = None
    for i, taint in enumerate(node.taints):
        if taint.effect != NO_EXECUTE:
            continue
        added = node.taints_added[i] if i < len(node.taints_added) else 0.0
        matching = [t for t in tolerations if tolerates((t,), taint)]
        if not matching:
            return 0.0
        if any(t.get("tolerationSeconds") is None for t in matching):
            continue  # tolerated for good
        seconds = min(max(0.0, float(t["tolerationSeconds"])) for t in matching)
        due = added + seconds if due is None else min(due, added + seconds)
    return due


def reconcile(state: ControllerState, ctx: Context, config: MigrationConfig) -> list[Event]:
    c = state.cluster
    out: list[Event] = []
    tainted = [n for n in c.nodes.values() if n.taints and not n.draining and _no_execute(n)]
    for node in sorted(tainted, key=lambda n: n.name) if tainted else ():
        for vmi in sorted(c.vmis_on(node.name), key=lambda v: (v.namespace, v.name)):
            if evacuation.settled(state, vmi, node):
                continue
            due = due_at((vmi.manifest.get("spec") or {}).get("tolerations") or [], node)
            if due is not None and due <= ctx.now:
                out += evacuation.evict(state, node, vmi, ctx, config)
    return out


def _no_execute(node: NodeView) -> bool:
    return any(t.effect == NO_EXECUTE for t in node.taints)
