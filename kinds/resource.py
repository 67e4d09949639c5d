"""What the generic kinds (every kind without events of its own) share: their create,
update and delete events, table, fold and render, so each kind's module holds only what is
its own (names, printer columns, admission, subresources)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from core import admission
from core.context import Append, Outcome, RequestContext
from core.intents import view
from core.kind import CallArgs, SpecRefusal, Subresource
from events.catalog import Event, ResourceCreated, ResourceDeleted, ResourceUpdated
from events.meta import KindToken, Meta
from kinds.spec import Admit, KindSpec, PrinterColumn, Scope, Version
from projections.cluster import Cluster
from projections.evolve import evolve_resource
from projections.render import render_resource
from projections.views import ResourceView

JSON = dict[str, Any]


def _created(meta: Meta, manifest: JSON) -> Event:
    return ResourceCreated(meta=meta, manifest=manifest)


def _updated(meta: Meta, manifest: JSON) -> Event:
    return ResourceUpdated(meta=meta, manifest=manifest)


def admit_name(_: Cluster, typed: Any, __: str) -> tuple[Any, list[Any]]:
    return typed, admission.validate_name(typed.metadata.name, typed.metadata.generate_name)


def delete_act(spec_of: Callable[[], KindSpec]) -> Callable[..., Outcome]:
    def delete(c: Cluster, ns: str, name: str, _: CallArgs, ctx: RequestContext) -> Outcome:
        spec = spec_of()
        found: ResourceView = view(c, spec, ns, name)
        event = ResourceDeleted(meta=ctx.meta(spec.event_kind, ns, name, found.uid))
        return Outcome((Append(event, found.version),), spec.event_kind, spec.key(ns, name), 200)

    return delete


def _in_version(obj: JSON, api_version: str) -> JSON:
    """Stored in the storage version: a manifest an older release kept in another (served,
    same schema) version is served in it too."""
    obj["apiVersion"] = api_version
    return obj


def resource_spec(
    *,
    group: str,
    version: str,
    kind: str,
    plural: str,
    singular: str,
    event_kind: KindToken,
    object_type: type[Any],
    short_names: tuple[str, ...] = (),
    categories: tuple[str, ...] = ("all",),
    scope: Scope = Scope.NAMESPACED,
    printer_columns: tuple[PrinterColumn, ...] = (),
    admit: Admit | None = admit_name,
    subresources: tuple[Subresource, ...] = (),
    subresource_group: str = "subresources.kubevirt.io",
    updatable: bool = True,
    spec_refusal: SpecRefusal | None = None,
    versions: tuple[Version, ...] = (),
    status_subresource: bool = True,
) -> KindSpec:
    spec: KindSpec | None = None

    def me() -> KindSpec:
        assert spec is not None
        return spec

    spec = KindSpec(
        group=group,
        version=version,
        kind=kind,
        plural=plural,
        singular=singular,
        short_names=short_names,
        categories=categories,
        scope=scope,
        event_kind=event_kind,
        object_type=object_type,
        subresources=subresources,
        subresource_group=subresource_group,
        printer_columns=printer_columns,
        admit=admit,
        created=_created,
        updated=_updated if updatable else None,
        spec_refusal=spec_refusal,
        delete=delete_act(me),
        table=lambda c: c.resources[event_kind],
        render=lambda _c, v, _now: _in_version(
            render_resource(v), f"{group}/{version}" if group else version
        ),
        evolve=evolve_resource,
        versions=versions,
        status_subresource=status_subresource,
    )
    return spec
