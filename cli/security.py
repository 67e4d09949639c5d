"""What `virtstream up` sets up to be secure by default, in its data dir:

- `pki/`: the CA, the api's (and nats-server's) certificate, an admin client certificate
  (`ops/pki.py`);
- `auth.yaml`: the api's users and role bindings (`services/api/auth.py`), written once
  with the admin's token; the operator edits it afterwards (the api re-reads it);
- `credentials/admin-token`: the admin's bearer token, also in `kubeconfig`.

Every file is the owner's alone (0600, the data dir 0700)."""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from pathlib import Path

import yaml

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
