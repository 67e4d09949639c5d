"""The HTTP api: KubeVirt's REST dialect on Litestar.

Reads (get, list, watch) come from the projection; a write is decoded into the core's
`Request` and performed as the NATS endpoints perform theirs (`services/api/writes.py`:
the core's command, decided and appended by `ApiService`). A read replica (`virtstream
projections`) is the same app without a store: writes answer 405."""

from __future__ import annotations

import asyncio
import functools
import ssl
import time
from pathlib import Path
from typing import Any, Literal

import msgspec
from litestar import Litestar, Request, Response, asgi, get, route
from litestar.datastructures import State
from litestar.enums import HttpMethod
from litestar.exceptions import HTTPException
from litestar.handlers import HTTPRouteHandler
from litestar.openapi import OpenAPIConfig
from litestar.response import Stream
from litestar.types import ASGIApp, Message, Receive, Scope, Send
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from core import bodies, commands, field_validation, patch, status_writes
from core.commands import Verb
from core.errors import (
    ApiError,
    bad_request,
    method_not_allowed,
    not_found,
    read_replica,
    request_timeout,
    timeout,
    too_large,
    unknown_resource,
)
from core.idempotency import HEADER as IDEMPOTENCY_HEADER
from events.meta import CLUSTER_SCOPE, Aggregate, Kind, KindToken
from kinds.registry import Registry
from kinds.spec import KindSpec
from projections import replay
from projections.cluster import Cluster
from projections.render import rfc3339
from readside import timetravel
from readside.watch import Selector, SelectorError, TooOldResourceVersion
from services.api import (
    discovery,
    export_server,
    openapi_k8s,
    pagination,
    pod_logs,
    protowire,
    reads,
    reviews,
    streams,
    table,
    virt_api_info,
    watch_stream,
    writes,
)
from services.api import openapi as openapi_doc
from services.api.guard import Guard, ssar_route
from services.api.guard import middleware as guard_middleware
from services.api.ids import new_id
from services.api.metrics import REQUEST_SECONDS, REQUESTS
from services.api.service import ApiService
from services.api.web import WEB_ROUTES

JSON = dict[str, Any]
CORRELATION_HEADER = "x-correlation-id"
BODY_SECONDS = 10.0
_json = msgspec.json.Encoder()


# ---------------------------------------------------------------- plumbing
def _api(request: Request[Any, Any, Any]) -> ApiService:
    return request.app.state["api"]


def _correlation_id(request: Request[Any, Any, Any]) -> str:
    return str(request.scope.get("state", {}).get("correlation_id") or new_id())


def _respond(body: Any, code: int = 200) -> Response[bytes]:
    return Response(_json.encode(body), status_code=code, media_type="application/json")


def _status_response(err: ApiError) -> Response[bytes]:
    return _respond(msgspec.to_builtins(err.status), err.code)


def _api_error_handler(_: Request[Any, Any, Any], exc: ApiError) -> Response[bytes]:
    return _status_response(exc)


def _http_error_handler(_: Request[Any, Any, Any], exc: HTTPException) -> Response[bytes]:
    code = exc.status_code
    if code == 404:
        err = unknown_resource()
    elif code == 405:
        err = method_not_allowed()
    elif code == 413:
        err = too_large(bodies.MAX_BODY_BYTES)
    else:
        err = bad_request(str(exc.detail))
        err.status.code = code
    return _status_response(err)


async def _raw_body(request: Request[Any, Any, Any]) -> bytes:
    try:  # a client that stops sending mid-body must not hold the request forever
        async with asyncio.timeout(BODY_SECONDS):
            return await request.body()
    except TimeoutError:
        raise request_timeout(
            f"the request body was not received within {BODY_SECONDS:g}s"
        ) from None


def _writable(api: ApiService) -> None:
    if api.store is None:  # refused before the body is read
        raise read_replica()


async def _write(
    request: Request[Any, Any, Any],
    verb: Verb,
    spec: KindSpec,
    ns: str,
    name: str = "",
    *,
    action: str = "",
) -> Response[bytes]:
    """A write: the request as the core's `Request`, performed as every transport's is
    (`services/api/writes.py`), its `Result` as the response."""
    api = _api(request)
    _writable(api)
    body = await _raw_body(request)
    result = await writes.perform(
        api,
        _command_request(request, verb, spec, ns, name, action, body),
        _correlation_id(request),
        request.headers.get(IDEMPOTENCY_HEADER, ""),
    )
    response = Response(result.body, status_code=result.code, media_type="application/json")
    if result.warnings:
        response.headers["Warning"] = field_validation.warning_header(result.warnings)
    return response


# the built-in kinds whose protobuf bodies are read (kubectl sends no JSON for them)
PROTOBUF_KINDS = {
    "Namespace": protowire.namespace,
    "Secret": protowire.secret,
    "ConfigMap": protowire.configmap,
}


def _command_request(
    request: Request[Any, Any, Any],
    verb: Verb,
    spec: KindSpec,
    ns: str,
    name: str,
    action: str,
    body: bytes,
) -> commands.Request:
    content_type = request.headers.get("content-type", "")
    decoder = PROTOBUF_KINDS.get(spec.kind) if not spec.group else None
    if decoder is not None and bodies.media_type(content_type) == protowire.PROTOBUF:
        # a built-in kind kubectl writes in protobuf (`kubectl create namespace|secret|configmap`)
        try:
            body = msgspec.json.encode(decoder(body))
        except (protowire.ProtoError, UnicodeDecodeError):
            raise bad_request("the body of the request was in an unknown format") from None
        content_type = "application/json"
    return commands.Request(
        verb=verb,
        spec=spec,
        namespace=ns,
        name=name,
        body=body,
        content_type=content_type,
        params=commands.params(request.query_params),
        agent=request.headers.get("user-agent", ""),
        action=action,
        method=request.method,
    )


# ------------------------------------------------------------- read side
def _selector(
    request: Request[Any, Any, Any], kind: KindToken, namespace: str, fields: tuple[str, ...] = ()
) -> Selector:
    q = request.query_params
    try:
        return Selector.parse(
            kind, namespace, q.get("labelSelector"), q.get("fieldSelector"), fields
        )
    except SelectorError as exc:
        raise bad_request(str(exc)) from None


def _is_watch(request: Request[Any, Any, Any]) -> bool:
    return request.query_params.get("watch", "").lower() in ("true", "1")


async def _list_or_watch(
    request: Request[Any, Any, Any], spec: KindSpec, namespace: str
) -> Response[Any]:
    api = _api(request)
    kind = spec.event_kind
    selector = _selector(request, kind, namespace, spec.field_labels)
    if (past := await _at(request, api)) is not None:
        cluster, now, seq = past
        items = [
            obj
            for k in sorted(spec.table(cluster))
            if (obj := reads.render_at(spec, cluster, k, now)) is not None
            and selector.matches(kind, obj)
        ]
        meta = {"resourceVersion": str(seq)}
        listed = {"apiVersion": spec.api_version, "kind": spec.list_kind, "metadata": meta}
        return _at_time(_respond({**listed, "items": items}), now)
    if _is_watch(request):
        if "watch" not in spec.verbs or not (reads.renders_own(api, spec) or spec.convert):
            raise method_not_allowed()
        return _watch(request, api, spec, selector)
    await _not_older_than(request, api)
    q = request.query_params
    wants_table = table.wants_table(request.headers.get("accept", ""))
    whole = not pagination.limit_of(q) and not q.get("continue")
    if reads.renders_own(api, spec) and not wants_table and whole:
        # the whole list, encoded once per projection version (readside/runner.py)
        rv = str(api.runner.last_seq)

        def encode(items: list[JSON]) -> bytes:
            meta = {"resourceVersion": rv}
            return _json.encode(
                {"apiVersion": spec.api_version, "kind": spec.list_kind, "metadata": meta}
                | {"items": items}
            )

        encoded = api.runner.list_body(selector, encode)
        return Response(encoded, status_code=200, media_type="application/json")
    if reads.renders_own(api, spec):
        items = api.runner.list(selector)
    else:
        now = api.runner.clock()
        items = [
            obj
            for k in sorted(spec.table(api.cluster))
            if (obj := reads.render_at(spec, api.cluster, k, now)) is not None
            and selector.matches(kind, obj)
        ]
    current = api.runner.last_seq
    token = pagination.start(q, current, api.runner.history_floor)
    keyed = [(_key_of(spec, obj), obj) for obj in items]
    page = pagination.page(keyed, pagination.limit_of(q), token, current)
    meta = pagination.list_metadata(page)
    if wants_table:
        doc = table.table(
            table.columns(spec), page.items, meta["resourceVersion"], api.runner.clock()
        )
        doc["metadata"] = meta
        return _respond(doc)
    body = {
        "apiVersion": spec.api_version,
        "kind": spec.list_kind,
        "metadata": meta,
        "items": page.items,
    }
    return _respond(body)


def _key_of(spec: KindSpec, obj: JSON) -> str:
    meta = obj.get("metadata") or {}
    return spec.key(meta.get("namespace", ""), meta.get("name", ""))


def _watch(
    request: Request[Any, Any, Any], api: ApiService, spec: KindSpec, selector: Selector
) -> Response[Any]:
    opts = watch_stream.WatchOptions.parse(request.query_params, request.headers.get("accept", ""))
    try:
        convert = None if reads.renders_own(api, spec) else spec.convert
        watcher = api.runner.watch(selector, opts.resource_version, convert)
    except TooOldResourceVersion as exc:
        return Stream(watch_stream.expired(str(exc)), media_type="application/json")
    if opts.send_initial_events:  # queued before any later change: nothing is folded between
        end = watch_stream.bookmark(spec, api.runner.last_seq, initial_end=True)
        watcher.queue.put_nowait(end)
    lines = watch_stream.stream(
        spec, watcher, opts, lambda: api.runner.last_seq, api.runner.unwatch
    )
    return Stream(lines, media_type="application/json")


async def _get_one(request: Request[Any, Any, Any], spec: KindSpec, k: str) -> Response[Any]:
    api = _api(request)
    if (past := await _at(request, api, spec, k)) is not None:
        cluster, now, _ = past
        if (obj := reads.render_at(spec, cluster, k, now)) is None:
            raise _not_found_then(api, spec, k, now)
        if table.wants_table(request.headers.get("accept", "")):  # ages as they were then
            return _at_time(_respond(table.table(table.columns(spec), [obj], now=now)), now)
        return _at_time(_respond(obj), now)
    await _not_older_than(request, api)
    obj = reads.current(api, spec, k)
    if obj is None:
        raise not_found(spec.resource, k.rsplit("/", 1)[-1])
    if table.wants_table(request.headers.get("accept", "")):
        return _respond(table.table(table.columns(spec), [obj], now=api.runner.clock()))
    return _respond(obj)


def _at_time(response: Response[bytes], when: float) -> Response[bytes]:
    """A time-travel answer says the time it shows (a sequence's is its event's), so that
    a client shows ages as they were then."""
    response.headers[AT_TIME_HEADER] = f"{when:.3f}"
    return response


def _not_found_then(api: ApiService, spec: KindSpec, k: str, when: float) -> ApiError:
    """NotFound at a point in the past; one that exists now did not exist then: it says
    when it was made."""
    status = not_found(spec.resource, k.rsplit("/", 1)[-1]).status
    now = reads.current(api, spec, k)
    created = ((now or {}).get("metadata") or {}).get("creationTimestamp")
    then = rfc3339(when)
    said = f"{status.message} at {then}"
    if created:
        said += f": it did not exist then, it was created at {created}"
    return ApiError(msgspec.structs.replace(status, message=said))


SEQUENCE_HEADER = "virtstream-sequence"
AT_TIME_HEADER = "virtstream-at-time"
MIN_SEQUENCE_HEADER = "virtstream-min-sequence"
#: how long a read waits for this api's view to reach the sequence it asks for
NOT_OLDER_THAN_SECONDS = 5.0


async def _not_older_than(request: Request[Any, Any, Any], api: ApiService) -> None:
    """Read-your-writes across api replicas: a read carrying a sequence is answered from a
    view that has folded at least that far (waiting for it), never from an older one. The
    sequence comes as Kubernetes' `resourceVersion` of a get or list ("not older than";
    0 or none: any) or as the `Virtstream-Min-Sequence` header, which the virtstream client
    sends with the last sequence its writes returned. Never caught up in time: 504, as
    Kubernetes answers "Too large resource version"."""
    wanted = 0
    for text in (
        request.query_params.get("resourceVersion") or "",
        request.headers.get(MIN_SEQUENCE_HEADER) or "",
    ):
        if text:
            try:
                wanted = max(wanted, int(text))
            except ValueError:
                raise bad_request(f"invalid resourceVersion: {text!r}") from None
    if wanted > api.runner.last_seq and not await api.runner.wait_for(
        wanted, NOT_OLDER_THAN_SECONDS
    ):
        raise timeout(f"Too large resource version: {wanted}, current: {api.runner.last_seq}")


# kinds whose one object renders from its related aggregates alone (projections/replay.py)
ONE_OBJECT_AT = (Kind.VM, Kind.VMI, Kind.MIGRATION, Kind.POLICY)


async def _at(
    request: Request[Any, Any, Any], api: ApiService, spec: KindSpec | None = None, k: str = ""
) -> tuple[Cluster, float, int] | None:
    """`?at=SEQ|TIME` (time travel): the cluster as folded up to that point, from the log.

    Rebuilt per request from the stream; for one object of a kind whose rendering depends
    on a few aggregates (`spec` and `k`: VMs, VMIs, migrations, policies) only from those
    aggregates' events (`timetravel.object_at`), so its cost does not grow with the log.
    Time-dependent status (CrashLoopBackOff, heartbeat age) is evaluated at the point's
    time when it has one."""
    text = request.query_params.get("at")
    if not text:
        return None
    if _is_watch(request):
        raise bad_request("at cannot be combined with watch")
    try:
        point = replay.parse_point(text, time.time())
    except ValueError as exc:
        raise bad_request(f"invalid at: {exc}") from None
    seq = await timetravel.resolve(api.runner.store, point)
    when = point.time if point.time is not None else await timetravel.time_of(api.runner.store, seq)
    if spec is not None and spec.event_kind in ONE_OBJECT_AT and reads.renders_own(api, spec):
        ns, _, name = k.rpartition("/")
        agg = Aggregate(kind=spec.event_kind, namespace=ns or CLUSTER_SCOPE, name=name)
        cluster = await timetravel.object_at(api.runner.store, agg, seq)
    else:
        cluster = await timetravel.cluster_at(api.runner.store, seq=seq)
    return cluster, when if when is not None else time.time(), seq


# ------------------------------------------------------------- kind routes
def _warned(spec: KindSpec, handler: Any) -> Any:
    """A deprecated version's requests are answered with its deprecation warning, as the
    API server answers a CRD's deprecated version."""
    warning = spec.deprecation_warning
    if warning is None:
        return handler

    @functools.wraps(handler)  # its name: Litestar's operation ids derive from it
    async def deprecated(request: Request[Any, Any, Any]) -> Response[Any]:
        try:  # a refusal is warned of too: the warning comes before the request is served
            response: Response[Any] = await handler(request)
        except ApiError as err:
            response = _status_response(err)
        shown = field_validation.warning_header([warning])
        given = response.headers.get("Warning")
        response.headers["Warning"] = f"{shown}, {given}" if given else shown
        return response

    return deprecated


def _collection(spec: KindSpec) -> Any:
    async def collection(request: Request[Any, Any, Any]) -> Response[Any]:
        ns = request.path_params.get("ns", "")
        if request.method == "GET":
            return await _list_or_watch(request, spec, ns)
        if request.method == "DELETE":
            return await _delete_collection(request, spec, ns)
        return await _write(request, Verb.CREATE, spec, ns)

    return collection


async def _delete_collection(
    request: Request[Any, Any, Any], spec: KindSpec, ns: str
) -> Response[bytes]:
    """deletecollection: every object the selectors match, each deleted as its own write
    (`writes.delete_collection`), answered with the list of what each delete answered."""
    api = _api(request)
    _writable(api)
    raw = await _raw_body(request)
    delete = commands.decode(_command_request(request, Verb.DELETE, spec, ns, "", "", raw))
    kind = spec.event_kind
    selector = _selector(request, kind, ns)
    assert isinstance(delete, commands.Delete)
    matched = api.runner.list(selector)
    items = await writes.delete_collection(api, delete, matched, spec, _correlation_id(request))
    meta = {"resourceVersion": str(api.runner.last_seq)}
    return _respond(
        {"apiVersion": spec.api_version, "kind": spec.list_kind, "metadata": meta, "items": items}
    )


def _all_namespaces(spec: KindSpec) -> Any:
    async def all_namespaces(request: Request[Any, Any, Any]) -> Response[Any]:
        return await _list_or_watch(request, spec, "")

    return all_namespaces


ITEM_VERBS = {"PUT": Verb.UPDATE, "PATCH": Verb.PATCH, "DELETE": Verb.DELETE}


def _item(spec: KindSpec) -> Any:
    async def item(request: Request[Any, Any, Any]) -> Response[Any]:
        ns, name = request.path_params.get("ns", ""), request.path_params["name"]
        if request.method == "GET":
            return await _get_one(request, spec, spec.key(ns, name))
        return await _write(request, ITEM_VERBS[request.method], spec, ns, name)

    return item


def _status(spec: KindSpec) -> Any:
    """`.../NAME/status`: GET answers the object; a PUT or PATCH is checked against the
    status as served (`core/status_writes.py`): one that changes nothing answers the
    object, one that changes it is refused, nothing is appended either way."""

    async def status(request: Request[Any, Any, Any]) -> Response[Any]:
        ns, name = request.path_params.get("ns", ""), request.path_params["name"]
        k = spec.key(ns, name)
        if request.method == "GET":
            return await _get_one(request, spec, k)
        api = _api(request)
        _writable(api)
        body = await _raw_body(request)
        current = reads.render_at(spec, api.cluster, k, api.runner.clock())
        if current is None:
            raise not_found(spec.resource, name)
        content_type = request.headers.get("content-type", "")
        if request.method == "PATCH":
            written = patch.apply(current, body, content_type, strategic=not spec.group)
        else:
            written = bodies.parse(body, content_type)
        status_writes.check(spec, name, current, written)
        return _respond(current)

    return status


def _subresource(spec: KindSpec) -> Any:
    async def subresource(request: Request[Any, Any, Any]) -> Response[Any]:
        ns, name = request.path_params.get("ns", ""), request.path_params["name"]
        action = request.path_params["action"]
        return await _write(request, Verb.CALL, spec, ns, name, action=action)

    return subresource


# The VMI's stream subresources (KubeVirt's console, vnc and vnc/screenshot): relayed to
# the node's console server (`services/api/streams.py`), never appended to the log.
VMI_SUBRESOURCES = "/apis/subresources.kubevirt.io/v1/namespaces/{ns:str}/virtualmachineinstances"


def _stream(channel: streams.Channel | Literal["portforward"]) -> Any:
    async def stream(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "websocket":  # KubeVirt's answer to a request without an upgrade
            body = _json.encode(msgspec.to_builtins(bad_request("websocket expected").status))
            await send({"type": "http.response.start", "status": 400,
                        "headers": [(b"content-type", b"application/json")]})  # fmt: skip
            await send({"type": "http.response.body", "body": body})
            return
        params = scope["path_params"]
        api: ApiService = scope["app"].state["api"]
        tls = scope["app"].state.get("console_tls")
        ns, name = params["ns"], params["name"]

        def resolve() -> streams.Target:
            if channel == "portforward":  # one TCP connection to PORT of the guest
                port, protocol = params["port"], params.get("protocol", "tcp")
                return streams.forward_target(api.cluster, ns, name, port, protocol, bool(tls))
            return streams.target(api.cluster, ns, name, channel, bool(tls))

        await streams.relay(
            scope,
            receive,
            send,
            resolve,
            tls,
            follow=channel == "console",  # a VNC session's RFB state cannot move along
        )

    return stream


@get(f"{VMI_SUBRESOURCES}/{{name:str}}/vnc/screenshot", include_in_schema=False)
async def vnc_screenshot(request: Request[Any, Any, Any]) -> Response[bytes]:
    ns, name = request.path_params["ns"], request.path_params["name"]
    tls = request.app.state.get("console_tls")
    where = streams.target(_api(request).cluster, ns, name, "screenshot", bool(tls))
    png = await streams.get(where, tls)
    return Response(png, media_type="image/png")


def _agent_route(channel: str) -> Any:
    @get(
        f"{VMI_SUBRESOURCES}/{{name:str}}/{channel}", include_in_schema=False, name=f"vmi-{channel}"
    )
    async def guest_agent(request: Request[Any, Any, Any]) -> Response[bytes]:
        ns, name = request.path_params["ns"], request.path_params["name"]
        tls = request.app.state.get("console_tls")
        where = streams.agent_target(_api(request).cluster, ns, name, channel, bool(tls))
        return Response(await streams.get(where, tls), media_type="application/json")

    return guest_agent


STREAM_ROUTES = [
    asgi(
        f"{VMI_SUBRESOURCES}/{{name:str}}/console",
        is_mount=False,
        copy_scope=False,
        name="vmi-console",
    )(_stream("console")),
    asgi(f"{VMI_SUBRESOURCES}/{{name:str}}/vnc", is_mount=False, copy_scope=False, name="vmi-vnc")(
        _stream("vnc")
    ),
    *(
        asgi(
            f"{VMI_SUBRESOURCES}/{{name:str}}/portforward/{path}",
            is_mount=False,
            copy_scope=False,
            name=f"vmi-portforward-{i}",
        )(_stream("portforward"))
        for i, path in enumerate(("{port:int}", "{port:int}/{protocol:str}"))
    ),
    vnc_screenshot,
    *(_agent_route(channel) for channel in streams.AGENT_CHANNELS),
]


GET, POST, PUT, DELETE = HttpMethod.GET, HttpMethod.POST, HttpMethod.PUT, HttpMethod.DELETE
PATCH = HttpMethod.PATCH


def _methods(spec: KindSpec, verbs: dict[HttpMethod, str]) -> list[HttpMethod]:
    return [method for method, verb in verbs.items() if verb in spec.verbs]


def kind_routes(spec: KindSpec) -> list[HTTPRouteHandler]:
    """The REST routes of one kind, from its registry entry: the collection (list, watch,
    create), across namespaces when namespaced, the item (get, update, delete) and one
    route for its subresources. The app's own OpenAPI document (`/openapi.json`) has the
    storage version's; Kubernetes' (`/openapi/v2`, `/openapi/v3`) has every version."""
    coll = spec.collection_path("{ns:str}") if spec.namespaced else spec.collection_path()
    coll_methods = _methods(spec, {GET: "list", POST: "create", DELETE: "delete"})
    item_methods = _methods(spec, {GET: "get", PUT: "update", PATCH: "update", DELETE: "delete"})
    shown = spec.version == spec.storage_version
    routes = [
        route(coll, http_method=coll_methods, status_code=200, include_in_schema=shown)(
            _warned(spec, _collection(spec))
        ),
        route(
            f"{coll}/{{name:str}}", http_method=item_methods, status_code=200,
            include_in_schema=shown,
        )(_warned(spec, _item(spec))),
    ]  # fmt: skip
    if spec.has_status:
        routes.append(
            route(
                f"{coll}/{{name:str}}/status", http_method=[GET, PUT, PATCH],
                status_code=200, include_in_schema=False,
            )(_warned(spec, _status(spec)))
        )  # fmt: skip
    if spec.namespaced:
        routes.append(
            get(spec.collection_path(), include_in_schema=shown)(
                _warned(spec, _all_namespaces(spec))
            )
        )
    if spec.subresources:
        path = spec.subresource_path("{name:str}", "{action:str}", "{ns:str}")
        methods = [HttpMethod(m) for m in sorted({s.method for s in spec.subresources})]
        code = spec.subresources[0].code
        routes.append(
            route(path, http_method=methods, status_code=code, include_in_schema=shown)(
                _warned(spec, _subresource(spec))
            )
        )
    return routes


# ----------------------------------------------------------------- ops
@get("/healthz", include_in_schema=False)
async def healthz() -> Response[bytes]:
    return Response(b"ok", media_type="text/plain")


@get("/readyz", include_in_schema=False)
async def readyz(request: Request[Any, Any, Any]) -> Response[bytes]:
    ok = await _api(request).ready()
    return Response(
        b"ok" if ok else b"not ready", status_code=200 if ok else 503, media_type="text/plain"
    )


@get("/metrics", include_in_schema=False)
async def metrics() -> Response[bytes]:
    return Response(generate_latest(), media_type=CONTENT_TYPE_LATEST)


@get("/openapi.json", include_in_schema=False)
async def openapi(request: Request[Any, Any, Any]) -> Response[bytes]:
    state = request.app.state
    if "openapi" not in state:  # built once: the routes do not change
        state["openapi"] = _json.encode(
            openapi_doc.describe(request.app.openapi_schema.to_schema(), _api(request).kinds)
        )
    return Response(state["openapi"], media_type="application/json")


# ------------------------------------------------------------- discovery
@get("/version", include_in_schema=False)
async def version() -> Response[bytes]:
    return _respond(discovery.VERSION)


def _discovery(request: Request[Any, Any, Any], core: bool, legacy: JSON) -> Response[bytes]:
    if discovery.wants_aggregated(request.headers.get("accept", "")):
        body = discovery.aggregated(_api(request).kinds, core)
        return Response(_json.encode(body), media_type=discovery.AGGREGATED)
    return _respond(legacy)


@get("/api", include_in_schema=False)
async def core_versions(request: Request[Any, Any, Any]) -> Response[bytes]:
    return _discovery(request, True, discovery.api_versions())


@get("/apis", include_in_schema=False)
async def groups(request: Request[Any, Any, Any]) -> Response[bytes]:
    return _discovery(request, False, discovery.api_groups(_api(request).kinds))


def _static(path: str, body: JSON) -> HTTPRouteHandler:
    handler = _bytes_handler(_json.encode(body))
    return get(path, include_in_schema=False, name=f"static:{path}")(handler)


class OpenApiDocuments:
    """The OpenAPI documents of the kinds, built on their first request (the kinds do not
    change): their JSON schemas take a tenth of the api's start to build, and most
    clients never ask."""

    def __init__(self, kinds: Registry) -> None:
        self.kinds = kinds
        self.paths = [openapi_k8s.v3_path(g, v) for g, v in openapi_k8s.group_versions(kinds)]

    @functools.cached_property
    def v3(self) -> dict[str, bytes]:
        return {
            openapi_k8s.v3_path(g, v): _json.encode(openapi_k8s.v3_document(self.kinds, g, v))
            for g, v in openapi_k8s.group_versions(self.kinds)
        }

    @functools.cached_property
    def v3_index(self) -> bytes:
        return _json.encode(openapi_k8s.v3_index(self.v3))

    @functools.cached_property
    def v2(self) -> bytes:
        return _json.encode(openapi_k8s.v2_document(self.kinds))

    @functools.cached_property
    def v2_proto(self) -> bytes:
        return protowire.openapi_v2("Kubernetes", discovery.VERSION["gitVersion"])


def openapi_routes(kinds: Registry) -> list[HTTPRouteHandler]:
    """`/openapi/v3` and its per group/version documents, `/openapi/v2` (JSON; kubectl's
    protobuf request gets a document without definitions, `protowire.openapi_v2`)."""
    docs = OpenApiDocuments(kinds)

    def v3_handler(path: str) -> Any:
        async def document() -> Response[bytes]:
            return Response(docs.v3[path], media_type="application/json")

        return document

    async def v3_index() -> Response[bytes]:
        return Response(docs.v3_index, media_type="application/json")

    out = [
        get(f"/openapi/v3/{path}", include_in_schema=False, name=f"openapi:{path}")(
            v3_handler(path)
        )
        for path in docs.paths
    ]
    out.append(get("/openapi/v3", include_in_schema=False, name="static:/openapi/v3")(v3_index))

    async def openapi_v2(request: Request[Any, Any, Any]) -> Response[bytes]:
        accept = request.headers.get("accept", "")
        if protowire.OPENAPI_V2 in accept and "json" not in accept:
            # served as octet-stream, as kube-openapi does: Go's mime parser refuses the
            # `@` of the requested type
            return Response(docs.v2_proto, media_type="application/octet-stream")
        if accept and "json" not in accept and "*/*" not in accept:
            err = bad_request("only application/json is served")
            err.status.code, err.status.reason = 406, "NotAcceptable"
            raise err
        return Response(docs.v2, media_type="application/json")

    out.append(get("/openapi/v2", include_in_schema=False)(openapi_v2))
    return out


def _bytes_handler(body: bytes) -> Any:
    async def document() -> Response[bytes]:
        return Response(body, media_type="application/json")

    return document


def discovery_routes(kinds: Registry) -> list[HTTPRouteHandler]:
    """One static route per group and group/version: the kinds' own routes share these
    prefixes, so a path parameter here would never be reached."""
    out = []
    for group, versions in discovery.group_versions(kinds).items():
        if group:
            out.append(_static(f"/apis/{group}", discovery.api_group(kinds, group) or {}))
        for v in versions:
            path = f"/apis/{group}/{v}" if group else f"/api/{v}"
            out.append(_static(path, discovery.resource_list(kinds, group, v) or {}))
    return out


DISCOVERY = [version, core_versions, groups]


# ------------------------------------------------------------ middleware
def observe(app: ASGIApp, api: ApiService | None = None) -> ASGIApp:
    """Correlation id (honour X-Correlation-Id, echo it back), request metrics, and the
    sequence this api's view has folded (`Virtstream-Sequence`: a client that sends the
    highest it has seen as `Virtstream-Min-Sequence` reads its writes on any replica)."""

    async def middleware(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await app(scope, receive, send)
            return
        headers = dict(scope.get("headers") or [])
        cid = headers.get(CORRELATION_HEADER.encode(), b"").decode() or new_id()
        scope.setdefault("state", {})["correlation_id"] = cid
        started = time.perf_counter()
        code = 500

        async def send_wrapper(message: Message) -> None:
            nonlocal code
            if message["type"] == "http.response.start":
                code = message["status"]
                message["headers"] = [
                    *message.get("headers", []),
                    (b"x-correlation-id", cid.encode()),
                    *(
                        [(SEQUENCE_HEADER.encode(), str(api.runner.last_seq).encode())]
                        if api is not None
                        else []
                    ),
                ]
            await send(message)

        try:
            await app(scope, receive, send_wrapper)
        finally:
            route_path = str(scope.get("path_template") or "unmatched")
            method = scope.get("method", "")
            REQUESTS.labels(method, route_path, str(code)).inc()
            REQUEST_SECONDS.labels(method, route_path).observe(time.perf_counter() - started)

    return middleware


def create_app(
    api: ApiService,
    guard: Guard | None = None,
    *,
    console_tls: ssl.SSLContext | None = None,
    disk_dir: Path | None = None,
) -> Litestar:
    """The app for `api`; its kinds (`api.kinds`, the registry by default) give the routes.
    With a `guard`, every request is authenticated and authorized (`services/api/guard.py`);
    with `console_tls`, the nodes' console servers are dialled with it (mutual TLS); with
    `disk_dir`, VirtualMachineExports serve the disk images there (`export_server.py`)."""
    kinds: Registry = api.kinds
    return Litestar(
        route_handlers=[
            *(handler for spec in kinds.served for handler in kind_routes(spec)),
            *STREAM_ROUTES,
            healthz,
            readyz,
            metrics,
            openapi,
            *DISCOVERY,
            *discovery_routes(kinds),
            *openapi_routes(kinds),
            ssar_route(guard),
            *reviews.routes(guard),
            *WEB_ROUTES,
            *export_server.ROUTES,
            *pod_logs.ROUTES,
            *virt_api_info.ROUTES,
        ],
        middleware=[
            lambda app: observe(app, api),
            *([guard_middleware(guard)] if guard is not None else []),
        ],
        exception_handlers={ApiError: _api_error_handler, HTTPException: _http_error_handler},
        openapi_config=OpenAPIConfig(title="virtstream", version="0.1.0"),
        request_max_body_size=bodies.MAX_BODY_BYTES,
        state=State({"api": api, "console_tls": console_tls, "disk_dir": disk_dir}),
        debug=False,
    )
