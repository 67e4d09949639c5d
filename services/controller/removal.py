"""When a VMI object goes away: VMIRemoved once its deletion was requested and nothing is
left on a node to clean up (it never had a node, its launcher exited, or its node is
unresponsive or gone, so no handler will ever report back)."""

from __future__ import annotations

from events.catalog import Event, VMIRemoved
from events.envelope import Context
from projections.cluster import Cluster
from projections.views import VMIView
from services.controller import emit


def removable(vmi: VMIView, cluster: Cluster) -> bool:
    if vmi.deletion_requested_at is None:
        return False
    if not vmi.node or vmi.launcher_exited:
        return True
    node = cluster.nodes.get(vmi.node)
    return node is None or node.unresponsive


def reconcile(vmi: VMIView, cluster: Cluster, ctx: Context) -> list[Event]:
    if not removable(vmi, cluster):
        return []
    # routed to the node too, so its handler forgets the VMI
    return [
        VMIRemoved(
            meta=emit.meta(ctx, emit.vmi_aggregate(vmi), f"removed/{vmi.uid}", node=vmi.node)
        )
    ]
