"""Namespace (core/v1, cluster-scoped): a generic kind whose delete begins the namespace's
termination. A deleted namespace is Terminating (`metadata.deletionTimestamp`) while the
controller's garbage collector deletes what lives in it (`services/controller/gc.py`);
then it is gone. Creates into a missing or terminating namespace are refused by
`core/namespace_lifecycle.py`; the api creates the system namespaces at its start
(`ensure`)."""

from __future__ import annotations

from typing import Any

import msgspec

from core import intents
from core.context import Append, Outcome, RequestContext
from core.kind import CallArgs
from core.names import NameRule
from core.ownership import user_metadata
from events.catalog import MetadataChanged
from events.objects import Namespace
from kinds.resource import resource_spec
from kinds.spec import PrinterColumn, Scope
from projections import namespaces
from projections.cluster import Cluster
from projections.render import render_namespace
from projections.views import ResourceView

JSON = dict[str, Any]
KIND = namespaces.KIND


def _admit(_: Cluster, typed: Namespace, __: str) -> tuple[Namespace, list[Any]]:
    """The API server's namespace strategy: the name label on every namespace."""
    name = typed.metadata.name or ""
    typed.metadata.labels = {**(typed.metadata.labels or {}), namespaces.NAME_LABEL: name}
    return typed, []


def _delete(c: Cluster, _: str, name: str, __: CallArgs, ctx: RequestContext) -> Outcome:
    """The namespace's termination begins: it stays, Terminating, until what lives in it
    is gone (a second delete changes nothing)."""
    found: ResourceView = intents.view(c, SPEC, "", name)
    if found.marked:
        return Outcome((), KIND, name, 200)
    event = MetadataChanged(
        meta=ctx.meta(KIND, "", name, found.uid), metadata=user_metadata(found), deletion=True
    )
    return Outcome((Append(event, found.version),), KIND, name, 200)


def ensure(name: str, cluster: Cluster, ctx: RequestContext) -> Outcome:
    """A system namespace created when it does not exist (nothing when it does)."""
    if namespaces.find(cluster, name) is not None:
        return Outcome((), KIND, name, 200)
    body: JSON = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}
    return intents.create(cluster, SPEC, "", body, ctx)


SPEC = msgspec.structs.replace(
    resource_spec(
        group="",
        version="v1",
        kind="Namespace",
        plural="namespaces",
        singular="namespace",
        short_names=("ns",),
        categories=(),
        scope=Scope.CLUSTER,
        event_kind=KIND,
        object_type=Namespace,
        printer_columns=(
            PrinterColumn("Status", "string", ".status.phase"),
            PrinterColumn("Age", "date", ".metadata.creationTimestamp"),
        ),
        admit=_admit,
    ),
    name_rule=NameRule.LABEL,
    delete=_delete,
    render=lambda _c, v, _now: render_namespace(v),
)
