"""Impersonation as the API server does it (`WithImpersonation`), pure: a request carrying
`Impersonate-User` (and optionally `Impersonate-Group`, `Impersonate-Uid`,
`Impersonate-Extra-<key>`) acts as that user, once the requester is allowed the
`impersonate` verb on each thing it asks to be:

- `users` (API group ""), named by the user; a service account's name
  (`system:serviceaccount:<ns>:<name>`) is `serviceaccounts` in its namespace instead, and
  brings its groups unless groups are given;
- `groups` (""), one check per group;
- `uids` (`authentication.k8s.io`);
- `userextras/<key>` (`authentication.k8s.io`), one check per value.

The impersonated user is in `system:authenticated` unless it is `system:anonymous` (then
`system:unauthenticated`) or one of those two groups was asked for. Groups, a uid or extras
without a user are an error (500, the API server's `requested ... without impersonating a
user`); a refusal is the 403 of the first check that fails, in the API server's words
(`users "vera" is forbidden: User "alice" cannot impersonate resource "users" in API
group "" at the cluster scope`). `kubectl --as`, `--as-group`, `--as-uid` send these."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from core.errors import ApiError
from events.objects import Status, StatusDetails
from services.api.rbac import (
    ANONYMOUS,
    AUTHENTICATED,
    UNAUTHENTICATED,
    Attributes,
    User,
    forbidden_message,
)

USER = "impersonate-user"
GROUP = "impersonate-group"
UID = "impersonate-uid"
EXTRA = "impersonate-extra-"
AUTHENTICATION = "authentication.k8s.io"
SERVICE_ACCOUNT = "system:serviceaccount:"


@dataclass(frozen=True)
class Requested:
    user: str
    groups: tuple[str, ...]
    uid: str
    extra: tuple[tuple[str, tuple[str, ...]], ...]


def requested(headers: Iterable[tuple[bytes, bytes]]) -> Requested | None:
    """What the request's impersonation headers ask for (None: none); raises the API
    server's 500 for groups, a uid or extras without a user."""
    user, uid = "", ""
    groups: list[str] = []
    extra: dict[str, list[str]] = {}
    for raw_name, raw_value in headers:
        name = raw_name.decode("latin-1").lower()
        value = raw_value.decode("latin-1").strip()
        if name == USER:
            user = value
        elif name == GROUP:
            groups.append(value)
        elif name == UID:
            uid = value
        elif name.startswith(EXTRA):
            extra.setdefault(name[len(EXTRA) :], []).append(value)
    if not (user or groups or uid or extra):
        return None
    if not user:
        asked = ", ".join(
            [*(f"group {g}" for g in groups), *([f"uid {uid}"] if uid else []),
             *(f"extra {k}" for k in extra)]
        )  # fmt: skip
        status = Status(
            message=f"Internal error occurred: requested [{asked}] without impersonating a user",
            reason="InternalError",
            code=500,
        )
        raise ApiError(status)
    return Requested(user, tuple(groups), uid, tuple((k, tuple(v)) for k, v in extra.items()))


def _service_account(name: str) -> tuple[str, str] | None:
    if not name.startswith(SERVICE_ACCOUNT):
        return None
    ns, _, sa = name[len(SERVICE_ACCOUNT) :].partition(":")
    return (ns, sa) if ns and sa and ":" not in sa else None


def checks(r: Requested) -> list[Attributes]:
    """One `impersonate` check per thing asked for, in the API server's order."""
    out: list[Attributes] = []
    sa = _service_account(r.user)
    if sa is not None:
        out.append(Attributes("impersonate", "", True, "", "serviceaccounts", "", sa[0], sa[1]))
    else:
        out.append(Attributes("impersonate", "", True, "", "users", "", "", r.user))
    out += [Attributes("impersonate", "", True, "", "groups", "", "", g) for g in r.groups]
    if r.uid:
        out.append(Attributes("impersonate", "", True, AUTHENTICATION, "uids", "", "", r.uid))
    for key, values in r.extra:
        out += [
            Attributes("impersonate", "", True, AUTHENTICATION, "userextras", key, "", v)
            for v in values
        ]
    return out


def acting_as(r: Requested) -> User:
    """The user the request acts as once every check passed."""
    groups = list(r.groups)
    sa = _service_account(r.user)
    if sa is not None and not groups:
        groups = ["system:serviceaccounts", f"system:serviceaccounts:{sa[0]}"]
    if r.user == ANONYMOUS:
        if UNAUTHENTICATED not in groups:
            groups.append(UNAUTHENTICATED)
    elif AUTHENTICATED not in groups and UNAUTHENTICATED not in groups:
        groups.append(AUTHENTICATED)
    return User(r.user, tuple(groups), r.uid, r.extra)


def impersonate(
    requester: User,
    headers: Iterable[tuple[bytes, bytes]],
    allows: Callable[[User, Attributes], bool],
) -> User | None:
    """The user a request acts as (None: no impersonation asked), or the API server's
    refusal as an ApiError."""
    r = requested(headers)
    if r is None:
        return None
    for a in checks(r):
        if not allows(requester, a):
            details = StatusDetails(name=a.name or None, group=a.api_group, kind=a.resource)
            message = forbidden_message(requester, a)
            raise ApiError(Status(message=message, reason="Forbidden", code=403, details=details))
    return acting_as(r)
