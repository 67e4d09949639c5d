"""MigrationPolicy (migrations.kubevirt.io, cluster-scoped): its registry entry and delete."""

from __future__ import annotations

from typing import Any

from core import admission
from core.context import Append, Outcome, RequestContext
from core.intents import view
from core.kind import CallArgs
from events.catalog import PolicyCreated, PolicyDeleted, PolicyUpdated
from events.meta import Kind
from events.objects import MigrationPolicy
from kinds.spec import KindSpec, Scope
from projections.cluster import Cluster
from projections.evolve import evolve_policy
from projections.render import render_policy


def admit(_: Cluster, typed: Any, __: str) -> tuple[Any, list[Any]]:
    return typed, admission.validate_name(typed.metadata.name, None)


def delete(
    cluster: Cluster, namespace: str, name: str, grace: int | None, ctx: RequestContext
) -> Outcome:
    del namespace, grace
    policy = view(cluster, SPEC, "", name)
    event = PolicyDeleted(meta=ctx.meta(Kind.POLICY, "", name, policy.uid))
    return Outcome((Append(event, policy.version),), Kind.POLICY, name, 200)


def _delete(c: Cluster, _: str, name: str, __: CallArgs, ctx: RequestContext) -> Outcome:
    return delete(c, "", name, None, ctx)


SPEC = KindSpec(
    group="migrations.kubevirt.io",
    version="v1alpha1",
    kind="MigrationPolicy",
    plural="migrationpolicies",
    singular="migrationpolicy",
    aliases=("policy", "policies"),
    categories=("all",),
    scope=Scope.CLUSTER,
    event_kind=Kind.POLICY,
    object_type=MigrationPolicy,
    # KubeVirt's CRD declares no printer columns: kubectl shows NAME and AGE
    admit=admit,
    created=lambda meta, manifest: PolicyCreated(meta=meta, manifest=manifest),
    updated=lambda meta, manifest: PolicyUpdated(meta=meta, manifest=manifest),
    delete=_delete,
    table=lambda c: c.policies,
    render=lambda _c, v, _now: render_policy(v),
    evolve=evolve_policy,
)
