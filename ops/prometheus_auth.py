"""The door of the Prometheus `virtstream up --metrics` runs: basic auth, for every path.

Prometheus answers its UI and its query API to whoever reaches its port; on a shared
machine that is every local user. Its web configuration (`--web.config.file`) takes users
with bcrypt'd passwords (`basic_auth_users`); Prometheus then refuses anything without
them, its own health paths included. One user, `virtstream`, with a password made once
per data dir:

- `credentials/prometheus-password`: the password in clear (0600), read by the api's
  Prometheus proxy (`--prometheus-password-file`), by Prometheus itself (it scrapes its
  own /metrics) and by Grafana (the provisioning `up` renders, or the shipped one's
  `$VIRTSTREAM_PROMETHEUS_PASSWORD`);
- `prometheus/web.yml`: the bcrypt hash, which is all Prometheus keeps;
- `grafana/provisioning/datasources/prometheus.yaml`: the shipped data source
  (ops/grafana/provisioning/) with this run's address and the password filled in."""

from __future__ import annotations

import base64
import secrets
from dataclasses import dataclass
from pathlib import Path

import bcrypt
import yaml

USER = "virtstream"
PASSWORD_FILE = Path("credentials") / "prometheus-password"
WEB_CONFIG = Path("prometheus") / "web.yml"
GRAFANA_DATASOURCE = Path("grafana") / "provisioning" / "datasources" / "prometheus.yaml"
SHIPPED_DATASOURCE = (
    Path(__file__).resolve().parent / "grafana" / "provisioning" / "datasources" / "prometheus.yaml"
)
PASSWORD_VARIABLE = "$VIRTSTREAM_PROMETHEUS_PASSWORD"
# the password is 32 random bytes (no dictionary to try), and Prometheus keeps the result
# of a check: bcrypt's default cost of 12 would only slow each `up` down
BCRYPT_ROUNDS = 10


@dataclass(frozen=True)
class BasicAuth:
    """Who may talk to Prometheus: the user, its password, and where both are kept."""

    user: str
    password: str
    password_file: Path
    web_config: Path

    def header(self) -> dict[str, str]:
        raw = f"{self.user}:{self.password}".encode()
        return {"Authorization": f"Basic {base64.b64encode(raw).decode()}"}


def _private(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    path.touch(mode=0o600, exist_ok=True)
    path.chmod(0o600)
    path.write_text(text)


def web_config(user: str, password: str) -> str:
    """Prometheus's `--web.config.file`: `user` with `password` bcrypt'd."""
    hashed = bcrypt.hashpw(password.encode(), bcrypt.gensalt(BCRYPT_ROUNDS)).decode()
    return (
        "# Rendered by ops/prometheus_auth.py: Prometheus answers nothing without this user\n"
        + yaml.safe_dump({"basic_auth_users": {user: hashed}}, sort_keys=False)
    )


def ensure(data_dir: Path) -> BasicAuth:
    """The password (made when missing, kept across runs) and the web config for it."""
    password_file = data_dir / PASSWORD_FILE
    if password_file.exists():
        password = password_file.read_text().strip()
    else:
        password = secrets.token_urlsafe(32)
        _private(password_file, password + "\n")
    config = data_dir / WEB_CONFIG
    if not _matches(config, password):
        _private(config, web_config(USER, password))
    return BasicAuth(USER, password, password_file, config)


def _matches(config: Path, password: str) -> bool:
    try:
        users = (yaml.safe_load(config.read_text()) or {}).get("basic_auth_users") or {}
        hashed = str(users.get(USER, ""))
        return bool(hashed) and bcrypt.checkpw(password.encode(), hashed.encode())
    except (OSError, ValueError, yaml.YAMLError):
        return False


def grafana_datasource(data_dir: Path, url: str, auth: BasicAuth) -> Path:
    """The shipped data source provisioning with this run's Prometheus address and the
    password written in (0600, in the data dir: Grafana's provisioning path may point
    there, or the file is copied to /etc/grafana/provisioning/datasources/)."""
    doc = yaml.safe_load(SHIPPED_DATASOURCE.read_text())
    for source in doc["datasources"]:
        source["url"] = url
        source["basicAuthUser"] = auth.user
        source["secureJsonData"]["basicAuthPassword"] = auth.password
    path = data_dir / GRAFANA_DATASOURCE
    _private(path, "# Rendered by `virtstream up --metrics` (ops/prometheus_auth.py)\n"
             + yaml.safe_dump(doc, sort_keys=False))  # fmt: skip
    return path


def api_args(auth: BasicAuth) -> tuple[str, ...]:
    """The api's flags for its Prometheus proxy's credentials."""
    return ("--prometheus-user", auth.user, "--prometheus-password-file", str(auth.password_file))
