"""A change a what-if tries that is data, not code: a MigrationPolicy put in place as the
window begins. The CLI (`--migration-policy FILE`) and the api's what-if (a manifest in
the request) build it here, so both refuse what the api would refuse, in its words."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

from core import intents
from core.context import RequestContext
from events.catalog import Event
from events.envelope import Stored
from kinds.registry import REGISTRY
from projections.cluster import Cluster

Prelude = Callable[[Any, Stored], list[Event]]


class NotAPolicy(ValueError):
    """The manifest is not a MigrationPolicy at all."""


def migration_policy(manifest: object) -> Prelude:
    """The policy created (or, when the cluster has one of its name then, updated) through
    the kind's own admission as the window begins. Raises `NotAPolicy`, or the api's
    `ApiError` at once when the api would refuse it (not mid-replay)."""
    if not isinstance(manifest, dict) or manifest.get("kind") != "MigrationPolicy":
        raise NotAPolicy("not a MigrationPolicy manifest")
    spec = REGISTRY.resource("migrationpolicies")

    def decided(cluster: Cluster, now: float) -> list[Event]:
        ids = itertools.count(1)
        ctx = RequestContext(
            now=now,
            correlation_id="whatif",
            new_id=lambda: f"{next(ids):032x}",
            suffix=lambda: "whatif",
        )
        name = str((manifest.get("metadata") or {}).get("name") or "")
        if spec.key("", name) in spec.table(cluster):
            outcome = intents.update(
                cluster, spec, "", name, manifest, ctx, updatable=(spec.plural,)
            )
        else:
            outcome = intents.create(cluster, spec, "", manifest, ctx)
        return [a.event for a in outcome.appends]

    decided(Cluster(), 0.0)  # the api's refusal now
    return lambda state, at: decided(state.cluster, at.time)


def policy_name(manifest: dict[str, Any]) -> str:
    """How a report names the change."""
    return f"migration policy {(manifest.get('metadata') or {}).get('name') or ''}".rstrip()
