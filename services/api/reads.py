"""The one path of every read of one object, whichever transport asked: the read side's
render (and its cache) for the kind its aggregates' events render as, a render from the
fold for another view of the same aggregates (a launcher pod of a VMI, a v1 Event of a
record)."""

from __future__ import annotations

from typing import Any

from kinds.spec import KindSpec
from projections import replay
from projections.cluster import Cluster
from services.api.service import ApiService

JSON = dict[str, Any]


def renders_own(api: ApiService, spec: KindSpec) -> bool:
    """The kind is the one its aggregates' events render as, so the read side's renders
    (its cache, its watches) are this kind's; another view of the same aggregates renders
    from the fold on each read and cannot be watched."""
    return api.runner.kinds.of(spec.event_kind) is spec


def render_at(spec: KindSpec, cluster: Cluster, k: str, now: float) -> JSON | None:
    """The object at key `k` as `cluster` holds it, None when it does not (or is gone)."""
    view = spec.table(cluster).get(k)
    if view is None or replay.gone(view):
        return None
    return spec.render(cluster, view, now)


def current(api: ApiService, spec: KindSpec, k: str) -> JSON | None:
    """The object at key `k` now, as `spec` serves it; None when there is none."""
    if renders_own(api, spec):
        return api.runner.get(spec.event_kind, k)
    return render_at(spec, api.cluster, k, api.runner.clock())
