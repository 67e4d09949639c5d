"""The api's writes as commands, one path whichever transport brings them.

A transport (HTTP, `services/api/app.py`; NATS, `services/api/nats_endpoints.py`) decodes
what it received into a `Request`: the verb, the kind and object it addresses, the body as
sent, and Kubernetes' write options (the query over HTTP, headers of the same names over
NATS). `decode` turns it into a command, its body parsed and its options checked, so a
refusal here appends nothing; `decide` makes the command's `Outcome` on a cluster view.
The shell (`services/api/writes.py`) appends it and answers. Pure."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, assert_never

import msgspec

from core import (
    bodies,
    delete_options,
    dryrun,
    field_manager,
    intents,
    namespace_lifecycle,
    ownership,
    patch,
)
from core.context import Outcome, RequestContext
from core.delete_options import DeleteOptions
from core.errors import (
    bad_request,
    invalid_request,
    method_not_allowed,
    not_found,
    too_large,
    unknown_resource,
)
from core.field_validation import checked_mode, field_warnings
from core.kind import CallArgs, KindRules, Subresource
from projections.cluster import Cluster
from projections.replay import gone

JSON = dict[str, Any]
# Kubernetes' write options (CreateOptions, UpdateOptions, PatchOptions, DeleteOptions)
# that a request may carry; nothing else of a query or of a message's headers is read
PARAMS = (
    "dryRun",
    "fieldManager",
    "fieldValidation",
    "force",
    "gracePeriodSeconds",
    "propagationPolicy",
)


class Verb(StrEnum):
    CREATE = "create"
    UPDATE = "update"
    PATCH = "patch"  # a patch, or a server-side apply by its media type
    DELETE = "delete"
    CALL = "call"  # a subresource (start, stop, migrate, pause, scale, ...)


@dataclass(frozen=True)
class Request:
    """A write as a transport received it. `name` is "" for a create named by its body;
    `action` and `method` pick a subresource (a `None` method: the first of that name)."""

    verb: Verb
    spec: KindRules
    namespace: str
    name: str = ""
    body: bytes = b""
    content_type: str = ""
    params: Mapping[str, str] = field(default_factory=dict)
    agent: str = ""  # the client's User-Agent: names the field manager when none is given
    action: str = ""
    method: str | None = None

    def identity(self) -> str:
        """What an `Idempotency-Key` is bound to, besides the body."""
        options = "&".join(f"{k}={self.params[k]}" for k in sorted(self.params))
        where = f"{self.spec.plural}/{self.namespace}/{self.name}/{self.action}"
        return f"{self.verb} {self.method or ''} {where}?{options} {self.content_type}"


def params(source: Mapping[str, str]) -> dict[str, str]:
    """The write options among a query's parameters or a message's headers."""
    return {k: v for k in PARAMS if (v := source.get(k)) is not None}


# ----------------------------------------------------------------- commands
@dataclass(frozen=True, kw_only=True)
class Write:
    spec: KindRules
    namespace: str
    name: str
    dry_run: bool = False


@dataclass(frozen=True, kw_only=True)
class Create(Write):
    body: JSON
    manager: str
    warnings: tuple[str, ...] = ()


@dataclass(frozen=True, kw_only=True)
class Update(Write):
    body: JSON
    manager: str
    warnings: tuple[str, ...] = ()


@dataclass(frozen=True, kw_only=True)
class Patch(Write):
    """A JSON or merge patch of the object as served (strategic merge: a built-in
    kind's only)."""

    raw: bytes
    content_type: str
    manager: str
    validation: str  # fieldValidation: the patched object is checked once it is made


@dataclass(frozen=True, kw_only=True)
class Apply(Write):
    """A server-side apply of `config` by `manager`."""

    config: JSON
    manager: str
    force: bool
    warnings: tuple[str, ...] = ()


@dataclass(frozen=True, kw_only=True)
class Delete(Write):
    args: CallArgs
    options: DeleteOptions


@dataclass(frozen=True, kw_only=True)
class Call(Write):
    """A subresource; a PATCH of a shaped one (`scale`) is applied to the shape as served
    (`raw`, `content_type`) and its result is the call's body."""

    sub: Subresource
    args: CallArgs
    raw: bytes | None = None
    content_type: str = ""


Command = Create | Update | Patch | Apply | Delete | Call


# ------------------------------------------------------------------ decode
def _validation(p: Mapping[str, str]) -> str:
    return p.get("fieldValidation") or "Warn"


def _manager(req: Request) -> str:
    """`fieldManager`, else the client's User-Agent up to its first `/`, as the API
    server names an Update's manager."""
    manager = req.params.get("fieldManager") or ""
    if not manager:
        manager = req.agent.split("/", 1)[0] or "unknown"
    return field_manager.check_manager(manager)


def _with_name(body: JSON, name: str) -> JSON:
    """A create addressed by name (NATS's subject names the object): a body naming
    another object is refused."""
    meta = body.get("metadata")
    if meta is None:
        meta = {}
    if not isinstance(meta, dict):
        return body  # the intent refuses it with its own message
    given = meta.get("name")
    if given and given != name:
        raise bad_request(
            f"the name of the object ({given}) does not match the name on the subject ({name})"
        )
    return {**body, "metadata": {**meta, "name": name}}


def decode(req: Request) -> Command:
    """The command `req` asks for, or the Status refusing it (nothing decided yet): the
    body parsed, the options checked, in the order the API server checks them."""
    if len(req.body) > bodies.MAX_BODY_BYTES:
        raise too_large(bodies.MAX_BODY_BYTES)
    spec, ns, name, p = req.spec, req.namespace, req.name, req.params
    match req.verb:
        case Verb.CREATE:
            body = bodies.without_nulls(bodies.parse(req.body, req.content_type))
            if name:
                body = _with_name(body, name)
            warnings = tuple(field_warnings(spec, body, _validation(p)))
            dry = dryrun.requested(p)
            return Create(
                spec=spec, namespace=ns, name=name, dry_run=dry, body=body,
                manager=_manager(req), warnings=warnings,
            )  # fmt: skip
        case Verb.UPDATE:
            body = bodies.without_nulls(bodies.parse(req.body, req.content_type))
            warnings = tuple(field_warnings(spec, body, _validation(p)))
            dry = dryrun.requested(p)
            return Update(
                spec=spec, namespace=ns, name=name, dry_run=dry, body=body,
                manager=_manager(req), warnings=warnings,
            )  # fmt: skip
        case Verb.PATCH:
            # 415 before anything; KubeVirt's kinds are custom resources: no strategic merge
            if patch.check_type(req.content_type, strategic=not spec.group) == patch.APPLY:
                return _apply(req)
            validation = checked_mode(_validation(p))  # the patched object is checked later
            dry = dryrun.requested(p)
            return Patch(
                spec=spec, namespace=ns, name=name, dry_run=dry, raw=req.body,
                content_type=req.content_type, manager=_manager(req), validation=validation,
            )  # fmt: skip
        case Verb.DELETE:
            if spec.delete is None:
                raise method_not_allowed()
            body = bodies.parse(req.body, req.content_type)
            options = DeleteOptions.parse(p, body)
            dry = dryrun.requested(p)
            return Delete(
                spec=spec, namespace=ns, name=name, dry_run=dry,
                args=CallArgs(body=body, query=p), options=options,
            )  # fmt: skip
        case Verb.CALL:
            sub = spec.subresource(req.action, req.method)
            if sub is None:
                raise unknown_resource()
            if req.method == "PATCH" and sub.shape is not None:
                patch.check_type(req.content_type, strategic=not spec.group)
                return Call(
                    spec=spec, namespace=ns, name=name, dry_run=dryrun.requested(p), sub=sub,
                    args=CallArgs(body={}, query=p), raw=req.body, content_type=req.content_type,
                )  # fmt: skip
            body = bodies.parse(req.body, req.content_type) if sub.reads_body else {}
            dry = dryrun.requested(p)
            return Call(
                spec=spec, namespace=ns, name=name, dry_run=dry, sub=sub,
                args=CallArgs(body=body, query=p),
            )  # fmt: skip
        case _:
            assert_never(req.verb)


def _apply(req: Request) -> Apply:
    """Server-side apply (`application/apply-patch+yaml`): `fieldManager` is required,
    `force=true` takes conflicting fields."""
    p = req.params
    manager = field_manager.check_manager(p.get("fieldManager") or "")
    if not manager:
        raise invalid_request(
            'PatchOptions.meta.k8s.io "" is invalid: fieldManager: Required value: '
            "is required for apply patch"
        )
    force = (p.get("force") or "").lower() in ("true", "1")
    config = bodies.parse(req.body, "application/yaml")
    warnings = tuple(field_warnings(req.spec, config, _validation(p)))
    return Apply(
        spec=req.spec, namespace=req.namespace, name=req.name, dry_run=dryrun.requested(p),
        config=config, manager=manager, force=force, warnings=warnings,
    )  # fmt: skip


# ------------------------------------------------------------------ decide
def decide(
    command: Command, cluster: Cluster, ctx: RequestContext, updatable: tuple[str, ...]
) -> Outcome:
    """The command's outcome on `cluster`. `updatable`: the plurals that accept updates
    (an immutable kind's refusal names them)."""
    spec, ns, name = command.spec, command.namespace, command.name
    match command:
        case Create(body=body, manager=manager, warnings=warnings):
            fields = field_manager.tracked_update(manager)
            outcome = intents.create(cluster, spec, ns, body, ctx, fields=fields)
            return _warned(outcome, warnings)
        case Update(body=body, manager=manager, warnings=warnings):
            fields = field_manager.tracked_update(manager)
            outcome = intents.update(
                cluster, spec, ns, name, body, ctx, updatable=updatable, fields=fields
            )
            return _warned(outcome, warnings)
        case Patch():
            return _patch(command, cluster, ctx, updatable)
        case Apply(config=config, manager=manager, force=force, warnings=warnings):
            outcome = intents.server_side_apply(
                cluster, spec, ns, name, config, ctx,
                manager=manager, force=force, updatable=updatable,
            )  # fmt: skip
            return _warned(outcome, warnings)
        case Delete(args=args, options=options):
            delete = spec.delete
            assert delete is not None  # decode refused a kind without one
            namespace_lifecycle.admit_delete(spec.resource, name)
            delete_options.check(cluster, spec, ns, name, options)
            marked = ownership.marking(cluster, spec, ns, name, options.propagation, ctx)
            return marked if marked is not None else delete(cluster, ns, name, args, ctx)
        case Call(sub=sub, args=args, raw=raw):
            if raw is not None and sub.shape is not None:
                shaped = sub.shape(_served(cluster, spec, ns, name, ctx.now))
                body = patch.apply(shaped, raw, command.content_type, strategic=not spec.group)
                args = CallArgs(body=body, query=args.query)
            return sub.act(cluster, ns, name, args, ctx)
        case _:
            assert_never(command)


def _warned(outcome: Outcome, warnings: tuple[str, ...]) -> Outcome:
    return msgspec.structs.replace(outcome, warnings=warnings) if warnings else outcome


def _served(cluster: Cluster, spec: KindRules, namespace: str, name: str, now: float) -> JSON:
    """The object as the api serves it now, or KubeVirt's NotFound."""
    found = spec.table(cluster).get(spec.key(namespace, name))
    if found is None or gone(found):
        raise not_found(spec.resource, name)
    return spec.render(cluster, found, now)


def _patch(
    command: Patch, cluster: Cluster, ctx: RequestContext, updatable: tuple[str, ...]
) -> Outcome:
    """Decided against the object as served, appended as an update: the same admission
    and optimistic concurrency as a PUT; the fields outside the schema are reported of
    what the client can write (the status is the server's)."""
    warnings: list[str] = []

    def change(current: JSON) -> JSON:
        patched = patch.apply(
            current, command.raw, command.content_type, strategic=not command.spec.group
        )
        written = {k: v for k, v in patched.items() if k != "status"}
        warnings[:] = field_warnings(command.spec, written, command.validation)
        return patched

    fields = field_manager.tracked_update(command.manager)
    outcome = intents.patch(
        cluster, command.spec, command.namespace, command.name, change, ctx,
        updatable=updatable, fields=fields,
    )  # fmt: skip
    return _warned(outcome, tuple(warnings))
