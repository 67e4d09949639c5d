"""`?dryRun=All`: a write decided and admitted as usual, answered with the object it would
produce, and never appended. Pure: the preview folds the outcome's own events into the
kind's view with the kind's fold, off to the side of the projection, and renders it."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from core.context import Outcome
from core.errors import invalid_request
from core.kind import KindRules
from events.envelope import Stored
from projections.cluster import Cluster, view_key
from projections.replay import gone

JSON = dict[str, Any]
ALL = "All"


def requested(query: Mapping[str, str]) -> bool:
    """Whether the write is a dry run; any value but `All` is refused as the API server
    refuses it (422, nothing decided)."""
    value = query.get("dryRun")
    if value is None or value == "":
        return False
    if value != ALL:
        raise invalid_request(f'dryRun: Unsupported value: "{value}": supported values: "All"')
    return True


def preview(cluster: Cluster, spec: KindRules, outcome: Outcome, now: float) -> JSON | None:
    """The object `outcome` answers with (of `spec`, the kind its events render as), as
    it would be once its events were folded (None: it would be gone). Events of other
    aggregates do not change it."""
    current = spec.table(cluster).get(outcome.key)
    rv = "" if current is None else str(current.resource_version)
    view = current
    seq = cluster.last_seq
    for append in outcome.appends:
        agg = append.event.meta.aggregate
        if agg.kind != spec.event_kind or view_key(agg) != outcome.key:
            continue
        if spec.evolve is None:
            raise invalid_request(f"{spec.resource} does not support dry run")
        seq += 1
        view = spec.evolve(view, Stored(seq=seq, subject="", time=now, event=append.event))
    if view is None or gone(view):
        return None
    obj = spec.render(cluster, view, now)
    meta = dict(obj.get("metadata") or {})
    if rv:
        meta["resourceVersion"] = rv  # nothing was stored: the version is the current one
    else:
        meta.pop("resourceVersion", None)
    return {**obj, "metadata": meta}
