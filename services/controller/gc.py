"""The garbage collector, pure: Kubernetes' owner references, deletion policies and
finalizers, honoured by the controller as the API server's garbage collector does.

- Background (the default): an object whose owner references all name objects that are
  gone (no live object has the reference's uid) is deleted: a replica set's VMIs, a pool's
  VMs, a snapshot's content, once their owner is gone.
- An object whose deletion has begun (`metadata.deletionTimestamp`: it had finalizers, or
  was deleted Foreground or Orphan, `core/ownership.py`) waits for its finalizers:
  `foregroundDeletion`: its dependents are deleted, and once none is left the finalizer is
  removed; `orphan`: its dependents lose their reference to it, then the finalizer goes;
  any other finalizer is its owner's to remove. With none left, its kind's deletion
  follows (a VM's is already under way: its fold lets it go).
- A terminating namespace (deleted: `metadata.deletionTimestamp`) first has everything
  in it deleted, as Kubernetes' namespace controller does; once nothing is left, it goes.

Each deletion is its kind's (a VMI's guest stopped first, a VM's VMI torn down); every
decision is keyed by the uids it answers, so deciding it again appends nothing new. Which
objects lost their owners, which are marked and which migrations are surplus is the
controller's ownership index's (`ownership.py`): a pass costs what it finds, not a walk."""

from __future__ import annotations

from typing import Any

from events.catalog import (
    USER_METADATA,
    Event,
    MetadataChanged,
    MigrationAbortRequested,
    PolicyDeleted,
    ResourceDeleted,
    VMDeleted,
)
from events.envelope import Context
from events.meta import CLUSTER_SCOPE, Aggregate, Kind, KindToken
from projections import namespaces
from projections.cluster import Cluster
from projections.views import ManifestView, MigrationView, PolicyView, VMIView, VMView
from services.controller import emit, run_strategy
from services.controller.ownership import Ownership

#: events after which an owner may be gone (a replica set, a pool, a snapshot, a policy),
#: or a finalizer or an owner reference changed: the collector looks at once. A tick
#: (about a second) looks anyway: a VM's or a VMI's removal, frequent and rarely an
#: owner's, waits for it rather than revisit, on each event, every orphan still going
TRIGGERS = (ResourceDeleted, PolicyDeleted, MetadataChanged)
FOREGROUND, ORPHAN = "foregroundDeletion", "orphan"


def collect(cluster: Cluster, own: Ownership, ctx: Context) -> list[Event]:
    out: list[Event] = []
    for kind, k in sorted(own.orphans):
        out += _delete(kind, cluster.table(kind)[k], ctx)
    for mig in own.finalized_surplus(cluster):
        out += _delete(Kind.MIGRATION, mig, ctx)
    for kind, k in sorted(own.marked):
        out += _finalize(cluster, own, kind, cluster.table(kind)[k], ctx)
    return out


def _aggregate(kind: KindToken, view: Any) -> Aggregate:
    ns = getattr(view, "namespace", "") or CLUSTER_SCOPE
    return Aggregate(kind=kind, namespace=ns, name=view.name, uid=view.uid)


def _deleting(view: ManifestView) -> bool:
    match view:
        case VMIView():
            return view.deletion_requested_at is not None
        case VMView():
            return view.deleted_at is not None
        case MigrationView():
            return view.deleted
        case _:
            return False


def _delete(kind: KindToken, view: ManifestView, ctx: Context) -> list[Event]:
    """The object's deletion as its kind has it (nothing when it is already under way)."""
    if _deleting(view):
        return []
    agg = _aggregate(kind, view)
    key = f"gc/{agg.uid}"
    match view:
        case VMIView():
            return [run_strategy.delete_vmi(view, ctx)]
        case VMView():
            return [VMDeleted(meta=emit.meta(ctx, agg, key))]
        case MigrationView():
            node = view.source_node if view.phase == "Running" else view.target_node
            return [MigrationAbortRequested(meta=emit.meta(ctx, agg, key, node=node))]
        case PolicyView():
            return [PolicyDeleted(meta=emit.meta(ctx, agg, key))]
        case _:
            return [ResourceDeleted(meta=emit.meta(ctx, agg, key))]


def _metadata(view: ManifestView) -> dict[str, Any]:
    meta = view.manifest.get("metadata") or {}
    return {f: meta[f] for f in USER_METADATA if f in meta}


def _without(kind: KindToken, view: Any, finalizer: str, ctx: Context) -> Event:
    metadata = _metadata(view)
    rest = [f for f in view.finalizers if f != finalizer]
    if rest:
        metadata["finalizers"] = rest
    else:
        metadata.pop("finalizers", None)
    agg = _aggregate(kind, view)
    return MetadataChanged(
        meta=emit.meta(ctx, agg, f"gc-finalized/{view.uid}/{finalizer}"), metadata=metadata
    )


def _orphan(kind: KindToken, dependent: Any, owner: str, ctx: Context) -> Event:
    metadata = _metadata(dependent)
    refs = [r for r in metadata.get("ownerReferences") or [] if r.get("uid") != owner]
    if refs:
        metadata["ownerReferences"] = refs
    else:
        metadata.pop("ownerReferences", None)
    agg = _aggregate(kind, dependent)
    key = f"gc-orphan/{dependent.uid}/{owner}"
    return MetadataChanged(meta=emit.meta(ctx, agg, key), metadata=metadata)


def _emptied(cluster: Cluster, namespace: str, ctx: Context) -> list[Event] | None:
    """A terminating namespace's contents deleted as the namespace controller deletes
    them, each as a user's delete would (an object with finalizers marked, to wait for
    them; an owned one left to its owner's deletion); None once nothing is left."""
    inside = list(namespaces.contents(cluster, namespace))
    if not inside:
        return None
    uids = {v.uid for _, v in inside}
    out: list[Event] = []
    for kind, view in inside:
        if view.marked or any(u in uids for u in view.owners):
            continue
        if view.finalizers:
            agg = _aggregate(kind, view)
            key = f"gc-namespace/{view.uid}"
            meta = emit.meta(ctx, agg, key)
            out.append(MetadataChanged(meta=meta, metadata=_metadata(view), deletion=True))
        else:
            out += _delete(kind, view, ctx)
    return out


def _dependents(cluster: Cluster, own: Ownership, uid: str) -> list[tuple[KindToken, Any]]:
    return [(kind, cluster.table(kind)[k]) for kind, k in own.dependents(uid)]


def _finalize(
    cluster: Cluster, own: Ownership, kind: KindToken, view: Any, ctx: Context
) -> list[Event]:
    if kind == namespaces.KIND:
        emptied = _emptied(cluster, view.name, ctx)
        if emptied is not None:
            return emptied
    fins = view.finalizers
    if ORPHAN in fins:
        deps = _dependents(cluster, own, view.uid)
        if deps:
            return [_orphan(k, d, view.uid, ctx) for k, d in deps]
        return [_without(kind, view, ORPHAN, ctx)]
    if FOREGROUND in fins:
        deps = _dependents(cluster, own, view.uid)
        if deps:
            return [ev for k, d in deps for ev in _delete(k, d, ctx)]
        return [_without(kind, view, FOREGROUND, ctx)]
    if fins:
        return []  # another finalizer: its owner's to remove
    return _delete(kind, view, ctx)
