"""What `virtstream up` sets up to be secure by default, in its data dir:

- `pki/`: the CA, the api's (and nats-server's) certificate, an admin client certificate
  (`ops/pki.py`);
- `auth.yaml`: the api's users and role bindings (`services/api/auth.py`), written once
  with the admin's token; the operator edits it afterwards (the api re-reads it);
- `credentials/admin-token`: the admin's bearer token, also in `kubeconfig`;
- `credentials/prometheus-token`: the bearer token Prometheus scrapes /metrics with; every
  service takes it as `--metrics-token-file` (the api: user `prometheus` in group
  `system:monitoring`, which may read /metrics and nothing else);
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
    metrics_token_file: Path

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
            # the nodes' console servers serve only this certificate (mutual TLS)
            "--console-cert",
            str(self.pki.handler_client_cert),
            "--console-key",
            str(self.pki.handler_client_key),
            "--console-ca",
            str(self.pki.ca),
            # Prometheus's token: user `prometheus`, group `system:monitoring`
            "--metrics-token-file",
            str(self.metrics_token_file),
        )

    def metrics_args(self) -> tuple[str, ...]:
        """The controller's and handlers' /metrics: HTTPS, Prometheus's token only."""
        return (
            "--metrics-token-file",
            str(self.metrics_token_file),
            "--metrics-tls-cert",
            str(self.pki.server_cert),
            "--metrics-tls-key",
            str(self.pki.server_key),
        )

    def console_args(self) -> tuple[str, ...]:
        """A handler's console server: the api's client certificate only."""
        return (
            "--console-tls-cert",
            str(self.pki.handler_server_cert),
            "--console-tls-key",
            str(self.pki.handler_server_key),
            "--console-client-ca",
            str(self.pki.ca),
        )


def private(path: Path, text: str) -> None:
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
    return AUTH_HEAD + yaml.safe_dump(doc, sort_keys=False)


AUTH_HEAD = (
    "# The api's users and role bindings (services/api/auth.py has the format).\n"
    "# Roles: kubevirt.io:view, kubevirt.io:edit, kubevirt.io:admin, kubevirt.io:migrate,\n"
    "# cluster-admin. Changes apply within a second, without a restart.\n"
)


def _token(path: Path) -> str:
    if path.exists():
        return path.read_text().strip()
    token = secrets.token_urlsafe(32)
    private(path, token + "\n")
    return token


def prepare(data_dir: Path) -> Secured:
    """The PKI, the auth file, the admin's and Prometheus's tokens (each created when
    missing)."""
    pki = pki_.ensure(data_dir / "pki")
    token = _token(data_dir / "credentials" / "admin-token")
    metrics_file = data_dir / "credentials" / "prometheus-token"
    _token(metrics_file)
    auth_file = data_dir / "auth.yaml"
    if not auth_file.exists():
        private(auth_file, auth_document(token))
    return Secured(pki, auth_file, token, metrics_file)


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
            private(creds / f"nats-{u.name}", u.password + "\n")
    tls = (pki.server_cert, pki.server_key) if pki else None
    return Bus(users, pki.ca if pki else None, tls)
