"""The HTTP api: KubeVirt's REST dialect on Litestar.

Reads (get, list, watch) come from the projection; writes go through the pure intents and
`ApiService.execute`. A read replica (`virtstream projections`) is the same app without a
store: writes answer 405."""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import AsyncIterator
from typing import Any, assert_never

import msgspec
from litestar import Litestar, Request, Response, get, route
from litestar.datastructures import State
from litestar.enums import HttpMethod
from litestar.exceptions import HTTPException
from litestar.handlers import HTTPRouteHandler
from litestar.openapi import OpenAPIConfig
from litestar.response import Stream
from litestar.types import ASGIApp, Message, Receive, Scope, Send
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from events.meta import Kind
from kinds.registry import Registry
from kinds.spec import Answer, CallArgs, KindSpec
from projections import replay
from projections.cluster import Cluster
from readside import timetravel
from readside.watch import Selector, SelectorError, TooOldResourceVersion, Watcher
from services.api import (
    bodies,
    discovery,
    field_validation,
    intents,
    openapi_k8s,
    patch,
    table,
)
from services.api import openapi as openapi_doc
from services.api.errors import (
    ApiError,
    Resource,
    bad_request,
    gone,
    method_not_allowed,
    not_found,
    read_replica,
    request_timeout,
    too_large,
    unknown_resource,
)
from services.api.guard import Guard, ssar_route
from services.api.guard import middleware as guard_middleware
from services.api.ids import new_id
from services.api.metrics import REQUEST_SECONDS, REQUESTS
from services.api.service import IDEMPOTENCY_HEADER, ApiService, Idempotency

JSON = dict[str, Any]
CORRELATION_HEADER = "x-correlation-id"
BODY_SECONDS = 10.0
WATCH_MAX_SECONDS = 3600.0  # the API server's longest default watch (2 x minRequestTimeout)
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


async def _body(request: Request[Any, Any, Any]) -> JSON:
    try:  # a client that stops sending mid-body must not hold the request forever
        raw = await asyncio.wait_for(request.body(), BODY_SECONDS)
    except TimeoutError:
        raise request_timeout(
            f"the request body was not received within {BODY_SECONDS:g}s"
        ) from None
    return bodies.parse(raw, request.headers.get("content-type", ""))


def _idempotency(request: Request[Any, Any, Any], body: JSON) -> Idempotency | None:
    """`Idempotency-Key`: a retry of the same request with the same key is answered with
    the first one's result instead of being applied twice."""
    query = "&".join(f"{k}={v}" for k, v in sorted(request.query_params.items()))
    identity = f"{request.method} {request.url.path}?{query}"
    return Idempotency.of(request.headers.get(IDEMPOTENCY_HEADER, ""), identity, body)


def _writable(api: ApiService) -> None:
    if api.store is None:
        raise read_replica()


def _object_response(api: ApiService, outcome: intents.Outcome) -> Response[bytes]:
    obj = api.runner.get(outcome.kind, outcome.key)
    if obj is None:  # deleted at once (nothing left to tear down)
        res = api.kinds.of(outcome.kind).resource
        name = outcome.key.rsplit("/", 1)[-1]
        body = {
            "apiVersion": "v1",
            "kind": "Status",
            "metadata": {},
            "status": "Success",
            "details": {"name": name, "group": res.group, "kind": res.plural},
        }
        return _respond(body, 200)
    return _respond(obj, outcome.code)


# ------------------------------------------------------------- read side
def _selector(request: Request[Any, Any, Any], kind: Kind, namespace: str) -> Selector:
    q = request.query_params
    try:
        return Selector.parse(kind, namespace, q.get("labelSelector"), q.get("fieldSelector"))
    except SelectorError as exc:
        raise bad_request(str(exc)) from None


def _is_watch(request: Request[Any, Any, Any]) -> bool:
    return request.query_params.get("watch", "").lower() in ("true", "1")


async def _list_or_watch(
    request: Request[Any, Any, Any], spec: KindSpec, namespace: str
) -> Response[Any]:
    api = _api(request)
    kind = spec.event_kind
    selector = _selector(request, kind, namespace)
    if (past := await _at(request, api)) is not None:
        cluster, now, seq = past
        items = [
            obj
            for k in sorted(spec.table(cluster))
            if (obj := _render_at(spec, cluster, k, now)) is not None
            and selector.matches(kind, obj)
        ]
        meta = {"resourceVersion": str(seq)}
        return _respond(
            {
                "apiVersion": spec.api_version,
                "kind": spec.list_kind,
                "metadata": meta,
                "items": items,
            }
        )
    if _is_watch(request):
        if "watch" not in spec.verbs or not _renders_own(api, spec):
            raise method_not_allowed()
        return _watch(request, api, selector)
    if _renders_own(api, spec):
        items = api.runner.list(selector)
    else:
        now = api.runner.clock()
        items = [
            obj
            for k in sorted(spec.table(api.cluster))
            if (obj := _render_at(spec, api.cluster, k, now)) is not None
            and selector.matches(kind, obj)
        ]
    rv = str(api.runner.last_seq)
    if table.wants_table(request.headers.get("accept", "")):
        return _respond(table.table(table.columns(spec), items, rv))
    body = {
        "apiVersion": spec.api_version,
        "kind": spec.list_kind,
        "metadata": {"resourceVersion": rv},
        "items": items,
    }
    return _respond(body)


def _watch(request: Request[Any, Any, Any], api: ApiService, selector: Selector) -> Response[Any]:
    q = request.query_params
    rv_text = q.get("resourceVersion") or ""
    try:
        rv = int(rv_text) if rv_text else None
        timeout_seconds = float(q.get("timeoutSeconds") or 0) or None
    except ValueError:
        raise bad_request(f"invalid resourceVersion or timeoutSeconds: {rv_text!r}") from None
    if timeout_seconds is not None:
        if not math.isfinite(timeout_seconds) or timeout_seconds < 0:
            raise bad_request(f"invalid timeoutSeconds: {q.get('timeoutSeconds')!r}")
        timeout_seconds = min(timeout_seconds, WATCH_MAX_SECONDS)
    try:
        watcher = api.runner.watch(selector, rv)
    except TooOldResourceVersion as exc:
        # Kubernetes answers an expired watch with 200 and an ERROR event holding a 410.
        status = msgspec.to_builtins(gone(str(exc)).status)

        async def expired() -> AsyncIterator[bytes]:
            yield _json.encode({"type": "ERROR", "object": status}) + b"\n"

        return Stream(expired(), media_type="application/json")

    async def events() -> AsyncIterator[bytes]:
        deadline = time.monotonic() + timeout_seconds if timeout_seconds else None
        try:
            while True:
                wait = None if deadline is None else deadline - time.monotonic()
                if wait is not None and wait <= 0:
                    return
                try:
                    item = await _next(watcher, wait)
                except TimeoutError:
                    return
                if item is None:
                    return
                yield _json.encode(item) + b"\n"
        finally:
            api.runner.unwatch(watcher)

    return Stream(events(), media_type="application/json")


async def _next(watcher: Watcher, wait: float | None) -> JSON | None:
    item = await asyncio.wait_for(watcher.queue.get(), wait)
    return item


def _renders_own(api: ApiService, spec: KindSpec) -> bool:
    """The kind is the one its aggregates' events render as, so the read side's renders
    (its cache, its watches) are this kind's; another view of the same aggregates renders
    from the fold on each read and cannot be watched."""
    return api.runner.kinds.of(spec.event_kind) is spec


def _render_at(spec: KindSpec, cluster: Cluster, k: str, now: float) -> JSON | None:
    view = spec.table(cluster).get(k)
    if view is None or replay.gone(view):
        return None
    return spec.render(cluster, view, now)


async def _get_one(request: Request[Any, Any, Any], spec: KindSpec, k: str) -> Response[Any]:
    api = _api(request)
    if (past := await _at(request, api)) is not None:
        cluster, now, _ = past
        obj = _render_at(spec, cluster, k, now)
    elif _renders_own(api, spec):
        obj = api.runner.get(spec.event_kind, k)
    else:
        obj = _render_at(spec, api.cluster, k, api.runner.clock())
    if obj is None:
        raise not_found(spec.resource, k.rsplit("/", 1)[-1])
    if table.wants_table(request.headers.get("accept", "")):
        return _respond(table.table(table.columns(spec), [obj]))
    return _respond(obj)


async def _at(
    request: Request[Any, Any, Any], api: ApiService
) -> tuple[Cluster, float, int] | None:
    """`?at=SEQ|TIME` (time travel): the cluster as folded up to that point, from the log.

    Rebuilt per request from the stream (a snapshot would shorten it); time-dependent status
    (CrashLoopBackOff, heartbeat age) is evaluated at the point's time when it has one."""
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
    cluster = await timetravel.cluster_at(api.runner.store, seq=seq)
    return cluster, point.time if point.time is not None else time.time(), seq


# -------------------------------------------------------- field validation
def _field_warnings(request: Request[Any, Any, Any], spec: KindSpec, body: JSON) -> list[str]:
    mode = request.query_params.get("fieldValidation") or "Warn"
    return field_validation.field_warnings(spec, body, mode)


def _with_warnings(response: Response[bytes], found: list[str]) -> Response[bytes]:
    if found:
        response.headers["Warning"] = field_validation.warning_header(found)
    return response


# ------------------------------------------------------------- kind routes
def _args(request: Request[Any, Any, Any], body: JSON) -> CallArgs:
    return CallArgs(body=body, query=dict(request.query_params))


def _collection(spec: KindSpec) -> Any:
    async def collection(request: Request[Any, Any, Any]) -> Response[Any]:
        ns = request.path_params.get("ns", "")
        if request.method == "GET":
            return await _list_or_watch(request, spec, ns)
        api = _api(request)
        _writable(api)
        body = await _body(request)
        warnings = _field_warnings(request, spec, body)
        outcome = await api.execute(
            lambda c, ctx: intents.create(c, spec, ns, body, ctx),
            _correlation_id(request),
            _idempotency(request, body),
        )
        return _with_warnings(_object_response(api, outcome), warnings)

    return collection


def _all_namespaces(spec: KindSpec) -> Any:
    async def all_namespaces(request: Request[Any, Any, Any]) -> Response[Any]:
        return await _list_or_watch(request, spec, "")

    return all_namespaces


def _item(spec: KindSpec) -> Any:
    async def item(request: Request[Any, Any, Any]) -> Response[Any]:
        ns, name = request.path_params.get("ns", ""), request.path_params["name"]
        if request.method == "GET":
            return await _get_one(request, spec, spec.key(ns, name))
        api = _api(request)
        _writable(api)
        if request.method == "PATCH":
            return await _patch(request, api, spec, ns, name)
        body = await _body(request)
        if request.method == "PUT":
            warnings = _field_warnings(request, spec, body)
            updatable = api.kinds.updatable
            outcome = await api.execute(
                lambda c, ctx: intents.update(c, spec, ns, name, body, ctx, updatable=updatable),
                _correlation_id(request),
                _idempotency(request, body),
            )
            return _with_warnings(_object_response(api, outcome), warnings)
        delete = spec.delete
        assert delete is not None  # the route serves DELETE only for kinds that have it
        args = _args(request, body)
        outcome = await api.execute(
            lambda c, ctx: delete(c, ns, name, args, ctx),
            _correlation_id(request),
            _idempotency(request, body),
        )
        return _object_response(api, outcome)

    return item


async def _patch(
    request: Request[Any, Any, Any], api: ApiService, spec: KindSpec, ns: str, name: str
) -> Response[bytes]:
    """Decided against the projection (the object as served), appended as an update."""
    try:
        raw = await asyncio.wait_for(request.body(), BODY_SECONDS)
    except TimeoutError:
        raise request_timeout(
            f"the request body was not received within {BODY_SECONDS:g}s"
        ) from None
    content_type = request.headers.get("content-type", "")
    patch.check_type(content_type)  # an unsupported patch type is a 415 before anything
    warnings: list[str] = []

    def change(current: JSON) -> JSON:
        patched = patch.apply(current, raw, content_type)
        warnings[:] = _field_warnings(request, spec, patched)
        return patched

    updatable = api.kinds.updatable
    outcome = await api.execute(
        lambda c, ctx: intents.patch(c, spec, ns, name, change, ctx, updatable=updatable),
        _correlation_id(request),
        None,
    )
    return _with_warnings(_object_response(api, outcome), warnings)


def _subresource(spec: KindSpec) -> Any:
    async def subresource(request: Request[Any, Any, Any]) -> Response[Any]:
        ns, name = request.path_params.get("ns", ""), request.path_params["name"]
        sub = spec.subresource(request.path_params["action"])
        api = _api(request)
        _writable(api)
        if sub is None or sub.method != request.method:
            raise unknown_resource()
        args = _args(request, await _body(request) if sub.reads_body else {})
        outcome = await api.execute(
            lambda c, ctx: sub.act(c, ns, name, args, ctx),
            _correlation_id(request),
            _idempotency(request, args.body),
        )
        match sub.answer:
            case Answer.EMPTY:
                return Response(b"", status_code=sub.code)
            case Answer.OBJECT:
                return _object_response(api, outcome)
            case Answer.CREATED:
                return _respond(api.runner.get(outcome.kind, outcome.key) or {}, sub.code)
            case _:
                assert_never(sub.answer)

    return subresource


GET, POST, PUT, DELETE = HttpMethod.GET, HttpMethod.POST, HttpMethod.PUT, HttpMethod.DELETE
PATCH = HttpMethod.PATCH


def _methods(spec: KindSpec, verbs: dict[HttpMethod, str]) -> list[HttpMethod]:
    return [method for method, verb in verbs.items() if verb in spec.verbs]


def kind_routes(spec: KindSpec) -> list[HTTPRouteHandler]:
    """The REST routes of one kind, from its registry entry: the collection (list, watch,
    create), across namespaces when namespaced, the item (get, update, delete) and one
    route for its subresources."""
    coll = spec.collection_path("{ns:str}") if spec.namespaced else spec.collection_path()
    coll_methods = _methods(spec, {GET: "list", POST: "create"})
    item_methods = _methods(spec, {GET: "get", PUT: "update", PATCH: "update", DELETE: "delete"})
    routes = [
        route(coll, http_method=coll_methods, status_code=200)(_collection(spec)),
        route(f"{coll}/{{name:str}}", http_method=item_methods, status_code=200)(_item(spec)),
    ]
    if spec.namespaced:
        routes.append(get(spec.collection_path())(_all_namespaces(spec)))
    if spec.subresources:
        path = spec.subresource_path("{name:str}", "{action:str}", "{ns:str}")
        methods = [HttpMethod(m) for m in sorted({s.method for s in spec.subresources})]
        code = spec.subresources[0].code
        routes.append(route(path, http_method=methods, status_code=code)(_subresource(spec)))
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


def openapi_routes(kinds: Registry) -> list[HTTPRouteHandler]:
    """`/openapi/v3` and its per group/version documents, `/openapi/v2` (JSON only: a
    client asking for protobuf alone is told 406), built once: the kinds do not change."""
    documents: dict[str, bytes] = {}
    for group, version in openapi_k8s.group_versions(kinds):
        doc = openapi_k8s.v3_document(kinds, group, version)
        documents[openapi_k8s.v3_path(group, version)] = _json.encode(doc)
    out = [
        get(f"/openapi/v3/{path}", include_in_schema=False, name=f"openapi:{path}")(
            _bytes_handler(body)
        )
        for path, body in documents.items()
    ]
    out.append(_static("/openapi/v3", openapi_k8s.v3_index(documents)))
    v2 = _json.encode(openapi_k8s.v2_document(kinds))

    async def openapi_v2(request: Request[Any, Any, Any]) -> Response[bytes]:
        accept = request.headers.get("accept", "")
        if accept and "json" not in accept and "*/*" not in accept:
            err = bad_request("only application/json is served")
            err.status.code, err.status.reason = 406, "NotAcceptable"
            raise err
        return Response(v2, media_type="application/json")

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


def _namespaces(request: Request[Any, Any, Any]) -> list[JSON]:
    api = _api(request)
    return [discovery.namespace(n) for n in discovery.namespaces(api.kinds, api.cluster)]


@get("/api/v1/namespaces", include_in_schema=False)
async def namespaces(request: Request[Any, Any, Any]) -> Response[bytes]:
    items = _namespaces(request)
    rv = str(_api(request).runner.last_seq)
    if table.wants_table(request.headers.get("accept", "")):
        return _respond(table.table(table.NAMESPACE_COLUMNS, items, rv))
    meta = {"resourceVersion": rv}
    return _respond({"apiVersion": "v1", "kind": "NamespaceList", "metadata": meta, "items": items})


@get("/api/v1/namespaces/{name:str}", include_in_schema=False)
async def namespace(request: Request[Any, Any, Any]) -> Response[bytes]:
    name = request.path_params["name"]
    found = [n for n in _namespaces(request) if n["metadata"]["name"] == name]
    if not found:
        raise not_found(Resource("namespaces", "", "Namespace"), name)
    if table.wants_table(request.headers.get("accept", "")):
        return _respond(table.table(table.NAMESPACE_COLUMNS, found))
    return _respond(found[0])


DISCOVERY = [version, core_versions, groups, namespaces, namespace]


# ------------------------------------------------------------ middleware
def observe(app: ASGIApp) -> ASGIApp:
    """Correlation id (honour X-Correlation-Id, echo it back) and request metrics."""

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


def create_app(api: ApiService, guard: Guard | None = None) -> Litestar:
    """The app for `api`; its kinds (`api.kinds`, the registry by default) give the routes.
    With a `guard`, every request is authenticated and authorized (`services/api/guard.py`)."""
    kinds: Registry = api.kinds
    return Litestar(
        route_handlers=[
            *(handler for spec in kinds for handler in kind_routes(spec)),
            healthz,
            readyz,
            metrics,
            openapi,
            *DISCOVERY,
            *discovery_routes(kinds),
            *openapi_routes(kinds),
            ssar_route(guard),
        ],
        middleware=[observe, *([guard_middleware(guard)] if guard is not None else [])],
        exception_handlers={ApiError: _api_error_handler, HTTPException: _http_error_handler},
        openapi_config=OpenAPIConfig(title="virtstream", version="0.1.0"),
        request_max_body_size=bodies.MAX_BODY_BYTES,
        state=State({"api": api}),
        debug=False,
    )
