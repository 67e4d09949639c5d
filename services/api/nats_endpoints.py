"""The api's intents over NATS request-reply: a `micro` service (`$SRV.PING|INFO|STATS`
discovery) beside the HTTP api. A write is decoded into the core's `Request` and performed
as the HTTP api performs its own (`services/api/writes.py`), so both append the same events
and answer the same Status.

    virt-api.v1.<namespace>.<plural>.<name>.<verb>

`<verb>` is create, get, update, patch, delete, deletecollection (name `_`, the selectors
as `labelSelector`/`fieldSelector` headers) or a subresource (start, stop, restart,
migrate, pause, unpause, softreboot, scale, ...); the request body is what the HTTP api
takes for that verb (a patch's media type is its `Content-Type`, a server-side apply's
`application/apply-patch+yaml`), Kubernetes' write options (`dryRun`, `fieldManager`,
`fieldValidation`, `force`, `gracePeriodSeconds`, `propagationPolicy`) are headers of
those names, and the reply body is what the HTTP api answers (the object, a Status, or
nothing for a subresource that answers nothing). The prefix is `virt-api`, not `virt.api`:
the event stream captures `virt.>`, so a request there would be stored in the log as an
event and acked by JetStream.

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
from typing import Any

import msgspec
from nats.aio.client import Client as NATS
from nats.micro import add_service
from nats.micro.request import Request
from nats.micro.service import Service

from core import commands, field_validation, names
from core.commands import Verb
from core.errors import (
    ApiError,
    bad_request,
    internal,
    method_not_allowed,
    not_found,
    read_replica,
    unknown_resource,
)
from core.idempotency import HEADER as IDEMPOTENCY_HEADER
from events.subjects import token, untoken
from kinds.registry import Registry
from kinds.spec import KindSpec
from readside.watch import Selector, SelectorError
from services.api import reads, writes
from services.api.guard import Guard, check_intent, intent_attributes
from services.api.ids import new_id
from services.api.service import CURRENT_USER, ApiService

JSON = dict[str, Any]
PREFIX = "virt-api"
VERSION = "v1"
SERVICE_NAME = "virt-api"
QUEUE = "virt-api"  # every api process joins it: one of them answers each request
# the verbs besides the kinds' subresources, and the verb of the kind's each needs
CRUD = {
    "create": "create",
    "get": "get",
    "update": "update",
    "patch": "update",
    "delete": "delete",
    "deletecollection": "delete",
}
SELECTOR_HEADERS = ("labelSelector", "fieldSelector")  # deletecollection's, as query params
VERBS = {"create": Verb.CREATE, "update": Verb.UPDATE, "patch": Verb.PATCH, "delete": Verb.DELETE}

# request headers (the HTTP api's names)
CORRELATION_HEADER = "X-Correlation-Id"
CONTENT_TYPE_HEADER = "Content-Type"
USER_AGENT_HEADER = "User-Agent"  # names the field manager when `fieldManager` does not
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
    if verb in CRUD and CRUD[verb] not in spec.verbs:
        raise method_not_allowed()
    namespace = untoken(ns_token) if spec.namespaced else ""
    name = untoken(name_token)
    if not spec.namespaced and ns_token != "_":
        raise unknown_resource()  # a cluster-scoped kind has no namespace: `_` stands in its place
    if verb == "deletecollection":  # a collection: no name (`_`), the namespace's rules
        if name:
            raise unknown_resource()
        if spec.namespaced and (causes := names.validate_namespace(namespace)):
            raise ApiError(names.invalid_object(spec.kind, spec.group, name, causes))
    elif not (verb == "create" and not name):  # create without a name: generateName
        causes = names.validate_identity(
            namespace, name, namespaced=spec.namespaced, rule=spec.name_rule
        )
        if causes:
            raise ApiError(names.invalid_object(spec.kind, spec.group, name, causes))
    return Target(spec, namespace, name, verb)


def _get(api: ApiService, t: Target) -> bytes:
    obj = reads.current(api, t.spec, t.spec.key(t.namespace, t.name))
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
                return await _answer(api, t, data, headers, correlation_id)
            finally:
                CURRENT_USER.reset(token)
        return await _answer(api, t, data, headers, correlation_id)
    except ApiError as err:
        return _error(err)


async def _answer(
    api: ApiService,
    t: Target,
    data: bytes,
    headers: Mapping[str, str],
    correlation_id: str,
) -> Reply:
    try:
        if t.verb == "get":
            return Reply(200, _get(api, t))
        if t.verb == "deletecollection":
            return await _delete_collection(api, t, data, headers, correlation_id)
        req = commands.Request(
            verb=VERBS.get(t.verb, Verb.CALL),
            spec=t.spec,
            namespace=t.namespace,
            name=t.name,
            body=data,
            content_type=headers.get(CONTENT_TYPE_HEADER, ""),
            params=commands.params(headers),
            agent=headers.get(USER_AGENT_HEADER, ""),
            action="" if t.verb in VERBS else t.verb,
        )
        result = await writes.perform(api, req, correlation_id, headers.get(IDEMPOTENCY_HEADER, ""))
        return Reply(result.code, result.body, result.seq, result.warnings)
    except ApiError as err:
        return _error(err)
    except Exception as exc:  # an answer, not a silent timeout for the script
        return _error(internal(f"{type(exc).__name__}: {exc}"))


async def _delete_collection(
    api: ApiService, t: Target, data: bytes, headers: Mapping[str, str], correlation_id: str
) -> Reply:
    """Every object the selectors (headers named as the HTTP api's query parameters) match,
    each deleted as its own write (`writes.delete_collection`); the list of what each
    delete answered, as the HTTP api's deletecollection answers."""
    if api.store is None:
        raise read_replica()
    req = commands.Request(
        verb=Verb.DELETE,
        spec=t.spec,
        namespace=t.namespace,
        name="",
        body=data,
        content_type=headers.get(CONTENT_TYPE_HEADER, ""),
        params=commands.params(headers),
        agent=headers.get(USER_AGENT_HEADER, ""),
    )
    delete = commands.decode(req)
    assert isinstance(delete, commands.Delete)
    label, fields = (headers.get(h) for h in SELECTOR_HEADERS)
    try:
        selector = Selector.parse(t.spec.event_kind, t.namespace, label, fields)
    except SelectorError as exc:
        raise bad_request(str(exc)) from None
    matched = api.runner.list(selector)
    items = await writes.delete_collection(api, delete, matched, t.spec, correlation_id)
    meta = {"resourceVersion": str(api.runner.last_seq)}
    body = {"apiVersion": t.spec.api_version, "kind": t.spec.list_kind, "metadata": meta}
    return Reply(200, _json.encode({**body, "items": items}))


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
