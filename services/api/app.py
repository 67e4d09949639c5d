"""The HTTP api: KubeVirt's REST dialect on Litestar.

Reads (get, list, watch) come from the projection; writes go through the pure intents and
`ApiService.execute`. A read replica (`virtstream projections`) is the same app without a
store: writes answer 405."""

from __future__ import annotations

import asyncio
import time
from typing import Any, assert_never

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

from events.meta import CLUSTER_SCOPE, Aggregate, Kind
from kinds.registry import Registry
from kinds.spec import Answer, CallArgs, KindSpec, Subresource
from projections import replay
from projections.cluster import Cluster
from readside import timetravel
from readside.watch import Selector, SelectorError, TooOldResourceVersion
from services.api import (
    bodies,
    delete_options,
    discovery,
    dryrun,
    field_manager,
    field_validation,
    intents,
    openapi_k8s,
    pagination,
    patch,
    streams,
    table,
    watch_stream,
)
from services.api import openapi as openapi_doc
from services.api.errors import (
    ApiError,
    Resource,
    bad_request,
    invalid_request,
    method_not_allowed,
    not_found,
    read_replica,
    request_timeout,
    timeout,
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


async def _body(request: Request[Any, Any, Any]) -> JSON:
    return bodies.parse(await _raw_body(request), request.headers.get("content-type", ""))


def _idempotency(request: Request[Any, Any, Any], body: JSON) -> Idempotency | None:
    """`Idempotency-Key`: a retry of the same request with the same key is answered with
    the first one's result instead of being applied twice."""
    query = "&".join(f"{k}={v}" for k, v in sorted(request.query_params.items()))
    identity = f"{request.method} {request.url.path}?{query}"
    return Idempotency.of(request.headers.get(IDEMPOTENCY_HEADER, ""), identity, body)


def _writable(api: ApiService) -> None:
    if api.store is None:
        raise read_replica()


def _dry_run(request: Request[Any, Any, Any]) -> bool:
    return dryrun.requested(request.query_params)


def _object_response(
    api: ApiService, outcome: intents.Outcome, dry_run: bool = False
) -> Response[bytes]:
    if dry_run:
        obj = dryrun.preview(api.cluster, api.kinds, outcome, api.runner.clock())
    else:
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
        return _watch(request, api, spec, selector)
    await _not_older_than(request, api)
    q = request.query_params
    wants_table = table.wants_table(request.headers.get("accept", ""))
    whole = not pagination.limit_of(q) and not q.get("continue")
    if _renders_own(api, spec) and not wants_table and whole:
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
        watcher = api.runner.watch(selector, opts.resource_version)
    except TooOldResourceVersion as exc:
        return Stream(watch_stream.expired(str(exc)), media_type="application/json")
    if opts.send_initial_events:  # queued before any later change: nothing is folded between
        end = watch_stream.bookmark(spec, api.runner.last_seq, initial_end=True)
        watcher.queue.put_nowait(end)
    lines = watch_stream.stream(
        spec, watcher, opts, lambda: api.runner.last_seq, api.runner.unwatch
    )
    return Stream(lines, media_type="application/json")


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
    if (past := await _at(request, api, spec, k)) is not None:
        cluster, now, _ = past
        obj = _render_at(spec, cluster, k, now)
    else:
        await _not_older_than(request, api)
        if _renders_own(api, spec):
            obj = api.runner.get(spec.event_kind, k)
        else:
            obj = _render_at(spec, api.cluster, k, api.runner.clock())
    if obj is None:
        raise not_found(spec.resource, k.rsplit("/", 1)[-1])
    if table.wants_table(request.headers.get("accept", "")):
        return _respond(table.table(table.columns(spec), [obj], now=api.runner.clock()))
    return _respond(obj)


SEQUENCE_HEADER = "virtstream-sequence"
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
    if spec is not None and spec.event_kind in ONE_OBJECT_AT:
        ns, _, name = k.rpartition("/")
        agg = Aggregate(kind=spec.event_kind, namespace=ns or CLUSTER_SCOPE, name=name)
        cluster = await timetravel.object_at(api.runner.store, agg, seq)
    else:
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
        if request.method == "DELETE":
            return await _delete_collection(request, api, spec, ns, body)
        warnings = _field_warnings(request, spec, body)
        dry = _dry_run(request)
        fields = _ownership(request)
        outcome = await api.execute(
            lambda c, ctx: intents.create(c, spec, ns, body, ctx, fields=fields),
            _correlation_id(request),
            _idempotency(request, body),
            dry_run=dry,
        )
        return _with_warnings(_object_response(api, outcome, dry), warnings)

    return collection


async def _delete_collection(
    request: Request[Any, Any, Any], api: ApiService, spec: KindSpec, ns: str, body: JSON
) -> Response[bytes]:
    """deletecollection: every object the selectors match, each deleted as its own
    write (its own event, on its own aggregate's version); answered with the list of
    what was deleted, as each delete answered."""
    delete = spec.delete
    assert delete is not None
    selector = _selector(request, spec.event_kind, ns)
    args = _args(request, body)
    opts = delete_options.DeleteOptions.parse(args.query, body)
    dry = _dry_run(request)
    cid = _correlation_id(request)
    items: list[JSON] = []
    for obj in api.runner.list(selector):
        meta = obj.get("metadata") or {}
        name, obj_ns = meta.get("name", ""), meta.get("namespace", "")

        def decide(c: Cluster, ctx: intents.RequestContext, n: str = name, o: str = obj_ns) -> Any:
            return delete_options.delete_one(c, spec, delete, o, n, args, opts, ctx)

        try:
            outcome = await api.execute(decide, cid, None, dry_run=dry)
        except ApiError as err:
            if err.code == 404:  # gone meanwhile: nothing left to delete
                continue
            raise
        if dry:
            shown = dryrun.preview(api.cluster, api.kinds, outcome, api.runner.clock())
        else:
            shown = api.runner.get(outcome.kind, outcome.key)
        items.append(shown if shown is not None else obj)
    meta = {"resourceVersion": str(api.runner.last_seq)}
    return _respond(
        {"apiVersion": spec.api_version, "kind": spec.list_kind, "metadata": meta, "items": items}
    )


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
            dry = _dry_run(request)
            fields = _ownership(request)
            outcome = await api.execute(
                lambda c, ctx: intents.update(
                    c, spec, ns, name, body, ctx, updatable=updatable, fields=fields
                ),
                _correlation_id(request),
                _idempotency(request, body),
                dry_run=dry,
            )
            return _with_warnings(_object_response(api, outcome, dry), warnings)
        delete = spec.delete
        assert delete is not None  # the route serves DELETE only for kinds that have it
        args = _args(request, body)
        opts = delete_options.DeleteOptions.parse(args.query, body)
        dry = _dry_run(request)
        outcome = await api.execute(
            lambda c, ctx: delete_options.delete_one(c, spec, delete, ns, name, args, opts, ctx),
            _correlation_id(request),
            _idempotency(request, body),
            dry_run=dry,
        )
        return _object_response(api, outcome, dry)

    return item


async def _patch(
    request: Request[Any, Any, Any], api: ApiService, spec: KindSpec, ns: str, name: str
) -> Response[bytes]:
    """Decided against the projection (the object as served), appended as an update."""
    raw = await _raw_body(request)
    content_type = request.headers.get("content-type", "")
    mtype = patch.check_type(content_type)  # an unsupported type is a 415 before anything
    if mtype == patch.APPLY:
        return await _apply(request, api, spec, ns, name, raw)
    warnings: list[str] = []

    def change(current: JSON) -> JSON:
        patched = patch.apply(current, raw, content_type)
        # the status is the server's (it may carry virtstream's own fields): only what
        # the client can write is validated
        written = {k: v for k, v in patched.items() if k != "status"}
        warnings[:] = _field_warnings(request, spec, written)
        return patched

    updatable = api.kinds.updatable
    dry = _dry_run(request)
    fields = _ownership(request)
    outcome = await api.execute(
        lambda c, ctx: intents.patch(
            c, spec, ns, name, change, ctx, updatable=updatable, fields=fields
        ),
        _correlation_id(request),
        None,
        dry_run=dry,
    )
    return _with_warnings(_object_response(api, outcome, dry), warnings)


async def _apply(
    request: Request[Any, Any, Any],
    api: ApiService,
    spec: KindSpec,
    ns: str,
    name: str,
    raw: bytes,
) -> Response[bytes]:
    """Server-side apply (`application/apply-patch+yaml`): `fieldManager` is required,
    `force=true` takes conflicting fields."""
    q = request.query_params
    manager = field_manager.check_manager(q.get("fieldManager") or "")
    if not manager:
        raise invalid_request(
            'PatchOptions.meta.k8s.io "" is invalid: fieldManager: Required value: '
            "is required for apply patch"
        )
    force = (q.get("force") or "").lower() in ("true", "1")
    config = bodies.parse(raw, "application/yaml")
    warnings = _field_warnings(request, spec, config)
    updatable = api.kinds.updatable
    dry = _dry_run(request)
    outcome = await api.execute(
        lambda c, ctx: intents.server_side_apply(
            c, spec, ns, name, config, ctx, manager=manager, force=force, updatable=updatable
        ),
        _correlation_id(request),
        None,
        dry_run=dry,
    )
    return _with_warnings(_object_response(api, outcome, dry), warnings)


def _ownership(request: Request[Any, Any, Any]) -> field_manager.Ownership:
    """The request's field manager takes what it changes: `?fieldManager=`, else the
    client's User-Agent up to its first `/`, as the API server names it."""
    manager = request.query_params.get("fieldManager") or ""
    if not manager:
        agent = request.headers.get("user-agent", "")
        manager = agent.split("/", 1)[0] or "unknown"
    return field_manager.tracked_update(field_manager.check_manager(manager))


def _subresource(spec: KindSpec) -> Any:
    async def subresource(request: Request[Any, Any, Any]) -> Response[Any]:
        ns, name = request.path_params.get("ns", ""), request.path_params["name"]
        sub = spec.subresource(request.path_params["action"], request.method)
        api = _api(request)
        _writable(api)
        if sub is None:
            raise unknown_resource()
        if request.method == "PATCH" and sub.shape is not None:
            args = _args(request, await _shaped_patch(request, api, spec, sub, ns, name))
        else:
            args = _args(request, await _body(request) if sub.reads_body else {})
        dry = _dry_run(request)
        outcome = await api.execute(
            lambda c, ctx: sub.act(c, ns, name, args, ctx),
            _correlation_id(request),
            _idempotency(request, args.body),
            dry_run=dry,
        )
        match sub.answer:
            case Answer.EMPTY:
                return Response(b"", status_code=sub.code)
            case Answer.OBJECT if sub.shape is not None:
                obj = api.runner.get(outcome.kind, outcome.key)
                if obj is None:
                    raise not_found(spec.resource, name)
                return _respond(sub.shape(obj), outcome.code)
            case Answer.OBJECT:
                return _object_response(api, outcome, dry)
            case Answer.CREATED:
                if dry:
                    created = dryrun.preview(api.cluster, api.kinds, outcome, api.runner.clock())
                else:
                    created = api.runner.get(outcome.kind, outcome.key)
                return _respond(created or {}, sub.code)
            case _:
                assert_never(sub.answer)

    return subresource


async def _shaped_patch(
    request: Request[Any, Any, Any],
    api: ApiService,
    spec: KindSpec,
    sub: Subresource,
    ns: str,
    name: str,
) -> JSON:
    """A PATCH of a shaped subresource (`/scale`): the patch applied to the shape as it is
    served now; the subresource's act then decides on the result like a PUT's body."""
    assert sub.shape is not None
    raw = await _raw_body(request)
    content_type = request.headers.get("content-type", "")
    patch.check_type(content_type)
    current = api.runner.get(spec.event_kind, spec.key(ns, name))
    if current is None:
        raise not_found(spec.resource, name)
    return patch.apply(sub.shape(current), raw, content_type)


# The VMI's stream subresources (KubeVirt's console, vnc and vnc/screenshot): relayed to
# the node's console server (`services/api/streams.py`), never appended to the log.
VMI_SUBRESOURCES = "/apis/subresources.kubevirt.io/v1/namespaces/{ns:str}/virtualmachineinstances"


def _stream(channel: streams.Channel) -> Any:
    async def stream(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "websocket":  # KubeVirt's answer to a request without an upgrade
            body = _json.encode(msgspec.to_builtins(bad_request("websocket expected").status))
            await send({"type": "http.response.start", "status": 400,
                        "headers": [(b"content-type", b"application/json")]})  # fmt: skip
            await send({"type": "http.response.body", "body": body})
            return
        params = scope["path_params"]
        api: ApiService = scope["app"].state["api"]
        await streams.relay(
            scope,
            receive,
            send,
            lambda: streams.target(api.cluster, params["ns"], params["name"], channel),
        )

    return stream


@get(f"{VMI_SUBRESOURCES}/{{name:str}}/vnc/screenshot", include_in_schema=False)
async def vnc_screenshot(request: Request[Any, Any, Any]) -> Response[bytes]:
    ns, name = request.path_params["ns"], request.path_params["name"]
    png = await streams.screenshot(streams.target(_api(request).cluster, ns, name, "screenshot"))
    return Response(png, media_type="image/png")


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
    vnc_screenshot,
]


GET, POST, PUT, DELETE = HttpMethod.GET, HttpMethod.POST, HttpMethod.PUT, HttpMethod.DELETE
PATCH = HttpMethod.PATCH


def _methods(spec: KindSpec, verbs: dict[HttpMethod, str]) -> list[HttpMethod]:
    return [method for method, verb in verbs.items() if verb in spec.verbs]


def kind_routes(spec: KindSpec) -> list[HTTPRouteHandler]:
    """The REST routes of one kind, from its registry entry: the collection (list, watch,
    create), across namespaces when namespaced, the item (get, update, delete) and one
    route for its subresources."""
    coll = spec.collection_path("{ns:str}") if spec.namespaced else spec.collection_path()
    coll_methods = _methods(spec, {GET: "list", POST: "create", DELETE: "delete"})
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
        return _respond(table.table(table.NAMESPACE_COLUMNS, items, rv, time.time()))
    meta = {"resourceVersion": rv}
    return _respond({"apiVersion": "v1", "kind": "NamespaceList", "metadata": meta, "items": items})


@get("/api/v1/namespaces/{name:str}", include_in_schema=False)
async def namespace(request: Request[Any, Any, Any]) -> Response[bytes]:
    name = request.path_params["name"]
    found = [n for n in _namespaces(request) if n["metadata"]["name"] == name]
    if not found:
        raise not_found(Resource("namespaces", "", "Namespace"), name)
    if table.wants_table(request.headers.get("accept", "")):
        return _respond(table.table(table.NAMESPACE_COLUMNS, found, now=time.time()))
    return _respond(found[0])


DISCOVERY = [version, core_versions, groups, namespaces, namespace]


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


def create_app(api: ApiService, guard: Guard | None = None) -> Litestar:
    """The app for `api`; its kinds (`api.kinds`, the registry by default) give the routes.
    With a `guard`, every request is authenticated and authorized (`services/api/guard.py`)."""
    kinds: Registry = api.kinds
    return Litestar(
        route_handlers=[
            *(handler for spec in kinds for handler in kind_routes(spec)),
            *STREAM_ROUTES,
            healthz,
            readyz,
            metrics,
            openapi,
            *DISCOVERY,
            *discovery_routes(kinds),
            *openapi_routes(kinds),
            ssar_route(guard),
        ],
        middleware=[
            lambda app: observe(app, api),
            *([guard_middleware(guard)] if guard is not None else []),
        ],
        exception_handlers={ApiError: _api_error_handler, HTTPException: _http_error_handler},
        openapi_config=OpenAPIConfig(title="virtstream", version="0.1.0"),
        request_max_body_size=bodies.MAX_BODY_BYTES,
        state=State({"api": api}),
        debug=False,
    )
