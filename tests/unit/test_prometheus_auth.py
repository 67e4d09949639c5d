"""Prometheus's door under `up --metrics` (ops/prometheus_auth.py): one user whose password
is made once per data dir, Prometheus given only its bcrypt hash, its own scrape and
Grafana's data source sending it."""

from __future__ import annotations

from pathlib import Path

import bcrypt
import yaml

from ops import prometheus_auth
from ops.prometheus_server import PrometheusServer, Target, render_config


def test_the_password_is_made_once_and_prometheus_keeps_its_hash(tmp_path: Path) -> None:
    auth = prometheus_auth.ensure(tmp_path)
    assert auth.password_file.stat().st_mode & 0o777 == 0o600
    users = yaml.safe_load(auth.web_config.read_text())["basic_auth_users"]
    assert auth.password not in auth.web_config.read_text()
    assert bcrypt.checkpw(auth.password.encode(), users["virtstream"].encode())
    written = auth.web_config.read_text()
    again = prometheus_auth.ensure(tmp_path)  # a restart: the same password, no new hash
    assert again == auth and auth.web_config.read_text() == written
    auth.password_file.write_text("changed-by-the-operator\n")
    changed = prometheus_auth.ensure(tmp_path)
    hashed = yaml.safe_load(changed.web_config.read_text())["basic_auth_users"]["virtstream"]
    assert bcrypt.checkpw(b"changed-by-the-operator", hashed.encode())


def test_prometheus_asks_and_scrapes_itself_as_that_user(tmp_path: Path) -> None:
    auth = prometheus_auth.ensure(tmp_path)
    server = PrometheusServer(tmp_path / "p.yml", tmp_path, 9999, auth=auth)
    assert f"--web.config.file={auth.web_config}" in server.command()
    targets = [Target("api", "https://127.0.0.1:1/metrics")]
    cfg = yaml.safe_load(render_config(targets, self_url=server.url, self_auth=auth))
    jobs = {j["job_name"]: j for j in cfg["scrape_configs"]}
    assert jobs["prometheus"]["basic_auth"] == {
        "username": "virtstream",
        "password_file": str(auth.password_file),
    }
    assert "basic_auth" not in jobs["api"]


def test_grafanas_data_source_gets_this_runs_address_and_password(tmp_path: Path) -> None:
    shipped = yaml.safe_load(prometheus_auth.SHIPPED_DATASOURCE.read_text())["datasources"][0]
    assert shipped["basicAuth"] is True
    assert shipped["secureJsonData"]["basicAuthPassword"] == "$VIRTSTREAM_PROMETHEUS_PASSWORD"
    auth = prometheus_auth.ensure(tmp_path)
    path = prometheus_auth.grafana_datasource(tmp_path, "http://127.0.0.1:19090", auth)
    source = yaml.safe_load(path.read_text())["datasources"][0]
    assert source["url"] == "http://127.0.0.1:19090"
    assert (source["basicAuthUser"], source["secureJsonData"]["basicAuthPassword"]) == (
        "virtstream",
        auth.password,
    )
    assert path.stat().st_mode & 0o777 == 0o600
