"""Deletion as the API server begins it: an object with finalizers, or deleted with
`propagationPolicy` Foreground (finalizer `foregroundDeletion`) or Orphan (`orphan`), is
marked (`metadata.deletionTimestamp`, a `MetadataChanged` with `deletion`) and stays until
its finalizers are gone; the controller's garbage collector
(`services/controller/gc.py`) then deletes or orphans its dependents, removes the
policy's finalizer and finishes the deletion. Without them, the kind's own delete. Pure."""

from __future__ import annotations

from typing import Any

from core import intents
from core.context import Append, Outcome, RequestContext
from core.kind import KindRules
from events.catalog import USER_METADATA, MetadataChanged
from projections.cluster import Cluster
from projections.views import ManifestView

JSON = dict[str, Any]
#: the finalizer a propagation policy adds (Background, the default: none)
POLICY_FINALIZERS = {"Foreground": "foregroundDeletion", "Orphan": "orphan"}


def user_metadata(view: ManifestView) -> JSON:
    meta = view.manifest.get("metadata") or {}
    return {f: meta[f] for f in USER_METADATA if f in meta}


def marking(
    cluster: Cluster,
    spec: KindRules,
    namespace: str,
    name: str,
    policy: str | None,
    ctx: RequestContext,
) -> Outcome | None:
    """The deletion's first step when the object must wait, or None for the kind's own
    delete; an object already marked: nothing more (it waits)."""
    namespace = namespace if spec.namespaced else ""
    found: Any = intents.view(cluster, spec, namespace, name)
    if getattr(found, "manifest_json", None) is None:
        return None  # a node: no metadata of its own to wait on
    k = spec.key(namespace, name)
    if found.marked:
        return Outcome((), spec.event_kind, k, 200)
    fins = found.finalizers
    extra = POLICY_FINALIZERS.get(policy or "")
    if extra and extra not in fins:
        fins.append(extra)
    if not fins:
        return None
    metadata = {**user_metadata(found), "finalizers": fins}
    event = MetadataChanged(
        meta=ctx.meta(spec.event_kind, namespace, name, found.uid),
        metadata=metadata,
        deletion=True,
    )
    return Outcome((Append(event, found.version),), spec.event_kind, k, 200)
