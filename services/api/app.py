"""The HTTP api: KubeVirt's REST dialect on Litestar, assembled here from its parts.

The kinds' routes and the writes are here: a write is decoded into the core's `Request`
and performed as the NATS endpoints perform theirs (`services/api/writes.py`: the core's
command, decided and appended by `ApiService`). Reads (get, list, watch, time travel) are
`http_reads.py`'s, from the projection; the VMI's streams `http_streams.py`'s; health,
metrics, discovery and OpenAPI `http_discovery.py`'s; what they share `http_plumbing.py`'s.
A read replica (`virtstream projections`) is the same app without a store: writes answer
405."""

from __future__ import annotations

import functools
import ssl
import time
from pathlib import Path
from typing import Any

import msgspec
from litestar import Litestar, Request, Response, get, route
from litestar.datastructures import State
from litestar.enums import HttpMethod
from litestar.exceptions import HTTPException
from litestar.handlers import HTTPRouteHandler
from litestar.openapi import OpenAPIConfig
from litestar.types import ASGIApp, Message, Receive, Scope, Send

from core import bodies, commands, field_validation, patch, status_writes
from core.commands import Verb
from core.errors import (
    ApiError,
    bad_request,
    not_found,
)
from core.idempotency import HEADER as IDEMPOTENCY_HEADER
from kinds.registry import Registry
from kinds.spec import KindSpec
from services.api import (
    export_server,
    pod_logs,
    protowire,
    reads,
    reviews,
    upload_proxy,
    virt_api_info,
    writes,
)
from services.api.guard import Guard, ssar_route
from services.api.guard import middleware as guard_middleware
from services.api.http_discovery import (
    DISCOVERY,
    discovery_routes,
    healthz,
    metrics,
    openapi,
    openapi_routes,
    readyz,
)
from services.api.http_plumbing import (
    CORRELATION_HEADER,
    api_error_handler,
    api_of,
    correlation_id_of,
    http_error_handler,
    raw_body,
    respond,
    status_response,
    writable,
)
from services.api.http_reads import SEQUENCE_HEADER, get_one, list_or_watch, selector_of
from services.api.http_streams import STREAM_ROUTES
from services.api.ids import new_id
from services.api.metrics import REQUEST_SECONDS, REQUESTS
from services.api.service import ApiService
from services.api.web import WEB_ROUTES

JSON = dict[str, Any]


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
    api = api_of(request)
    writable(api)
    body = await raw_body(request)
    result = await writes.perform(
        api,
        _command_request(request, verb, spec, ns, name, action, body),
        correlation_id_of(request),
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
            response = status_response(err)
        shown = field_validation.warning_header([warning])
        given = response.headers.get("Warning")
        response.headers["Warning"] = f"{shown}, {given}" if given else shown
        return response

    return deprecated


def _collection(spec: KindSpec) -> Any:
    async def collection(request: Request[Any, Any, Any]) -> Response[Any]:
        ns = request.path_params.get("ns", "")
        if request.method == "GET":
            return await list_or_watch(request, spec, ns)
        if request.method == "DELETE":
            return await _delete_collection(request, spec, ns)
        return await _write(request, Verb.CREATE, spec, ns)

    return collection


async def _delete_collection(
    request: Request[Any, Any, Any], spec: KindSpec, ns: str
) -> Response[bytes]:
    """deletecollection: every object the selectors match, each deleted as its own write
    (`writes.delete_collection`), answered with the list of what each delete answered."""
    api = api_of(request)
    writable(api)
    raw = await raw_body(request)
    delete = commands.decode(_command_request(request, Verb.DELETE, spec, ns, "", "", raw))
    kind = spec.event_kind
    selector = selector_of(request, kind, ns)
    assert isinstance(delete, commands.Delete)
    matched = api.runner.list(selector)
    items = await writes.delete_collection(api, delete, matched, spec, correlation_id_of(request))
    meta = {"resourceVersion": str(api.runner.last_seq)}
    return respond(
        {"apiVersion": spec.api_version, "kind": spec.list_kind, "metadata": meta, "items": items}
    )


def _all_namespaces(spec: KindSpec) -> Any:
    async def all_namespaces(request: Request[Any, Any, Any]) -> Response[Any]:
        return await list_or_watch(request, spec, "")

    return all_namespaces


ITEM_VERBS = {"PUT": Verb.UPDATE, "PATCH": Verb.PATCH, "DELETE": Verb.DELETE}


def _item(spec: KindSpec) -> Any:
    async def item(request: Request[Any, Any, Any]) -> Response[Any]:
        ns, name = request.path_params.get("ns", ""), request.path_params["name"]
        if request.method == "GET":
            return await get_one(request, spec, spec.key(ns, name))
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
            return await get_one(request, spec, k)
        api = api_of(request)
        writable(api)
        body = await raw_body(request)
        current = reads.render_at(spec, api.cluster, k, api.runner.clock())
        if current is None:
            raise not_found(spec.resource, name)
        content_type = request.headers.get("content-type", "")
        if request.method == "PATCH":
            written = patch.apply(current, body, content_type, strategic=not spec.group)
        else:
            written = bodies.parse(body, content_type)
        status_writes.check(spec, name, current, written)
        return respond(current)

    return status


def _subresource(spec: KindSpec) -> Any:
    async def subresource(request: Request[Any, Any, Any]) -> Response[Any]:
        ns, name = request.path_params.get("ns", ""), request.path_params["name"]
        action = request.path_params["action"]
        return await _write(request, Verb.CALL, spec, ns, name, action=action)

    return subresource


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
    upload_key: bytes | None = None,
    upload_dir: Path | None = None,
) -> Litestar:
    """The app for `api`; its kinds (`api.kinds`, the registry by default) give the routes.
    With a `guard`, every request is authenticated and authorized (`services/api/guard.py`);
    with `console_tls`, the nodes' console servers are dialled with it (mutual TLS); with
    `disk_dir`, VirtualMachineExports serve the disk images there (`export_server.py`);
    with `upload_key` and `upload_dir`, CDI's upload tokens are signed with that key and
    uploads are staged in that directory (`upload_proxy.py`)."""
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
            *upload_proxy.ROUTES,
            *pod_logs.ROUTES,
            *virt_api_info.ROUTES,
        ],
        middleware=[
            lambda app: observe(app, api),
            *([guard_middleware(guard)] if guard is not None else []),
        ],
        exception_handlers={ApiError: api_error_handler, HTTPException: http_error_handler},
        openapi_config=OpenAPIConfig(title="virtstream", version="0.1.0"),
        request_max_body_size=bodies.MAX_BODY_BYTES,
        state=State(
            {
                "api": api,
                "console_tls": console_tls,
                "disk_dir": disk_dir,
                "upload_key": upload_key,
                "upload_dir": upload_dir,
            }
        ),
        debug=False,
    )
