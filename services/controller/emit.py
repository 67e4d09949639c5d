"""Metadata for the controller's events, with ids derived from the state decided on.

Every controller event is keyed by the state it answers (e.g. "delete VMI <uid>", "create
a VMI for VM <uid> at resource version N"), not by the cause: the same decision reached
from a redelivered event, a tick, or a restarted controller gets the same event id and new
object uid, so JetStream drops the repeat. Keys must name a decision that is made at most
once for that state, which the level-triggered deciders guarantee."""

from __future__ import annotations

import uuid
from typing import Any

from events.catalog import ResourceStatusChanged
from events.envelope import Context, Decision
from events.meta import Aggregate, Kind, KindToken, Meta
from projections.views import NodeView, ResourceView, VMIView, VMView

_NS = uuid.UUID("0f7c55c4-1d0e-4d1a-9a43-5a3f3b7e2c61")


def vm_aggregate(vm: VMView) -> Aggregate:
    return Aggregate(kind=Kind.VM, namespace=vm.namespace, name=vm.name, uid=vm.uid)


def vmi_aggregate(vmi: VMIView) -> Aggregate:
    return Aggregate(kind=Kind.VMI, namespace=vmi.namespace, name=vmi.name, uid=vmi.uid)


def node_aggregate(node: NodeView | str) -> Aggregate:
    name = node if isinstance(node, str) else node.name
    return Aggregate(kind=Kind.NODE, namespace="", name=name)


def meta(ctx: Context, aggregate: Aggregate, key: str, *, node: str = "") -> Meta:
    return ctx.meta(aggregate, node=node, key=key)


def new_uid(ctx: Context, key: str) -> str:
    """A new object uid, the same for the same decision (see module doc)."""
    return uid_of(f"{ctx.service}/{key}")


def uid_of(event_id: str) -> str:
    """The uid `new_uid` gives the decision whose event id is `event_id`."""
    return str(uuid.uuid5(_NS, event_id))


def resource_aggregate(kind: KindToken, res: ResourceView) -> Aggregate:
    return Aggregate(kind=kind, namespace=res.namespace, name=res.name, uid=res.uid)


def status_change(kind: KindToken, res: ResourceView, status: dict[str, Any], ctx: Context
                  ) -> list[Decision]:  # fmt: skip
    """A generic resource's new status, keyed by the version it was decided on; nothing when
    it is the status the resource has."""
    if status == res.status:
        return []
    key = f"{kind}-status/{res.uid}/{res.version}"
    meta_ = meta(ctx, resource_aggregate(kind, res), key)
    return [Decision(ResourceStatusChanged(meta=meta_, status=status))]
