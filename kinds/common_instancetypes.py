"""KubeVirt's common instance types and preferences, deployed as its operator deploys them
(`pkg/virt-operator/resource/apply/instancetypes.go`): every cluster-wide instance type
and preference of the bundle (`kinds/bundled/`) created when missing and updated when the
bundle changed, marked as the operator's (`app.kubernetes.io/managed-by: virt-operator`).
The api runs it at its start unless told not to (KubeVirt's
`spec.configuration.commonInstancetypesDeployment.enabled: false`).

Each object carries the bundle's identifier (a hash of its files) in KubeVirt's
`kubevirt.io/install-strategy-identifier` annotation: an object already bearing it is up to
date, so a start on an unchanged bundle compares one annotation per object, parses nothing
and appends nothing. Pure: the documents and their identifier are handed in."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any

from core import intents
from core.context import Append, Outcome, RequestContext
from kinds.instancetype import CLUSTER_INSTANCETYPE, CLUSTER_PREFERENCE
from kinds.spec import KindSpec
from projections.cluster import Cluster
from projections.replay import gone

JSON = dict[str, Any]
MANAGED_BY, OPERATOR = "app.kubernetes.io/managed-by", "virt-operator"
COMPONENT, KUBEVIRT = "app.kubernetes.io/component", "kubevirt"
IDENTIFIER = "kubevirt.io/install-strategy-identifier"
_SPECS = {s.kind: s for s in (CLUSTER_INSTANCETYPE, CLUSTER_PREFERENCE)}


def identifier(bundle: bytes) -> str:
    """The bundle's identity, from its files' bytes: what changes when any document does."""
    return hashlib.sha256(bundle).hexdigest()[:16]


def up_to_date(cluster: Cluster, ident: str, count: int) -> bool:
    """Every one of the bundle's `count` objects bears `ident`: nothing to parse or do."""
    bearing = 0
    for spec in _SPECS.values():
        for view in spec.table(cluster).values():
            if gone(view):
                continue
            meta = view.manifest.get("metadata") or {}
            bearing += (meta.get("annotations") or {}).get(IDENTIFIER) == ident
    return bearing == count


def _marked(doc: JSON, ident: str) -> JSON:
    meta = dict(doc.get("metadata") or {})
    meta["labels"] = {**(meta.get("labels") or {}), MANAGED_BY: OPERATOR, COMPONENT: KUBEVIRT}
    meta["annotations"] = {**(meta.get("annotations") or {}), IDENTIFIER: ident}
    return {**doc, "metadata": meta}


def _current(cluster: Cluster, spec: KindSpec, name: str) -> Any:
    found = spec.table(cluster).get(spec.key("", name))
    return None if found is None or gone(found) else found


def deploy(documents: Sequence[JSON], ident: str, cluster: Cluster, ctx: RequestContext) -> Outcome:
    """Every bundled object created or updated unless it bears `ident` already: one
    outcome, each object's event on its own version (a replica that deployed first leaves
    nothing to do)."""
    appends: list[Append] = []
    for doc in documents:
        spec = _SPECS.get(str(doc.get("kind")))
        name = str((doc.get("metadata") or {}).get("name") or "")
        if spec is None or not name:
            continue
        found = _current(cluster, spec, name)
        if found is not None:
            annotations = (found.manifest.get("metadata") or {}).get("annotations") or {}
            if annotations.get(IDENTIFIER) == ident:
                continue
        body = _marked(doc, ident)
        if found is None:
            outcome = intents.create(cluster, spec, "", body, ctx)
        else:
            current = spec.render(cluster, found, ctx.now)
            body["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
            outcome = intents.update(cluster, spec, "", name, body, ctx, updatable=())
        appends += outcome.appends
    return Outcome(tuple(appends), CLUSTER_INSTANCETYPE.event_kind, "", 200)
