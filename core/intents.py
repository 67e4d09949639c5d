"""Intents every kind shares: create, update, patch and server-side apply, as pure
decisions (cluster view, request, `RequestContext`) → `Outcome`, or an `ApiError` with
KubeVirt's Status. Each kind's own intents (delete, the subresources) live in its module
under `kinds/`; the commands (`core/commands.py`) call both."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from core import admission, field_manager, names, namespace_lifecycle
from core.context import Append, Outcome, RequestContext
from core.errors import (
    ApiError,
    Resource,
    already_exists,
    bad_request,
    conflict,
    invalid,
    not_found,
    stale,
)
from core.kind import KindRules
from events.catalog import USER_METADATA, MetadataChanged
from events.manifest import ManifestError, dump, load
from projections.cluster import Cluster
from projections.evolve import with_metadata
from projections.replay import gone

JSON = dict[str, Any]


# ------------------------------------------------------------------ helpers
def _load(raw: JSON, type_: type[Any], res: Resource) -> Any:
    if not isinstance(raw, dict):
        raise bad_request("the body of the request must be an object")
    kind = raw.get("kind")
    if kind is not None and kind != res.kind:
        raise bad_request(
            f"the kind of the provided object ({kind}) does not match the resource ({res.kind})"
        )
    try:
        return load(raw, type_)
    except ManifestError as exc:
        raise bad_request(f"the body of the request was in an unknown format: {exc}") from None


def _clean_metadata(raw: JSON, name: str, namespace: str, uid: str) -> JSON:
    meta = dict(raw.get("metadata") or {})
    for server_set in (
        "resourceVersion",
        "creationTimestamp",
        "generation",
        "deletionTimestamp",
        "generateName",
    ):
        meta.pop(server_set, None)
    meta["name"] = name
    if namespace:
        meta["namespace"] = namespace
    meta["uid"] = uid
    return meta


def _metadata(raw: JSON) -> JSON:
    """The body's metadata, with the fields that place the object typed as strings (a
    wrongly typed body is a 400 before any of it is used)."""
    if not isinstance(raw, dict):
        raise bad_request("the body of the request must be an object")
    meta = raw.get("metadata")
    if meta is None:
        return {}
    if not isinstance(meta, dict):
        raise bad_request(
            "the body of the request was in an unknown format: metadata must be an object"
        )
    for field in ("name", "namespace", "generateName", "uid", "resourceVersion"):
        if meta.get(field) is not None and not isinstance(meta[field], str):
            raise bad_request(
                f"the body of the request was in an unknown format: metadata.{field} "
                "must be a string"
            )
    return meta


def _name_and_namespace(raw: JSON, namespace: str, ctx: RequestContext) -> tuple[str, str]:
    meta = _metadata(raw)
    body_ns = meta.get("namespace")
    if namespace and body_ns and body_ns != namespace:
        raise bad_request(
            "the namespace of the provided object does not match the namespace sent on the request"
        )
    name = meta.get("name") or ""
    if not name and meta.get("generateName"):
        name = f"{meta['generateName']}{ctx.suffix()}"
    return name, namespace


def _check_identity(spec: KindRules, namespace: str, name: str, ctx: RequestContext) -> None:
    """The API server's name and namespace checks: 422 before anything else runs, so no
    name that could not be stored or routed reaches admission, the projection or the bus."""
    causes = names.validate_identity(
        namespace,
        name,
        namespaced=spec.namespaced,
        rule=spec.name_rule,
        socket_limit=ctx.socket_name_max if spec.runs_launcher else None,
    )
    if causes:
        status = names.invalid_object(spec.kind, spec.group, name, causes)
        raise ApiError(status)


def _denied(res: Resource, name: str, causes: list[Any]) -> ApiError:
    status = admission.invalid_status(res.kind, name, causes, group=res.group)
    return invalid(
        res, name, list(status.details.causes or []) if status.details else [], status.message
    )


def _finish(raw: JSON, typed: Any, name: str, namespace: str, uid: str) -> JSON:
    manifest = dump(typed, raw)
    manifest.pop("status", None)
    manifest["apiVersion"] = raw.get("apiVersion") or typed.api_version
    manifest["kind"] = typed.kind
    manifest["metadata"] = _clean_metadata(manifest, name, namespace, uid)
    return manifest


def defaulted(fn: Callable[[Any, str], Any], typed: Any, uid: str) -> Any:
    """A mutating webhook's defaults; unparsable quantities are left to validation."""
    try:
        return fn(typed, uid)
    except ValueError:
        return typed


def view(cluster: Cluster, spec: KindRules, namespace: str, name: str) -> Any:
    """The kind's view of that name, or KubeVirt's NotFound."""
    found = spec.table(cluster).get(spec.key(namespace, name))
    if found is None:
        raise not_found(spec.resource, name)
    return found


# ------------------------------------------------------------------- create
def create(
    cluster: Cluster,
    spec: KindRules,
    namespace: str,
    raw: JSON,
    ctx: RequestContext,
    *,
    fields: field_manager.Ownership | None = None,
) -> Outcome:
    """`fields`: how the request's manager takes ownership (`metadata.managedFields`)."""
    if spec.created is None:
        raise bad_request(f"{spec.resource} cannot be created")
    res = spec.resource
    namespace = namespace if spec.namespaced else ""
    name, namespace = _name_and_namespace(raw, namespace, ctx)
    if spec.namespaced and not names.validate_namespace(namespace):
        # NamespaceLifecycle, naming the object as admission does (the body's name, or its
        # generateName: none is generated yet); a namespace that is no DNS label could
        # never exist, and the 422 below says why
        given = _metadata(raw)
        named = given.get("name") or given.get("generateName") or "Unknown"
        namespace_lifecycle.admit_create(cluster, res, namespace, named)
    _check_identity(spec, namespace, name, ctx)
    typed = _load(raw, spec.object_type, res)
    typed.metadata.name = name
    if namespace:
        typed.metadata.namespace = namespace
    uid = ctx.uid()
    causes: list[Any] = []
    if spec.admit is not None:
        typed, causes = spec.admit(cluster, typed, uid)
    if causes:
        raise _denied(res, name, causes)
    k = spec.key(namespace, name)
    found = spec.table(cluster).get(k)
    if found is not None and not gone(found):
        raise already_exists(res, name)
    manifest = (fields or field_manager.kept)(
        None, _finish(raw, typed, name, namespace, uid), ctx.now
    )
    event = spec.created(ctx.meta(spec.event_kind, namespace, name, uid), manifest)
    # a name whose object is gone is free: the new object (its own uid) continues the
    # name's aggregate after the old one's last event
    expected = 0 if found is None else found.version
    return Outcome((Append(event, expected),), spec.event_kind, k, 201)


# ------------------------------------------------------------------- update
def update(
    cluster: Cluster,
    spec: KindRules,
    namespace: str,
    name: str,
    raw: JSON,
    ctx: RequestContext,
    *,
    updatable: tuple[str, ...],
    fields: field_manager.Ownership | None = None,
) -> Outcome:
    """Replace the object (on its resourceVersion and uid, when the body gives them).
    `updatable`: the plurals that accept updates, for the refusal's message."""
    res = spec.resource
    namespace = namespace if spec.namespaced else ""
    meta = _metadata(raw)
    body_name = meta.get("name")
    if body_name and body_name != name:
        raise bad_request(
            f"the name of the object ({body_name}) does not match the name on the URL ({name})"
        )
    # an update never moves an object: the API server's rest.BeforeUpdate answers 400
    body_ns = meta.get("namespace")
    if namespace and body_ns and body_ns != namespace:
        raise bad_request(
            "the namespace of the provided object does not match the namespace sent on the request"
        )
    k = spec.key(namespace, name)
    current = view(cluster, spec, namespace, name)
    typed = _load(raw, spec.object_type, res)
    rv = meta.get("resourceVersion")
    if rv and rv != str(current.resource_version):
        raise stale(res, name)
    if spec.replace is not None:
        return spec.replace(cluster, namespace, name, raw, ctx)
    meta_uid = meta.get("uid")
    if meta_uid and meta_uid != current.uid:
        raise conflict(
            res,
            name,
            "Precondition failed: "
            f"UID in precondition: {meta_uid}, UID in object meta: {current.uid}",
        )
    if _beside_metadata(raw) == _beside_metadata(spec.render(cluster, current, ctx.now)):
        # only metadata changed (a label, an annotation, a finalizer): no admission, as
        # KubeVirt's update webhooks compare the spec; neither spec nor status is touched
        return _metadata_update(spec, namespace, name, current, meta, ctx, fields)
    if spec.updated is None:  # an immutable kind: its update webhook, not its create one
        raise _spec_refused(spec, name, updatable)
    typed.metadata.name = name
    if namespace:
        typed.metadata.namespace = namespace
    if spec.admit is not None:
        typed, causes = spec.admit(cluster, typed, current.uid)
        if causes:
            raise _denied(res, name, causes)
    manifest = _finish(raw, typed, name, namespace, current.uid)
    deleting = (current.manifest.get("metadata") or {}).get("deletionTimestamp")
    if deleting:  # the server's, kept through an update
        manifest["metadata"]["deletionTimestamp"] = deleting
    if _beside_metadata(manifest) == _beside_metadata(current.manifest):
        return _metadata_update(spec, namespace, name, current, manifest["metadata"], ctx, fields)
    manifest = (fields or field_manager.kept)(current.manifest, manifest, ctx.now)
    if manifest == current.manifest:
        # as the API server: a no-op update appends nothing (resourceVersion and
        # generation stay), and kubectl reports the object unchanged
        return Outcome((), spec.event_kind, k, 200)
    event = spec.updated(ctx.meta(spec.event_kind, namespace, name, current.uid), manifest)
    return Outcome((Append(event, current.version),), spec.event_kind, k, 200)


def _beside_metadata(obj: JSON) -> JSON:
    """What an object holds besides its metadata and status (the kind's apiVersion and
    kind are checked on load)."""
    return {k: v for k, v in obj.items() if k not in ("apiVersion", "kind", "metadata", "status")}


def _metadata_update(
    spec: KindRules,
    namespace: str,
    name: str,
    current: Any,
    meta: JSON,
    ctx: RequestContext,
    fields: field_manager.Ownership | None,
) -> Outcome:
    """A `MetadataChanged` with the user's metadata of `meta` (an empty map or list is
    none, as the API server stores it), or nothing when it changes nothing."""
    k = spec.key(namespace, name)
    wanted = {f: meta[f] for f in USER_METADATA if f != "managedFields" and meta.get(f)}
    before = current.manifest.get("metadata") or {}
    added = [f for f in wanted.get("finalizers") or [] if f not in (before.get("finalizers") or [])]
    if added and before.get("deletionTimestamp"):
        found = ", ".join(f'"{f}"' for f in added)
        detail = (
            "Forbidden: no new finalizers can be added if the object is being deleted, "
            f"found new finalizers []string{{{found}}}"
        )
        cause = admission.cause("FieldValueForbidden", detail, "metadata.finalizers")
        res = spec.resource
        message = f'{res.kind}.{res.group} "{name}" is invalid: metadata.finalizers: {detail}'
        raise invalid(res, name, [cause], message)
    kept = (current.manifest.get("metadata") or {}).get("managedFields")
    if kept:
        wanted["managedFields"] = kept
    changed = with_metadata(current.manifest, wanted)
    manifest = (fields or field_manager.kept)(current.manifest, changed, ctx.now)
    if manifest == current.manifest:
        return Outcome((), spec.event_kind, k, 200)
    now = manifest.get("metadata") or {}
    event = MetadataChanged(
        meta=ctx.meta(spec.event_kind, namespace, name, current.uid),
        metadata={f: now[f] for f in USER_METADATA if f in now},
    )
    return Outcome((Append(event, current.version),), spec.event_kind, k, 200)


def _spec_refused(spec: KindRules, name: str, updatable: tuple[str, ...]) -> ApiError:
    """An immutable kind's refusal of a changed spec: its webhook's words when KubeVirt
    has one."""
    refusal = spec.spec_refusal
    res = spec.resource
    if refusal is None:
        return bad_request(f"{res} cannot be updated: only {' and '.join(updatable)} can")
    cause = admission.cause(refusal.cause_type, refusal.message, refusal.field)
    message = f'admission webhook "{refusal.webhook}" denied the request: {refusal.message}'
    return invalid(res, name, [cause], message)


# -------------------------------------------------------------------- patch
def patch(
    cluster: Cluster,
    spec: KindRules,
    namespace: str,
    name: str,
    change: Callable[[JSON], JSON],
    ctx: RequestContext,
    *,
    updatable: tuple[str, ...],
    fields: field_manager.Ownership | None = None,
) -> Outcome:
    """A PATCH: `change` (the patch, pure) is applied to the object as it is served now
    and the result goes through `update`, so it is admitted and appended on the version
    it was decided against; a `metadata.resourceVersion` the patch sets is a precondition."""
    namespace = namespace if spec.namespaced else ""
    current = view(cluster, spec, namespace, name)
    patched = change(spec.render(cluster, current, ctx.now))
    return update(cluster, spec, namespace, name, patched, ctx, updatable=updatable, fields=fields)


def server_side_apply(
    cluster: Cluster,
    spec: KindRules,
    namespace: str,
    name: str,
    config: JSON,
    ctx: RequestContext,
    *,
    manager: str,
    force: bool,
    updatable: tuple[str, ...],
) -> Outcome:
    """An Apply: the configuration merged into the object as served (or a new object) by
    the field manager's rules (`field_manager.apply`), then created or updated as any
    write is: admitted, and appended on the version it was decided against."""
    if not isinstance(config, dict):
        raise bad_request("the body of the request must be an object")
    namespace = namespace if spec.namespaced else ""
    _metadata(config)
    current_view = spec.table(cluster).get(spec.key(namespace, name))
    current = None if current_view is None else spec.render(cluster, current_view, ctx.now)
    result = field_manager.apply(current, config, manager, force, ctx.now, spec.resource, name)
    meta = result.setdefault("metadata", {})
    meta["name"] = name
    ownership = field_manager.from_apply(result)
    if current is None:
        if namespace:
            meta["namespace"] = namespace
        return create(cluster, spec, namespace, result, ctx, fields=ownership)
    return update(
        cluster, spec, namespace, name, result, ctx, updatable=updatable, fields=ownership
    )


__all__ = ["create", "defaulted", "patch", "server_side_apply", "update", "view"]
