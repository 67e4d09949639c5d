"""The api's authentication and authorization guard: ASGI middleware in front of every
route, so no handler checks anything itself.

Per request: authenticate (bearer token, else a verified client certificate); without
credentials the request is anonymous (`system:anonymous`, group
`system:unauthenticated`), which only the public paths allow (/healthz, /readyz, /livez,
/version), anything else is 401; wrong credentials are 401 everywhere. Then RBAC on the
request's attributes (`services/api/rbac.py`): 403 with the API server's message.
`Impersonate-User`/`-Group` headers make the request the impersonated user's once the
`impersonate` verb allows it (`services/api/impersonation.py`). The user is put in
`CURRENT_USER` for the events the request appends (their actor).

`SelfSubjectAccessReview` (authorization.k8s.io/v1) answers what the same decision would
be for the asking user, so `kubectl auth can-i` works."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import msgspec
from litestar import Request, Response, post
from litestar.types import ASGIApp, Receive, Scope, Send

from core.errors import ApiError
from events.objects import Status, StatusDetails
from kinds.registry import Registry
from kinds.spec import KindSpec
from services.api import protowire
from services.api.auth import Authenticator, websocket_bearer, with_authenticated
from services.api.export_server import PREFIX as EXPORT_PREFIX
from services.api.impersonation import impersonate
from services.api.rbac import (
    ANONYMOUS,
    UNAUTHENTICATED,
    Attributes,
    Rule,
    User,
    allowed,
    attributes,
    cluster_roles,
    forbidden_message,
)
from services.api.service import CURRENT_USER
from services.api.upload_proxy import PATHS as UPLOAD_PATHS

JSON = dict[str, Any]
SSAR_PATH = "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews"
_json = msgspec.json.Encoder()
ANONYMOUS_USER = User(ANONYMOUS, (UNAUTHENTICATED,))


@dataclass(frozen=True)
class Guard:
    """What the guard decides with: the authenticator and the roles."""

    authenticator: Authenticator
    roles: Mapping[str, tuple[Rule, ...]]

    @classmethod
    def of(cls, authenticator: Authenticator, kinds: Registry) -> Guard:
        return cls(authenticator, cluster_roles(kinds))

    def allows(self, user: User, a: Attributes) -> bool:
        return allowed(user, a, self.authenticator.config.bindings, self.roles)


def _status(code: int, reason: str, message: str, details: StatusDetails | None = None) -> bytes:
    status = Status(message=message, reason=reason, code=code, details=details)
    return _json.encode(msgspec.to_builtins(status))


async def _answer(send: Send, code: int, body: bytes, scope_type: str = "http") -> None:
    """The refusal as an HTTP answer; a WebSocket's before its upgrade (uvicorn's
    `websocket.http.response` extension)."""
    kind = "websocket.http" if scope_type == "websocket" else "http"
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    start: Any = {"type": f"{kind}.response.start", "status": code, "headers": headers}
    await send(start)
    end: Any = {"type": f"{kind}.response.body", "body": body, "more_body": False}
    await send(end)


def _peercert(scope: Scope) -> dict[str, Any] | None:
    tls = (scope.get("extensions") or {}).get("tls") or {}
    cert = tls.get("peercert")
    return cert if isinstance(cert, dict) else None


def middleware(guard: Guard) -> Any:
    """Litestar middleware (`create_app(api, guard=...)`)."""

    def wrap(app: ASGIApp) -> ASGIApp:
        async def guarded(scope: Scope, receive: Receive, send: Send) -> None:
            if scope["type"] not in ("http", "websocket"):
                await app(scope, receive, send)
                return
            if scope["type"] == "http" and scope.get("path") in UPLOAD_PATHS:
                # an upload: its bearer token is an upload token, which the upload proxy
                # verifies for the claim (services/api/upload_proxy.py), not a user's
                await app(scope, receive, send)
                return
            raw_headers = scope.get("headers") or []
            headers = dict(raw_headers)
            authorization = headers.get(b"authorization", b"").decode("latin-1")
            if scope["type"] == "websocket" and not authorization:  # a browser's
                ws: Any = scope
                authorization, ws["subprotocols"] = websocket_bearer(ws.get("subprotocols", []))
            user, presented = guard.authenticator.authenticate(authorization, _peercert(scope))
            if user is None and presented:
                await _answer(
                    send, 401, _status(401, "Unauthorized", "Unauthorized"), scope["type"]
                )
                return
            method = str(scope.get("method") or "GET")
            query = (scope.get("query_string") or b"").decode("latin-1")
            a = attributes(method, scope.get("path", "/"), query)
            who = user or ANONYMOUS_USER
            try:  # `Impersonate-*`: from here on the request is the impersonated user's
                acting = impersonate(who, raw_headers, guard.allows)
            except ApiError as err:
                body = _json.encode(msgspec.to_builtins(err.status))
                await _answer(send, err.code, body, scope["type"])
                return
            if acting is not None:
                user = who = acting
            # an export's download: authenticated by the export's token, in its handler
            # (services/api/export_server.py), not by the cluster's users
            exporting = scope.get("path", "/").startswith(EXPORT_PREFIX)
            if not exporting and not guard.allows(who, a):
                if user is None:
                    unauthorized = _status(401, "Unauthorized", "Unauthorized")
                    await _answer(send, 401, unauthorized, scope["type"])
                    return
                details = StatusDetails(
                    name=a.name or None, group=a.api_group or None, kind=a.resource or None
                )
                body = _status(403, "Forbidden", forbidden_message(who, a), details)
                await _answer(send, 403, body, scope["type"])
                return
            scope.setdefault("state", {})["user"] = who
            token = CURRENT_USER.set(who.name if user else "")
            try:
                await app(scope, receive, send)
            finally:
                CURRENT_USER.reset(token)

        return guarded

    return wrap


# --------------------------------------------------------------- NATS intents
def intent_attributes(spec: KindSpec, namespace: str, name: str, verb: str) -> Attributes:
    """What an intent over NATS asks for, as the same request over HTTP would."""
    crud = ("get", "create", "update", "patch", "delete")
    sub = spec.subresource(verb) if verb not in crud else None
    if sub is None:
        return Attributes(verb, "", True, spec.group, spec.plural, "", namespace, name)
    http_verb = "get" if sub.method == "GET" else "update"
    group = spec.subresource_group
    return Attributes(http_verb, "", True, group, spec.plural, verb, namespace, name)


def check_intent(guard: Guard, authorization: str, a: Attributes) -> tuple[str, ApiError | None]:
    """(user name, refusal): an intent with a bearer token is authenticated and authorized
    as over HTTP; one without runs as the auth file's `natsIntents` identity, under the
    same RBAC, and is refused (401, as an anonymous request) when there is none."""
    unauthorized = ApiError(Status(message="Unauthorized", reason="Unauthorized", code=401))
    if not authorization:
        identity = guard.authenticator.config.nats_user
        if identity is None:
            return "", unauthorized
        user: User | None = with_authenticated(identity)
    else:
        user, _ = guard.authenticator.authenticate(authorization, None)
    if user is None:
        return "", unauthorized
    if not guard.allows(user, a):
        details = StatusDetails(name=a.name or None, group=a.api_group, kind=a.resource)
        status = Status(
            message=forbidden_message(user, a), reason="Forbidden", code=403, details=details
        )
        return user.name, ApiError(status)
    return user.name, None


# ------------------------------------------------------ SelfSubjectAccessReview
def _review_attributes(spec: JSON) -> Attributes | None:
    res = spec.get("resourceAttributes")
    if isinstance(res, dict):
        return Attributes(
            verb=str(res.get("verb") or ""),
            resource_request=True,
            api_group=str(res.get("group") or ""),
            resource=str(res.get("resource") or ""),
            subresource=str(res.get("subresource") or ""),
            namespace=str(res.get("namespace") or ""),
            name=str(res.get("name") or ""),
        )
    non = spec.get("nonResourceAttributes")
    if isinstance(non, dict):
        return Attributes(verb=str(non.get("verb") or ""), path=str(non.get("path") or ""))
    return None


def review(guard: Guard | None, user: User | None, body: Any) -> tuple[int, JSON]:
    """The SelfSubjectAccessReview answer for `body` (status code, document)."""
    spec = body.get("spec") if isinstance(body, dict) else None
    a = _review_attributes(spec) if isinstance(spec, dict) else None
    if a is None:
        status = Status(
            message="SelfSubjectAccessReview.authorization.k8s.io is invalid: spec: Invalid "
            "value: exactly one of nonResourceAttributes or resourceAttributes must be "
            "specified",
            reason="Invalid",
            code=422,
        )
        return 422, msgspec.to_builtins(status)
    ok = guard is None or (user is not None and guard.allows(user, a))
    out: JSON = {
        "kind": "SelfSubjectAccessReview",
        "apiVersion": "authorization.k8s.io/v1",
        "metadata": {"creationTimestamp": None},
        "spec": spec,
        "status": {"allowed": ok},
    }
    return 201, out


def ssar_route(guard: Guard | None) -> Any:
    @post(SSAR_PATH, include_in_schema=False, status_code=201)
    async def selfsubjectaccessreviews(request: Request[Any, Any, Any]) -> Response[bytes]:
        raw = await request.body()
        try:
            if "protobuf" in request.headers.get("content-type", ""):
                body: Any = protowire.access_review(raw)
            else:
                body = msgspec.json.decode(raw)
        except (msgspec.DecodeError, protowire.ProtoError, UnicodeDecodeError):
            body = None
        user = request.scope.get("state", {}).get("user")
        code, doc = review(guard, user, body)
        return Response(_json.encode(doc), status_code=code, media_type="application/json")

    return selfsubjectaccessreviews
