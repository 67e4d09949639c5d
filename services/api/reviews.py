"""Who am I and what may I do: the API server's self reviews, answered from the request's
user (the impersonated one under `Impersonate-User`, `services/api/impersonation.py`).

- `SelfSubjectRulesReview` (authorization.k8s.io/v1, `kubectl auth can-i --list`): every
  rule of every binding of the user that holds in `spec.namespace` (ClusterRoleBindings and
  that namespace's RoleBindings, Kubernetes' default bindings included), as
  `resourceRules` and `nonResourceRules`; `incomplete` is false, since RBAC is the only
  authorizer;
- `SelfSubjectReview` (authentication.k8s.io/v1, `kubectl auth whoami`): the user's name,
  uid, groups and extras as authenticated.

kubectl sends both as protobuf: the rules review's one field (the namespace) is read from
the wire (`services/api/protowire.py`); the whoami body carries nothing the answer needs."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import msgspec
from litestar import Request, Response, post

from services.api import protowire
from services.api.guard import Guard
from services.api.rbac import (
    ANONYMOUS,
    SYSTEM_BINDINGS,
    SYSTEM_ROLES,
    UNAUTHENTICATED,
    Binding,
    Rule,
    User,
    subject_is,
)

JSON = dict[str, Any]
SSRR_PATH = "/apis/authorization.k8s.io/v1/selfsubjectrulesreviews"
SSR_PATH = "/apis/authentication.k8s.io/v1/selfsubjectreviews"
_json = msgspec.json.Encoder()
_ANONYMOUS = User(ANONYMOUS, (UNAUTHENTICATED,))


def rules_of(
    user: User,
    namespace: str,
    bindings: Iterable[Binding],
    roles: Mapping[str, tuple[Rule, ...]],
) -> list[Rule]:
    """The rules that hold for `user` in `namespace`, in binding order, each once."""
    out: dict[Rule, None] = {}
    for binding in (*SYSTEM_BINDINGS, *bindings):
        if binding.namespace and binding.namespace != namespace:
            continue
        if not any(subject_is(s, user) for s in binding.subjects):
            continue
        for rule in roles.get(binding.role) or SYSTEM_ROLES.get(binding.role, ()):
            out.setdefault(rule, None)
    return list(out)


def rules_review(guard: Guard | None, user: User | None, namespace: str) -> JSON:
    everything = Rule(("*",), ("*",), ("*",))
    rules = (
        [everything, Rule(("*",), non_resource_urls=("*",))]
        if guard is None  # no authorization at all (--insecure)
        else rules_of(
            user or _ANONYMOUS, namespace, guard.authenticator.config.bindings, guard.roles
        )
    )
    resource = [
        {"verbs": list(r.verbs), "apiGroups": list(r.api_groups), "resources": list(r.resources)}
        for r in rules
        if r.resources
    ]
    non_resource = [
        {"verbs": list(r.verbs), "nonResourceURLs": list(r.non_resource_urls)}
        for r in rules
        if r.non_resource_urls
    ]
    return {
        "kind": "SelfSubjectRulesReview",
        "apiVersion": "authorization.k8s.io/v1",
        "metadata": {"creationTimestamp": None},
        "spec": {"namespace": namespace} if namespace else {},
        "status": {
            "resourceRules": resource,
            "nonResourceRules": non_resource,
            "incomplete": False,
        },
    }


def subject_review(user: User | None) -> JSON:
    who = user or _ANONYMOUS
    info: JSON = {"username": who.name, "groups": list(who.groups)}
    if who.uid:
        info["uid"] = who.uid
    if who.extra:
        info["extra"] = {k: list(v) for k, v in who.extra}
    return {
        "kind": "SelfSubjectReview",
        "apiVersion": "authentication.k8s.io/v1",
        "metadata": {"creationTimestamp": None},
        "status": {"userInfo": info},
    }


def _namespace(raw: bytes, content_type: str) -> str:
    try:
        if "protobuf" in content_type:
            return protowire.rules_review_namespace(raw)
        body = msgspec.json.decode(raw) if raw else {}
    except (msgspec.DecodeError, protowire.ProtoError, UnicodeDecodeError):
        return ""
    spec = body.get("spec") if isinstance(body, dict) else None
    return str(spec.get("namespace") or "") if isinstance(spec, dict) else ""


def _answer(doc: JSON) -> Response[bytes]:
    return Response(_json.encode(doc), status_code=201, media_type="application/json")


def routes(guard: Guard | None) -> list[Any]:
    @post(SSRR_PATH, include_in_schema=False, status_code=201)
    async def selfsubjectrulesreviews(request: Request[Any, Any, Any]) -> Response[bytes]:
        namespace = _namespace(await request.body(), request.headers.get("content-type", ""))
        user = request.scope.get("state", {}).get("user")
        return _answer(rules_review(guard, user, namespace))

    @post(SSR_PATH, include_in_schema=False, status_code=201)
    async def selfsubjectreviews(request: Request[Any, Any, Any]) -> Response[bytes]:
        return _answer(subject_review(request.scope.get("state", {}).get("user")))

    return [selfsubjectrulesreviews, selfsubjectreviews]
