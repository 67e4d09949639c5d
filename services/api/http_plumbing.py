"""What every HTTP route of the api shares: the service behind it, the request's
correlation id, JSON answers and Status errors, a body read within its deadline."""

from __future__ import annotations

import asyncio
from typing import Any

import msgspec
from litestar import Request, Response
from litestar.exceptions import HTTPException

from core import bodies
from core.errors import (
    ApiError,
    bad_request,
    method_not_allowed,
    read_replica,
    request_timeout,
    too_large,
    unknown_resource,
)
from services.api.ids import new_id
from services.api.service import ApiService

JSON = dict[str, Any]
CORRELATION_HEADER = "x-correlation-id"
BODY_SECONDS = 10.0
_json = msgspec.json.Encoder()


def api_of(request: Request[Any, Any, Any]) -> ApiService:
    return request.app.state["api"]


def correlation_id_of(request: Request[Any, Any, Any]) -> str:
    return str(request.scope.get("state", {}).get("correlation_id") or new_id())


def respond(body: Any, code: int = 200) -> Response[bytes]:
    return Response(_json.encode(body), status_code=code, media_type="application/json")


def status_response(err: ApiError) -> Response[bytes]:
    return respond(msgspec.to_builtins(err.status), err.code)


def api_error_handler(_: Request[Any, Any, Any], exc: ApiError) -> Response[bytes]:
    return status_response(exc)


def http_error_handler(_: Request[Any, Any, Any], exc: HTTPException) -> Response[bytes]:
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
    return status_response(err)


async def raw_body(request: Request[Any, Any, Any]) -> bytes:
    try:  # a client that stops sending mid-body must not hold the request forever
        async with asyncio.timeout(BODY_SECONDS):
            return await request.body()
    except TimeoutError:
        raise request_timeout(
            f"the request body was not received within {BODY_SECONDS:g}s"
        ) from None


def writable(api: ApiService) -> None:
    if api.store is None:  # refused before the body is read
        raise read_replica()
