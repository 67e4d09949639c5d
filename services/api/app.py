"""The HTTP api: KubeVirt's REST dialect on Litestar.

Reads (get, list, watch) come from the projection; writes go through the pure intents and
`ApiService.execute`. A read replica (`virtstream projections`) is the same app without a
store: writes answer 405."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from functools import partial
from typing import Any

import msgspec
import yaml
from litestar import Litestar, Request, Response, get, put, route
from litestar.datastructures import State
from litestar.exceptions import HTTPException
from litestar.openapi import OpenAPIConfig
from litestar.params import FromPath
from litestar.response import Stream
from litestar.types import ASGIApp, Message, Receive, Scope, Send
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from events.manifest import ManifestError, yaml_documents
from events.meta import Kind
from projections import replay
from projections.cluster import Cluster, key
from readside import timetravel
from readside.watch import Selector, SelectorError, TooOldResourceVersion, Watcher
from services.api import intents
from services.api.errors import (
    NODES,
    POLICIES,
    ApiError,
    Resource,
    bad_request,
    gone,
    method_not_allowed,
    not_found,
)
from services.api.ids import new_id
from services.api.metrics import REQUEST_SECONDS, REQUESTS
from services.api.service import ApiService

JSON = dict[str, Any]
CORRELATION_HEADER = "x-correlation-id"
KUBEVIRT = "/apis/kubevirt.io/v1"
POLICY_BASE = "/apis/migrations.kubevirt.io/v1alpha1/migrationpolicies"
SUBRESOURCES = "/apis/subresources.kubevirt.io/v1/namespaces/{ns:str}"
NODE_SUBRESOURCES = "/apis/subresources.virtstream.io/v1/nodes/{name:str}/{action:str}"
LIST_KINDS = {
    Kind.VM: ("kubevirt.io/v1", "VirtualMachineList"),
    Kind.VMI: ("kubevirt.io/v1", "VirtualMachineInstanceList"),
    Kind.MIGRATION: ("kubevirt.io/v1", "VirtualMachineInstanceMigrationList"),
    Kind.POLICY: ("migrations.kubevirt.io/v1alpha1", "MigrationPolicyList"),
    Kind.NODE: ("v1", "NodeList"),
}
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
        err = _unknown()
    elif code == 405:
        err = method_not_allowed()
    else:
        err = bad_request(str(exc.detail))
        err.status.code = code
    return _status_response(err)


async def _body(request: Request[Any, Any, Any]) -> JSON:
    raw = await request.body()
    if not raw.strip():
        return {}
    ctype = request.headers.get("content-type", "")
    try:
        if "yaml" in ctype or not raw.lstrip().startswith((b"{", b"[")):
            docs = yaml_documents(raw.decode())
            if len(docs) != 1:
                raise bad_request("the body must hold exactly one object")
            return docs[0]
        body = msgspec.json.decode(raw)
    except (msgspec.DecodeError, ManifestError, yaml.YAMLError, UnicodeDecodeError) as exc:
        raise bad_request(f"the body of the request was in an unknown format: {exc}") from None
    if not isinstance(body, dict):
        raise bad_request("the body of the request must be an object")
    return body


def _writable(api: ApiService) -> None:
    if api.store is None:
        raise method_not_allowed("this is a read replica: send writes to the api")


def _plural(plural: str) -> tuple[Kind, Resource]:
    if plural not in intents.KINDS or plural == "migrationpolicies":
        raise _unknown()
    kind, res, _ = intents.KINDS[plural]
    return kind, res


def _unknown() -> ApiError:
    err = not_found(Resource("", "", ""), "")
    err.status.message = "the server could not find the requested resource"
    err.status.details = None
    return err


def _object_response(api: ApiService, outcome: intents.Outcome) -> Response[bytes]:
    obj = api.runner.get(outcome.kind, outcome.key)
    if obj is None:  # deleted at once (nothing left to tear down)
        res = intents.RESOURCES[outcome.kind]
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
    request: Request[Any, Any, Any], kind: Kind, namespace: str
) -> Response[Any]:
    api = _api(request)
    selector = _selector(request, kind, namespace)
    if (past := await _at(request, api)) is not None:
        cluster, now, seq = past
        items = [
            obj
            for obj in replay.render_all(cluster, kind, now).values()
            if selector.matches(kind, obj)
        ]
        api_version, list_kind = LIST_KINDS[kind]
        meta = {"resourceVersion": str(seq)}
        return _respond(
            {"apiVersion": api_version, "kind": list_kind, "metadata": meta, "items": items}
        )
    if _is_watch(request):
        return _watch(request, api, selector)
    api_version, list_kind = LIST_KINDS[kind]
    body = {
        "apiVersion": api_version,
        "kind": list_kind,
        "metadata": {"resourceVersion": str(api.runner.last_seq)},
        "items": api.runner.list(selector),
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


async def _get_one(
    request: Request[Any, Any, Any], kind: Kind, k: str, res: Resource
) -> Response[Any]:
    api = _api(request)
    if (past := await _at(request, api)) is not None:
        cluster, now, _ = past
        obj = replay.render_object(cluster, kind, k, now)
    else:
        obj = api.runner.get(kind, k)
    if obj is None:
        raise not_found(res, k.rsplit("/", 1)[-1])
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


def _grace(request: Request[Any, Any, Any], body: JSON) -> int | None:
    value = request.query_params.get("gracePeriodSeconds")
    if value is None:
        value = body.get("gracePeriodSeconds", body.get("gracePeriod"))
    try:
        return None if value is None else int(value)
    except (TypeError, ValueError):
        raise bad_request(f"invalid gracePeriodSeconds: {value!r}") from None


# ----------------------------------------------------------- kubevirt.io/v1
@route(
    f"{KUBEVIRT}/namespaces/{{ns:str}}/{{plural:str}}", http_method=["GET", "POST"], status_code=200
)
async def collection(
    request: Request[Any, Any, Any], ns: FromPath[str], plural: FromPath[str]
) -> Response[Any]:
    kind, _ = _plural(plural)
    if request.method == "GET":
        return await _list_or_watch(request, kind, ns)
    api = _api(request)
    _writable(api)
    body = await _body(request)
    decide = partial(_create, plural=plural, ns=ns, body=body)
    outcome = await api.execute(decide, _correlation_id(request))
    return _object_response(api, outcome)


def _create(
    cluster: Any, ctx: intents.RequestContext, *, plural: str, ns: str, body: JSON
) -> intents.Outcome:
    return intents.create(cluster, plural, ns, body, ctx)


@get(f"{KUBEVIRT}/{{plural:str}}")
async def all_namespaces(request: Request[Any, Any, Any], plural: FromPath[str]) -> Response[Any]:
    kind, _ = _plural(plural)
    return await _list_or_watch(request, kind, "")


@route(
    f"{KUBEVIRT}/namespaces/{{ns:str}}/{{plural:str}}/{{name:str}}",
    http_method=["GET", "PUT", "DELETE"],
    status_code=200,
)
async def item(
    request: Request[Any, Any, Any], ns: FromPath[str], plural: FromPath[str], name: FromPath[str]
) -> Response[Any]:
    kind, res = _plural(plural)
    if request.method == "GET":
        return await _get_one(request, kind, key(ns, name), res)
    api = _api(request)
    _writable(api)
    body = await _body(request)
    if request.method == "PUT":
        outcome = await api.execute(
            lambda c, ctx: intents.update(c, plural, ns, name, body, ctx), _correlation_id(request)
        )
        return _object_response(api, outcome)
    grace = _grace(request, body)
    outcome = await api.execute(
        lambda c, ctx: intents.delete(c, plural, ns, name, grace, ctx), _correlation_id(request)
    )
    return _object_response(api, outcome)


# --------------------------------------------------- migration policies
@route(POLICY_BASE, http_method=["GET", "POST"], status_code=200)
async def policies(request: Request[Any, Any, Any]) -> Response[Any]:
    if request.method == "GET":
        return await _list_or_watch(request, Kind.POLICY, "")
    api = _api(request)
    _writable(api)
    body = await _body(request)
    outcome = await api.execute(
        lambda c, ctx: intents.create(c, "migrationpolicies", "", body, ctx),
        _correlation_id(request),
    )
    return _object_response(api, outcome)


@route(f"{POLICY_BASE}/{{name:str}}", http_method=["GET", "PUT", "DELETE"], status_code=200)
async def policy(request: Request[Any, Any, Any], name: FromPath[str]) -> Response[Any]:
    if request.method == "GET":
        return await _get_one(request, Kind.POLICY, name, POLICIES)
    api = _api(request)
    _writable(api)
    body = await _body(request)
    if request.method == "PUT":
        fn = partial(intents.update, plural="migrationpolicies", namespace="", name=name, raw=body)
    else:
        fn = partial(
            intents.delete, plural="migrationpolicies", namespace="", name=name, grace=None
        )
    outcome = await api.execute(lambda c, ctx: fn(c, ctx=ctx), _correlation_id(request))
    return _object_response(api, outcome)


# ------------------------------------------------------------------ nodes
@get("/api/v1/nodes")
async def nodes(request: Request[Any, Any, Any]) -> Response[Any]:
    return await _list_or_watch(request, Kind.NODE, "")


@get("/api/v1/nodes/{name:str}")
async def node(request: Request[Any, Any, Any], name: FromPath[str]) -> Response[Any]:
    return await _get_one(request, Kind.NODE, name, NODES)


@put(NODE_SUBRESOURCES, status_code=202)
async def node_action(
    request: Request[Any, Any, Any], name: FromPath[str], action: FromPath[str]
) -> Response[Any]:
    if action not in ("cordon", "uncordon", "drain"):
        raise _unknown()
    api = _api(request)
    _writable(api)
    outcome = await api.execute(
        lambda c, ctx: intents.node_action(c, name, action, ctx), _correlation_id(request)
    )
    return _object_response(api, outcome)


# ----------------------------------------------------------- subresources
@put(f"{SUBRESOURCES}/virtualmachines/{{name:str}}/{{action:str}}", status_code=202)
async def vm_subresource(
    request: Request[Any, Any, Any], ns: FromPath[str], name: FromPath[str], action: FromPath[str]
) -> Response[Any]:
    api = _api(request)
    _writable(api)
    body = await _body(request)
    match action:
        case "start":
            paused = bool(body.get("paused", False))
            decide: Any = lambda c, ctx: intents.start(c, ns, name, paused, ctx)  # noqa: E731
        case "stop":
            grace = _grace(request, body)
            decide = lambda c, ctx: intents.stop(c, ns, name, grace, ctx)  # noqa: E731
        case "restart":
            grace = _grace(request, body)
            decide = lambda c, ctx: intents.restart(c, ns, name, grace, ctx)  # noqa: E731
        case "migrate":
            selector = body.get("addedNodeSelector") or None
            if selector is not None and not isinstance(selector, dict):
                raise bad_request("addedNodeSelector must be a map of labels")
            decide = lambda c, ctx: intents.migrate(c, ns, name, selector, ctx)  # noqa: E731
        case _:
            raise _unknown()
    outcome = await api.execute(decide, _correlation_id(request))
    if outcome.kind is Kind.MIGRATION:  # migrate answers with the migration it created
        return _respond(api.runner.get(outcome.kind, outcome.key) or {}, 202)
    return Response(b"", status_code=202)


@put(f"{SUBRESOURCES}/virtualmachineinstances/{{name:str}}/{{action:str}}", status_code=200)
async def vmi_subresource(
    request: Request[Any, Any, Any], ns: FromPath[str], name: FromPath[str], action: FromPath[str]
) -> Response[Any]:
    api = _api(request)
    _writable(api)
    fns = {"pause": intents.pause, "unpause": intents.unpause, "softreboot": intents.softreboot}
    fn = fns.get(action)
    if fn is None:
        raise _unknown()
    await api.execute(lambda c, ctx: fn(c, ns, name, ctx), _correlation_id(request))
    return Response(b"", status_code=200)


# ----------------------------------------------------------------- ops
@get("/healthz", include_in_schema=False)
async def healthz() -> Response[bytes]:
    return Response(b"ok", media_type="text/plain")


@get("/readyz", include_in_schema=False)
async def readyz(request: Request[Any, Any, Any]) -> Response[bytes]:
    ok = _api(request).runner.ready
    return Response(
        b"ok" if ok else b"not ready", status_code=200 if ok else 503, media_type="text/plain"
    )


@get("/metrics", include_in_schema=False)
async def metrics() -> Response[bytes]:
    return Response(generate_latest(), media_type=CONTENT_TYPE_LATEST)


@get("/openapi.json", include_in_schema=False)
async def openapi(request: Request[Any, Any, Any]) -> Response[bytes]:
    return _respond(request.app.openapi_schema.to_schema())


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


def create_app(api: ApiService) -> Litestar:
    return Litestar(
        route_handlers=[
            collection,
            all_namespaces,
            item,
            policies,
            policy,
            nodes,
            node,
            node_action,
            vm_subresource,
            vmi_subresource,
            healthz,
            readyz,
            metrics,
            openapi,
        ],
        middleware=[observe],
        exception_handlers={ApiError: _api_error_handler, HTTPException: _http_error_handler},
        openapi_config=OpenAPIConfig(title="virtstream", version="0.1.0"),
        state=State({"api": api}),
        debug=False,
    )
