"""The api's intents over NATS request-reply: a `micro` service (`$SRV.PING|INFO|STATS`
discovery) beside the HTTP api, sharing its admission, deciders and idempotency.

    virt-api.v1.<namespace>.<plural>.<name>.<verb>

`<verb>` is create, get, update, delete or a subresource (start, stop, restart, migrate,
pause, unpause, softreboot); the request body is what the HTTP api takes for that verb and
the reply body is what it answers (the object, a Status, or nothing for a subresource that
answers nothing). The prefix is `virt-api`, not `virt.api`: the event stream captures
`virt.>`, so a request there would be stored in the log as an event and acked by JetStream.

Tokens use the event subjects' encoding (`events.subjects.token`: a dot is `~`, `_` is
empty: the namespace of a cluster-scoped kind, or a create that names by generateName),
and the namespace and name are checked with the API server's name rules before anything
else runs, so no subject can address what a URL could not.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, assert_never

import msgspec
from nats.aio.client import Client as NATS
from nats.micro import add_service
from nats.micro.request import Request
from nats.micro.service import Service

from core import bodies, field_validation, intents, names
from core.errors import (
    ApiError,
    bad_request,
    internal,
    method_not_allowed,
    not_found,
    read_replica,
    too_large,
    unknown_resource,
)
from events.subjects import token, untoken
from kinds.registry import Registry
from kinds.spec import Answer, CallArgs, KindSpec
from projections import replay
from services.api.guard import Guard, check_intent, intent_attributes
from services.api.ids import new_id
from services.api.service import CURRENT_USER, IDEMPOTENCY_HEADER, ApiService, Idempotency

JSON = dict[str, Any]
PREFIX = "virt-api"
VERSION = "v1"
SERVICE_NAME = "virt-api"
QUEUE = "virt-api"  # every api process joins it: one of them answers each request
CRUD = ("create", "get", "update", "delete")

# request headers (the HTTP api's names)
CORRELATION_HEADER = "X-Correlation-Id"
CONTENT_TYPE_HEADER = "Content-Type"
# reply headers
CODE_HEADER = "Virt-Status-Code"  # the HTTP status the same request would get
SEQ_HEADER = "Virt-Stream-Seq"  # the stream sequence of the last event appended (0: none)
WARNING_HEADER = "Warning"
ERROR_HEADER = "Nats-Service-Error"  # the micro protocol's error headers
ERROR_CODE_HEADER = "Nats-Service-Error-Code"
AUTHORIZATION_HEADER = "Authorization"  # optional: `Bearer <token>`, as over HTTP

_json = msgspec.json.Encoder()


@dataclass(frozen=True)
class Target:
    spec: KindSpec
    namespace: str
    name: str
    verb: str


@dataclass(frozen=True)
class Reply:
    code: int
    body: bytes
    seq: int = 0
    warnings: tuple[str, ...] = ()
    error: str = ""  # the Status message when the request was refused

    def headers(self, correlation_id: str) -> dict[str, str]:
        h = {
            CORRELATION_HEADER: correlation_id,
            CODE_HEADER: str(self.code),
            SEQ_HEADER: str(self.seq),
        }
        if self.warnings:
            h[WARNING_HEADER] = field_validation.warning_header(self.warnings)
        if self.error:
            h[ERROR_HEADER] = self.error
            h[ERROR_CODE_HEADER] = str(self.code)
        return h


def subject(namespace: str, plural: str, name: str, verb: str) -> str:
    return f"{PREFIX}.{VERSION}.{token(namespace)}.{plural}.{token(name)}.{verb}"


def all_verbs(kinds: Registry) -> tuple[str, ...]:
    seen: dict[str, None] = dict.fromkeys(CRUD)
    for spec in kinds:
        seen.update(dict.fromkeys(s.name for s in spec.subresources))
    return tuple(seen)


def parse_subject(text: str, kinds: Registry) -> Target:
    """`virt-api.v1.<ns>.<plural>.<name>.<verb>` → what it addresses, or the Status the
    HTTP api answers for a path it does not serve (404), a verb the kind refuses (405) or
    a namespace or name the API server would not store (422). Pure."""
    parts = text.split(".")
    if len(parts) != 6 or parts[0] != PREFIX or parts[1] != VERSION:
        raise unknown_resource()
    _, _, ns_token, plural, name_token, verb = parts
    spec = kinds.get(plural)
    if spec is None or (verb not in CRUD and spec.subresource(verb) is None):
        raise unknown_resource()
    if verb in CRUD and verb not in spec.verbs:
        raise method_not_allowed()
    namespace = untoken(ns_token) if spec.namespaced else ""
    name = untoken(name_token)
    if not spec.namespaced and ns_token != "_":
        raise unknown_resource()  # a cluster-scoped kind has no namespace: `_` stands in its place
    if not (verb == "create" and not name):  # create without a name: generateName
        causes = names.validate_identity(
            namespace, name, namespaced=spec.namespaced, rule=spec.name_rule
        )
        if causes:
            raise ApiError(names.invalid_object(spec.kind, spec.group, name, causes))
    return Target(spec, namespace, name, verb)


def idempotency(headers: Mapping[str, str], text: str, body: JSON) -> Idempotency | None:
    return Idempotency.of(headers.get(IDEMPOTENCY_HEADER, ""), f"NATS {text}", body)


def _with_name(body: JSON, name: str) -> JSON:
    """A create's name comes from the subject; a body naming another object is refused."""
    if not name:
        return body
    meta = body.get("metadata")
    if meta is None:
        meta = {}
    if not isinstance(meta, dict):
        return body  # the intent refuses it with the HTTP api's message
    given = meta.get("name")
    if given and given != name:
        raise bad_request(
            f"the name of the object ({given}) does not match the name on the subject ({name})"
        )
    return {**body, "metadata": {**meta, "name": name}}


def _object(api: ApiService, outcome: intents.Outcome) -> bytes:
    obj = api.runner.get(outcome.kind, outcome.key)
    if obj is None:  # deleted at once (nothing left to tear down)
        res = api.kinds.of(outcome.kind).resource
        return _json.encode(
            {
                "apiVersion": "v1",
                "kind": "Status",
                "metadata": {},
                "status": "Success",
                "details": {
                    "name": outcome.key.rsplit("/", 1)[-1],
                    "group": res.group,
                    "kind": res.plural,
                },
            }
        )
    return _json.encode(obj)


def _get(api: ApiService, t: Target) -> bytes:
    k = t.spec.key(t.namespace, t.name)
    if api.runner.kinds.of(t.spec.event_kind) is t.spec:
        obj = api.runner.get(t.spec.event_kind, k)
    else:  # another view of the same aggregates: rendered from the fold
        view = t.spec.table(api.cluster).get(k)
        obj = (
            None
            if view is None or replay.gone(view)
            else t.spec.render(api.cluster, view, api.runner.clock())
        )
    if obj is None:
        raise not_found(t.spec.resource, t.name)
    return _json.encode(obj)


async def answer(
    api: ApiService,
    text: str,
    data: bytes,
    headers: Mapping[str, str],
    correlation_id: str,
    guard: Guard | None = None,
) -> Reply:
    """One request: the HTTP api's answer to the same intent, as a `Reply`. With a `guard`,
    a request carrying `Authorization: Bearer <token>` is authenticated and authorized as
    over HTTP, and its user is the actor of its events."""
    try:
        t = parse_subject(text, api.kinds)
        if guard is not None:
            a = intent_attributes(t.spec, t.namespace, t.name, t.verb)
            user, refusal = check_intent(guard, headers.get(AUTHORIZATION_HEADER, ""), a)
            if refusal is not None:
                raise refusal
            token = CURRENT_USER.set(user)
            try:
                return await _answer(api, t, text, data, headers, correlation_id)
            finally:
                CURRENT_USER.reset(token)
        return await _answer(api, t, text, data, headers, correlation_id)
    except ApiError as err:
        return _error(err)


async def _answer(
    api: ApiService,
    t: Target,
    text: str,
    data: bytes,
    headers: Mapping[str, str],
    correlation_id: str,
) -> Reply:
    try:
        if t.verb == "get":
            return Reply(200, _get(api, t))
        if api.store is None:
            raise read_replica()
        if len(data) > bodies.MAX_BODY_BYTES:
            raise too_large(bodies.MAX_BODY_BYTES)
        body = bodies.parse(data, headers.get(CONTENT_TYPE_HEADER, ""))
        spec, ns, name = t.spec, t.namespace, t.name
        if t.verb == "create":
            body = _with_name(body, name)
            outcome, seq = await api.appended(
                lambda c, ctx: intents.create(c, spec, ns, body, ctx),
                correlation_id,
                idempotency(headers, text, body),
            )
            return Reply(
                outcome.code,
                _object(api, outcome),
                seq,
                tuple(field_validation.field_warnings(spec, body)),
            )
        if t.verb == "update":
            updatable = api.kinds.updatable
            outcome, seq = await api.appended(
                lambda c, ctx: intents.update(c, spec, ns, name, body, ctx, updatable=updatable),
                correlation_id,
                idempotency(headers, text, body),
            )
            return Reply(
                outcome.code,
                _object(api, outcome),
                seq,
                tuple(field_validation.field_warnings(spec, body)),
            )
        args = CallArgs(body=body, query={})
        if t.verb == "delete":
            delete = spec.delete
            assert delete is not None  # parse_subject refused a kind without it
            outcome, seq = await api.appended(
                lambda c, ctx: delete(c, ns, name, args, ctx),
                correlation_id,
                idempotency(headers, text, body),
            )
            return Reply(200, _object(api, outcome), seq)
        sub = spec.subresource(t.verb)
        assert sub is not None
        if not sub.reads_body:
            args = CallArgs(body={}, query={})
        outcome, seq = await api.appended(
            lambda c, ctx: sub.act(c, ns, name, args, ctx),
            correlation_id,
            idempotency(headers, text, args.body),
        )
        match sub.answer:
            case Answer.EMPTY:
                return Reply(sub.code, b"", seq)
            case Answer.OBJECT:
                return Reply(outcome.code, _object(api, outcome), seq)
            case Answer.CREATED:
                obj = api.runner.get(outcome.kind, outcome.key) or {}
                return Reply(sub.code, _json.encode(obj), seq)
            case _:
                assert_never(sub.answer)
    except ApiError as err:
        return _error(err)
    except Exception as exc:  # an answer, not a silent timeout for the script
        return _error(internal(f"{type(exc).__name__}: {exc}"))


def _error(err: ApiError) -> Reply:
    return Reply(err.code, _json.encode(msgspec.to_builtins(err.status)), error=err.status.message)


@dataclass
class IntentService:
    """The micro service: one endpoint per verb, each on `virt-api.v1.*.*.*.<verb>` in the
    queue group. Requests are answered concurrently (a subscription's callbacks run one
    at a time, and a write waits for its append to be folded)."""

    api: ApiService
    service: Service
    guard: Guard | None = None
    tasks: set[asyncio.Task[None]] = field(default_factory=set)

    async def _handle(self, request: Request) -> None:
        task = asyncio.create_task(self._respond(request))
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def _respond(self, request: Request) -> None:
        headers = request.headers or {}
        cid = headers.get(CORRELATION_HEADER) or new_id()
        reply = await answer(self.api, request.subject, request.data, headers, cid, self.guard)
        with contextlib.suppress(ValueError):  # no reply subject: nobody to answer
            await request.respond(reply.body, headers=reply.headers(cid))

    async def stop(self) -> None:
        await self.service.stop()
        if self.tasks:
            await asyncio.wait(set(self.tasks), timeout=5)


async def serve_intents(nc: NATS, api: ApiService, guard: Guard | None = None) -> IntentService:
    """Start the endpoints on `nc` (the api's own connection); `stop()` them on shutdown."""
    service = await add_service(
        nc,
        name=SERVICE_NAME,
        version="1.0.0",
        description="virtstream intents: KubeVirt's verbs over NATS request-reply",
        queue_group=QUEUE,
    )
    running = IntentService(api, service, guard)
    group = service.add_group(name=f"{PREFIX}.{VERSION}")
    for verb in all_verbs(api.kinds):
        await group.add_endpoint(
            name=verb,
            subject=f"*.*.*.{verb}",
            handler=running._handle,
            metadata={"subject": f"{PREFIX}.{VERSION}.<namespace>.<plural>.<name>.{verb}"},
        )
    return running
