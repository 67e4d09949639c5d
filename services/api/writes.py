"""The one path of every write, whichever transport received it: the core decodes the
request into a command (`core/commands.py`), `ApiService` decides and appends it (or only
decides, on a dry run), and the answer is made here from the projection. HTTP and NATS
only encode the `Result`, so they answer the same request with the same code, body and
warnings, and append the same events."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, assert_never

import msgspec

from core import commands, dryrun
from core.commands import Call, Command, Delete, Request
from core.context import Outcome, RequestContext
from core.errors import ApiError, not_found, read_replica
from core.idempotency import Idempotency
from core.kind import Answer, KindRules
from events.meta import KindToken
from projections.cluster import Cluster
from services.api.service import ApiService

JSON = dict[str, Any]
_json = msgspec.json.Encoder()


@dataclass(frozen=True)
class Result:
    code: int
    body: bytes  # b"": an answer without a body
    seq: int = 0  # the stream sequence of the last event appended (0: none)
    warnings: tuple[str, ...] = ()


async def perform(api: ApiService, req: Request, correlation_id: str, key: str = "") -> Result:
    """Decode, decide and append `req` (its `Idempotency-Key` is `key`), and answer."""
    if api.store is None:
        raise read_replica()
    command = commands.decode(req)
    idem = Idempotency.of(key, req.identity, req.body)
    before = _deleted(api, command)
    outcome, seq = await decided(api, command, correlation_id, idem)
    code, body = answer(api, command, outcome)
    if before is not None and api.runner.get(outcome.kind, outcome.key) is None:
        body = _json.encode(before)  # the Service as it was, as the API server answers
    return Result(code, body, seq, outcome.warnings)


# built-in kinds whose delete answers the deleted object, not a Status (the API server's
# `ReturnDeletedObject` strategies; the typed clients decode a V1Service)
RETURNS_DELETED = (("", "Service"),)


def _deleted(api: ApiService, command: Command) -> JSON | None:
    spec = command.spec
    if not isinstance(command, Delete) or (spec.group, spec.kind) not in RETURNS_DELETED:
        return None
    return api.runner.get(spec.event_kind, spec.key(command.namespace, command.name))


async def decided(
    api: ApiService, command: Command, correlation_id: str, idem: Idempotency | None = None
) -> tuple[Outcome, int]:
    """The command's outcome, appended unless it is a dry run, and the stream sequence of
    its last event (0: nothing appended)."""
    updatable = api.kinds.updatable

    def decide(cluster: Cluster, ctx: RequestContext) -> Outcome:
        return commands.decide(command, cluster, ctx, updatable)

    if command.dry_run:
        return await api.execute(decide, correlation_id, dry_run=True), 0
    return await api.appended(decide, correlation_id, idem)


def shown(
    api: ApiService, outcome: Outcome, dry_run: bool, served: KindRules | None = None
) -> JSON | None:
    """The object `outcome` names as it is now (folded: read-your-writes), or as it would
    be on a dry run; None when it is gone. In the version `served` serves its kind in
    (the request's), when that is not the storage version the read side renders."""
    if dry_run:
        spec = api.kinds.of(outcome.kind)
        obj = dryrun.preview(api.cluster, spec, outcome, api.runner.clock())
    else:
        obj = api.runner.get(outcome.kind, outcome.key)
    return in_version(api, obj, outcome.kind, served)


def in_version(
    api: ApiService, obj: JSON | None, kind: KindToken, served: KindRules | None
) -> JSON | None:
    """A rendered object of `kind` as `served` (another version of that kind) serves it."""
    if obj is None or served is None or served.event_kind != kind:
        return obj
    if served is api.kinds.of(kind) or served.convert is None:
        return obj
    return served.convert(obj)


async def delete_collection(
    api: ApiService, delete: Delete, objects: list[JSON], spec: KindRules, correlation_id: str
) -> list[JSON]:
    """deletecollection: each of `objects` (what the selectors matched) deleted as its own
    write (the core's delete, its own event, on its own aggregate's version); what each
    delete answered, in order. One gone meanwhile is left out."""
    items: list[JSON] = []
    for obj in objects:
        meta = obj.get("metadata") or {}
        one = dataclasses.replace(
            delete, namespace=meta.get("namespace", ""), name=meta.get("name", "")
        )
        try:
            outcome, _ = await decided(api, one, correlation_id)
        except ApiError as err:
            if err.code == 404:  # gone meanwhile: nothing left to delete
                continue
            raise
        answered = shown(api, outcome, one.dry_run, spec)
        if answered is None:  # deleted at once: the object as it was
            answered = in_version(api, obj, spec.event_kind, spec) or obj
        items.append(answered)
    return items


def answer(api: ApiService, command: Command, outcome: Outcome) -> tuple[int, bytes]:
    """The code and body that answer `command`."""
    if not isinstance(command, Call):
        return _object(api, outcome, command.dry_run, command.spec)
    sub = command.sub
    match sub.answer:
        case Answer.EMPTY:
            return sub.code, b""
        case Answer.OBJECT if sub.shape is not None:
            obj = api.runner.get(outcome.kind, outcome.key)
            if obj is None:
                raise not_found(command.spec.resource, command.name)
            return outcome.code, _json.encode(sub.shape(obj))
        case Answer.OBJECT:
            return _object(api, outcome, command.dry_run, command.spec)
        case Answer.CREATED:
            return sub.code, _json.encode(shown(api, outcome, command.dry_run, command.spec) or {})
        case _:
            assert_never(sub.answer)


def _object(
    api: ApiService, outcome: Outcome, dry_run: bool, served: KindRules
) -> tuple[int, bytes]:
    obj = shown(api, outcome, dry_run, served)
    if obj is None:  # deleted at once (nothing left to tear down)
        res = api.kinds.of(outcome.kind).resource
        name = outcome.key.rsplit("/", 1)[-1]
        return 200, _json.encode(
            {
                "apiVersion": "v1",
                "kind": "Status",
                "metadata": {},
                "status": "Success",
                "details": {"name": name, "group": res.group, "kind": res.plural},
            }
        )
    return outcome.code, _json.encode(obj)
