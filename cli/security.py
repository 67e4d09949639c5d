"""What `virtstream up` sets up to be secure by default, in its data dir:

- `pki/`: the CA, the api's (and nats-server's) certificate, an admin client certificate
  (`ops/pki.py`);
- `auth.yaml`: the api's users and role bindings (`services/api/auth.py`), written once
  with the admin's token; the operator edits it afterwards (the api re-reads it);
- `credentials/admin-token`: the admin's bearer token, also in `kubeconfig`;
- `credentials/nats-<user>`: each NATS user's password (`ops/nats_auth.py`); each service
  gets only its own, through its environment.

Every file is the owner's alone (0600, the data dir 0700)."""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from pathlib import Path

import yaml

from eventstore.connection import ConnectOptions
from ops import nats_auth
from ops import pki as pki_

ADMIN = "admin"
MASTERS = "system:masters"


@dataclass(frozen=True)
class Secured:
    pki: pki_.Pki
    auth_file: Path
    admin_token: str

    def api_args(self) -> tuple[str, ...]:
        return (
            "--auth-file",
            str(self.auth_file),
            "--tls-cert",
            str(self.pki.server_cert),
            "--tls-key",
            str(self.pki.server_key),
            "--client-ca",
            str(self.pki.ca),
        )


def _private(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    path.touch(mode=0o600, exist_ok=True)
    path.chmod(0o600)
    path.write_text(text)


def auth_document(admin_token: str) -> str:
    doc = {
        "tokens": [{"token": admin_token, "user": ADMIN, "groups": [MASTERS]}],
        "clusterRoleBindings": [],
        "roleBindings": [],
    }
    head = (
        "# The api's users and role bindings (services/api/auth.py has the format).\n"
        "# Roles: kubevirt.io:view, kubevirt.io:edit, kubevirt.io:admin, kubevirt.io:migrate,\n"
        "# cluster-admin. Changes apply within a second, without a restart.\n"
    )
    return head + yaml.safe_dump(doc, sort_keys=False)


def prepare(data_dir: Path) -> Secured:
    """The PKI, the auth file and the admin token (each created when missing)."""
    pki = pki_.ensure(data_dir / "pki")
    token_file = data_dir / "credentials" / "admin-token"
    if token_file.exists():
        token = token_file.read_text().strip()
    else:
        token = secrets.token_urlsafe(32)
        _private(token_file, token + "\n")
    auth_file = data_dir / "auth.yaml"
    if not auth_file.exists():
        _private(auth_file, auth_document(token))
    return Secured(pki, auth_file, token)


@dataclass(frozen=True)
class Bus:
    """The embedded nats-server's users and their credentials."""

    users: dict[str, nats_auth.NatsUser]
    ca: Path | None  # with TLS
    tls: tuple[Path, Path] | None

    @property
    def authorization(self) -> str:
        return nats_auth.authorization_block(self.users.values())

    def auth(self, user: str) -> ConnectOptions:
        u = self.users[user]
        return ConnectOptions(user=u.name, password=u.password, tls_ca=str(self.ca or ""))

    def env(self, user: str) -> dict[str, str]:
        return self.auth(user).env()


def nats_users(data_dir: Path, nodes: list[str], pki: pki_.Pki | None) -> Bus:
    """The NATS users of a cluster of `nodes`, their passwords kept in
    `credentials/nats-<user>` (a restart keeps them; a new node gets one)."""
    creds = data_dir / "credentials"
    passwords = {}
    for path in creds.glob("nats-*") if creds.is_dir() else ():
        passwords[path.name.removeprefix("nats-")] = path.read_text().strip()
    users = {u.name: u for u in nats_auth.users(nodes, passwords)}
    for u in users.values():
        if passwords.get(u.name) != u.password:
            _private(creds / f"nats-{u.name}", u.password + "\n")
    tls = (pki.server_cert, pki.server_key) if pki else None
    return Bus(users, pki.ca if pki else None, tls)
