"""Who is asking: the api's users, groups and role bindings, from a file the operator
controls, and authentication by bearer token or client certificate.

The file (YAML; `virtstream up` writes one in its data dir, mode 0600):

    tokens:                      # bearer tokens (Authorization: Bearer <token>)
      - token: 9f1c...
        user: admin
        groups: [system:masters]
      - token: 41ab...
        user: alice
        groups: [developers]
    clusterRoleBindings:         # everywhere
      - name: viewers
        roleRef: {kind: ClusterRole, name: kubevirt.io:view}
        subjects: [{kind: Group, name: developers}]
    roleBindings:                # in one namespace
      - name: alice-edit
        namespace: dev
        roleRef: {kind: ClusterRole, name: kubevirt.io:edit}
        subjects: [{kind: User, name: alice}]

A client certificate signed by the api's client CA authenticates as its Common Name, with
its Organizations as groups (as Kubernetes reads one). Every authenticated user is also in
`system:authenticated`; `system:masters` is bound to `cluster-admin`. The file is read
again when it changes, so a binding takes effect without a restart."""

from __future__ import annotations

import base64
import binascii
import hashlib
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec
import yaml

from services.api.rbac import AUTHENTICATED, Binding, Subject, User

RELOAD_SECONDS = 1.0
# Kubernetes' WebSocket token: a browser cannot set a WebSocket's Authorization header, so
# it offers `base64url.bearer.authorization.k8s.io.<base64url(token), unpadded>` as a
# subprotocol instead (the API server's wsstream reads it the same way).
WEBSOCKET_BEARER = "base64url.bearer.authorization.k8s.io."


class AuthFileError(ValueError):
    """The auth file is missing or malformed (said in one line)."""


class _Token(msgspec.Struct, frozen=True):
    token: str
    user: str
    groups: tuple[str, ...] = ()


class _RoleRef(msgspec.Struct, frozen=True):
    name: str
    kind: str = "ClusterRole"


class _Subject(msgspec.Struct, frozen=True):
    kind: str
    name: str


class _Binding(msgspec.Struct, frozen=True, rename="camel"):
    role_ref: _RoleRef
    subjects: tuple[_Subject, ...]
    name: str = ""
    namespace: str = ""


class _File(msgspec.Struct, frozen=True, rename="camel"):
    tokens: tuple[_Token, ...] = ()
    role_bindings: tuple[_Binding, ...] = ()
    cluster_role_bindings: tuple[_Binding, ...] = ()


def _digest(token: str) -> bytes:
    return hashlib.sha256(token.encode()).digest()


@dataclass(frozen=True)
class AuthConfig:
    """Tokens (by their SHA-256, so a lookup does not compare secrets byte by byte) and
    the bindings."""

    tokens: dict[bytes, User] = field(default_factory=dict)
    bindings: tuple[Binding, ...] = ()

    @classmethod
    def parse(cls, data: Any) -> AuthConfig:
        try:
            raw = msgspec.convert(data or {}, _File)
        except msgspec.ValidationError as exc:
            raise AuthFileError(f"invalid auth file: {exc}") from None
        tokens = {_digest(t.token): User(t.user, tuple(t.groups)) for t in raw.tokens}
        bindings: list[Binding] = []
        for b, namespaced in [(b, True) for b in raw.role_bindings] + [
            (b, False) for b in raw.cluster_role_bindings
        ]:
            if namespaced and not b.namespace:
                raise AuthFileError(f"invalid auth file: roleBinding {b.name!r} has no namespace")
            subjects = tuple(Subject(s.kind, s.name) for s in b.subjects)
            ns = b.namespace if namespaced else ""
            bindings.append(Binding(b.role_ref.name, subjects, ns, b.name))
        return cls(tokens, tuple(bindings))

    @classmethod
    def load(cls, path: Path) -> AuthConfig:
        try:
            text = path.read_text()
        except OSError as exc:
            raise AuthFileError(f"cannot read the auth file {path}: {exc.strerror}") from None
        try:
            return cls.parse(yaml.safe_load(text))
        except yaml.YAMLError as exc:
            raise AuthFileError(f"invalid auth file {path}: {exc}") from None

    def by_token(self, token: str) -> User | None:
        return self.tokens.get(_digest(token))


def with_authenticated(user: User) -> User:
    groups = user.groups if AUTHENTICATED in user.groups else (*user.groups, AUTHENTICATED)
    return User(user.name, groups)


def from_certificate(peercert: dict[str, Any] | None) -> User | None:
    """A verified client certificate (ssl's getpeercert() form): CN → user, O → groups."""
    if not peercert:
        return None
    name, groups = "", []
    for rdn in peercert.get("subject", ()):
        for key, value in rdn:
            if key == "commonName":
                name = value
            elif key == "organizationName":
                groups.append(value)
    return User(name, tuple(groups)) if name else None


class Authenticator:
    """The auth file, re-read when its modification time changes (checked at most once
    per second)."""

    def __init__(self, path: Path | None = None, config: AuthConfig | None = None) -> None:
        self.path = path
        self._config = config if config is not None else AuthConfig()
        self._mtime = 0.0
        self._checked = 0.0
        if path is not None:
            self._config = AuthConfig.load(path)
            self._mtime = os.stat(path).st_mtime

    @property
    def config(self) -> AuthConfig:
        if self.path is not None and time.monotonic() - self._checked > RELOAD_SECONDS:
            self._checked = time.monotonic()
            try:
                mtime = os.stat(self.path).st_mtime
                if mtime != self._mtime:
                    self._config, self._mtime = AuthConfig.load(self.path), mtime
            except (OSError, AuthFileError):
                pass  # keep serving with the last good file
        return self._config

    def authenticate(
        self, authorization: str, peercert: dict[str, Any] | None
    ) -> tuple[User | None, bool]:
        """(user, presented): `presented` is whether credentials were offered at all (a
        wrong token is a 401 even where anonymous requests are served)."""
        scheme, _, token = authorization.partition(" ")
        if scheme.lower() == "bearer" and token.strip():
            user = self.config.by_token(token.strip())
            return (with_authenticated(user) if user else None), True
        if authorization:
            return None, True
        user = from_certificate(peercert)
        if user is not None:
            return with_authenticated(user), True
        return None, False


def websocket_bearer(protocols: list[str]) -> tuple[str, list[str]]:
    """(`Bearer <token>` from a WebSocket's offered subprotocols, or "", the other
    subprotocols): the token's protocol is taken out, so it is never chosen and echoed."""
    authorization = ""
    rest = []
    for p in protocols:
        if not p.startswith(WEBSOCKET_BEARER):
            rest.append(p)
            continue
        encoded = p[len(WEBSOCKET_BEARER) :]
        try:
            token = base64.urlsafe_b64decode(encoded + "=" * (-len(encoded) % 4)).decode()
        except (binascii.Error, UnicodeDecodeError):
            token = ""
        authorization = f"Bearer {token}" if token else "Bearer -"  # unreadable: refused
    return authorization, rest
