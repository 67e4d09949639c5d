"""The HTTP api's own routes beside the kinds': health, readiness, metrics, version,
API discovery and the OpenAPI documents."""

from __future__ import annotations

import functools
from typing import Any

import msgspec
from litestar import Request, Response, get
from litestar.handlers import HTTPRouteHandler
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from core.errors import (
    bad_request,
)
from kinds.registry import Registry
from services.api import (
    discovery,
    openapi_k8s,
    protowire,
)
from services.api import openapi as openapi_doc
from services.api.http_plumbing import api_of, respond

JSON = dict[str, Any]
_json = msgspec.json.Encoder()


# ----------------------------------------------------------------- ops
@get("/healthz", include_in_schema=False)
async def healthz() -> Response[bytes]:
    return Response(b"ok", media_type="text/plain")


@get("/readyz", include_in_schema=False)
async def readyz(request: Request[Any, Any, Any]) -> Response[bytes]:
    ok = await api_of(request).ready()
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
            openapi_doc.describe(request.app.openapi_schema.to_schema(), api_of(request).kinds)
        )
    return Response(state["openapi"], media_type="application/json")


# ------------------------------------------------------------- discovery
@get("/version", include_in_schema=False)
async def version() -> Response[bytes]:
    return respond(discovery.VERSION)


def _discovery(request: Request[Any, Any, Any], core: bool, legacy: JSON) -> Response[bytes]:
    if discovery.wants_aggregated(request.headers.get("accept", "")):
        body = discovery.aggregated(api_of(request).kinds, core)
        return Response(_json.encode(body), media_type=discovery.AGGREGATED)
    return respond(legacy)


@get("/api", include_in_schema=False)
async def core_versions(request: Request[Any, Any, Any]) -> Response[bytes]:
    return _discovery(request, True, discovery.api_versions())


@get("/apis", include_in_schema=False)
async def groups(request: Request[Any, Any, Any]) -> Response[bytes]:
    return _discovery(request, False, discovery.api_groups(api_of(request).kinds))


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
