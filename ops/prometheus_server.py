"""A Prometheus for the local cluster: Debian's `prometheus` binary (apt package
`prometheus`), on loopback, scraping what `virtstream up` started, with our alert rules.

`render_config(targets)` turns the template ops/prometheus/prometheus.yml into a config for
the given scrape targets; `PrometheusServer` runs one process; `start_for_cluster` does
both. `query` answers PromQL through the HTTP API (tests and `up` use it). With a
`BasicAuth` (ops/prometheus_auth.py, what `up` gives it) Prometheus answers nothing, its
health included, to a client without the user and its password."""

from __future__ import annotations

import contextlib
import json
import shutil
import signal
import subprocess
import time
import urllib.parse
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import yaml

from ops.nats_server import free_port
from ops.prometheus_auth import BasicAuth

PROMETHEUS_DIR = Path(__file__).resolve().parent / "prometheus"
TEMPLATE = PROMETHEUS_DIR / "prometheus.yml"
ALERTS = PROMETHEUS_DIR / "alerts.yml"
DEFAULT_PORT = 9090
SELF_JOB = "prometheus"


@dataclass(frozen=True)
class Target:
    """One /metrics endpoint: `job` groups endpoints of one kind (api, controller, handler)."""

    job: str
    url: str  # http://127.0.0.1:9101/metrics
    labels: dict[str, str] = field(default_factory=dict)


def target_for(service: str, metrics_url: str) -> Target:
    """The scrape target of one `virtstream up` service: its job is the service kind
    ("handler node-2" → job handler; the node shows in `instance` and in the metrics'
    own `node` labels, so no target label that would clash with them)."""
    return Target(service.split()[0], metrics_url)


def find_binary(name: str = "prometheus") -> str | None:
    return shutil.which(name) or next(
        (p for p in (f"/usr/bin/{name}", f"/usr/local/bin/{name}") if Path(p).exists()), None
    )


def render_config(
    targets: Sequence[Target],
    *,
    scrape_interval: str | None = None,
    rule_files: Sequence[Path] = (ALERTS,),
    self_url: str | None = None,
    ca_file: Path | None = None,
    token_file: Path | None = None,
    self_auth: BasicAuth | None = None,
) -> str:
    """The template with `scrape_configs` built from `targets` (one job per job name, one
    static config per distinct path/labels) and absolute `rule_files`. `self_url` adds a
    job scraping Prometheus itself; `ca_file` verifies https targets (the api's TLS);
    `token_file` is the bearer token every target but Prometheus itself is scraped with;
    `self_auth` the user Prometheus scrapes itself as."""
    cfg: dict[str, Any] = yaml.safe_load(TEMPLATE.read_text())
    if scrape_interval:
        cfg["global"]["scrape_interval"] = scrape_interval
        cfg["global"]["evaluation_interval"] = scrape_interval
        # a scrape must end before the next starts
        cfg["global"]["scrape_timeout"] = scrape_interval
    cfg["rule_files"] = [str(Path(p).resolve()) for p in rule_files]
    all_targets = list(targets)
    if self_url:
        all_targets.append(Target(SELF_JOB, self_url.rstrip("/") + "/metrics"))
    jobs: dict[tuple[str, str, str], dict[str, Any]] = {}
    for t in all_targets:
        u = urlsplit(t.url)
        path = u.path or "/metrics"
        job = jobs.setdefault(
            (t.job, u.scheme or "http", path),
            {"job_name": t.job, "scheme": u.scheme or "http", "metrics_path": path, "static": {}},
        )
        key = json.dumps(t.labels, sort_keys=True)
        group = job["static"].setdefault(key, {"targets": []})
        if t.labels:
            group["labels"] = dict(t.labels)
        group["targets"].append(u.netloc)
    scrape_configs = []
    names: dict[str, int] = {}
    for (name, _scheme, _path), job in jobs.items():
        n = names[name] = names.get(name, 0) + 1
        scrape_configs.append(
            {
                # job names must be unique; the `job` label stays the one asked for
                "job_name": name if n == 1 else f"{name}-{n}",
                "scheme": job["scheme"],
                "metrics_path": job["metrics_path"],
                "static_configs": list(job["static"].values()),
                **({} if n == 1 else {"relabel_configs": [_set_job(name)]}),
                **(
                    {"tls_config": {"ca_file": str(ca_file)}}
                    if ca_file and job["scheme"] == "https"
                    else {}
                ),
                **(
                    {"authorization": {"type": "Bearer", "credentials_file": str(token_file)}}
                    if token_file and name != SELF_JOB
                    else {}
                ),
                **(
                    {
                        "basic_auth": {
                            "username": self_auth.user,
                            "password_file": str(self_auth.password_file),
                        }
                    }
                    if self_auth and name == SELF_JOB
                    else {}
                ),
            }
        )
    cfg["scrape_configs"] = scrape_configs
    header = (
        "# Rendered by ops/prometheus_server.render_config from ops/prometheus/prometheus.yml\n"
    )
    return header + yaml.safe_dump(cfg, sort_keys=False)


def _set_job(name: str) -> dict[str, Any]:
    return {"target_label": "job", "replacement": name}


class PrometheusError(RuntimeError):
    pass


class PrometheusServer:
    """One Prometheus process on `host:port`; `start_sync()` returns once it is ready."""

    def __init__(
        self,
        config_path: Path | str,
        data_dir: Path | str,
        port: int = 0,
        *,
        host: str = "127.0.0.1",
        retention: str = "2d",
        log_file: Path | str | None = None,
        auth: BasicAuth | None = None,
    ) -> None:
        self.auth = auth
        self.config_path = Path(config_path)
        self.data_dir = Path(data_dir)
        self.host = host
        self.port = port or free_port(host)
        self.retention = retention
        self.log_file = Path(log_file) if log_file else self.data_dir / "prometheus.log"
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def command(self) -> list[str]:
        binary = find_binary()
        if binary is None:
            raise FileNotFoundError(
                "prometheus not found: install Debian's package (apt-get install prometheus)"
            )
        return [
            binary,
            f"--config.file={self.config_path}",
            f"--storage.tsdb.path={self.data_dir / 'tsdb'}",
            f"--storage.tsdb.retention.time={self.retention}",
            f"--web.listen-address={self.host}:{self.port}",
            "--web.enable-lifecycle",  # POST /-/reload after the targets change
            *([f"--web.config.file={self.auth.web_config}"] if self.auth else []),
        ]

    def start_sync(self, timeout: float = 30.0) -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        with open(self.log_file, "ab") as log:
            self.proc = subprocess.Popen(
                self.command(),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # Ctrl-C reaches the supervisor, which stops us
            )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise PrometheusError(
                    f"prometheus exited with {self.proc.returncode}; see {self.log_file}"
                )
            if self._get_status("/-/ready") == 200:
                return
            time.sleep(0.05)
        self.stop_sync()
        raise TimeoutError(f"prometheus not ready after {timeout}s; see {self.log_file}")

    def stop_sync(self, timeout: float = 10.0) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)  # clean shutdown: the TSDB head is flushed
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()

    def reload(self) -> None:
        """Re-read the config file (after rewriting it with new targets)."""
        req = urllib.request.Request(f"{self.url}/-/reload", method="POST", headers=self._auth())
        with urllib.request.urlopen(req, timeout=10) as r:
            r.read()

    # ------------------------------------------------------------------ HTTP API
    def _auth(self) -> dict[str, str]:
        return self.auth.header() if self.auth else {}

    def _get_status(self, path: str) -> int:
        req = urllib.request.Request(f"{self.url}{path}", headers=self._auth())
        try:
            with urllib.request.urlopen(req, timeout=1) as r:
                return int(r.status)
        except OSError:
            return 0

    def api(self, path: str, **params: str) -> Any:
        qs = urllib.parse.urlencode(params)
        url = f"{self.url}/api/v1/{path}" + (f"?{qs}" if qs else "")
        try:
            req = urllib.request.Request(url, headers=self._auth())
            with urllib.request.urlopen(req, timeout=10) as r:
                body = json.loads(r.read())
        except urllib.error.HTTPError as e:
            body = json.loads(e.read() or b"{}")
            raise PrometheusError(f"{path} {params}: {body.get('error', e)}") from e
        if body.get("status") != "success":
            raise PrometheusError(f"{path} {params}: {body.get('error')}")
        return body["data"]

    def query(self, expr: str) -> list[dict[str, Any]]:
        """An instant query's result: [{metric: {labels}, value: [ts, "v"]}] (a scalar or
        string result comes back as one element with empty labels)."""
        data = self.api("query", query=expr)
        if data["resultType"] in ("scalar", "string"):
            return [{"metric": {}, "value": data["result"]}]
        return list(data["result"])

    def active_targets(self) -> list[dict[str, Any]]:
        return list(self.api("targets", state="active")["activeTargets"])

    def wait_healthy(self, timeout: float = 30.0) -> list[dict[str, Any]]:
        """Wait until every configured target was scraped successfully at least once."""
        deadline = time.monotonic() + timeout
        targets: list[dict[str, Any]] = []
        while time.monotonic() < deadline:
            with contextlib.suppress(OSError, PrometheusError):
                targets = self.active_targets()
                if targets and all(t["health"] == "up" for t in targets):
                    return targets
            time.sleep(0.2)
        raise TimeoutError(f"targets not all up after {timeout}s: {targets}")


def start_for_cluster(
    targets: Sequence[Target],
    data_dir: Path | str,
    *,
    port: int = DEFAULT_PORT,
    scrape_interval: str = "5s",
    ca_file: Path | None = None,
    token_file: Path | None = None,
    auth: BasicAuth | None = None,
) -> PrometheusServer:
    """Write `data_dir/prometheus.yml` for `targets` (plus Prometheus itself) and start
    Prometheus on 127.0.0.1:`port` (0 = a free port), behind `auth` when given. The caller
    stops it (`stop_sync`)."""
    data = Path(data_dir)
    data.mkdir(parents=True, exist_ok=True)
    config = data / "prometheus.yml"
    server = PrometheusServer(config, data, port, auth=auth)
    config.write_text(
        render_config(
            targets,
            scrape_interval=scrape_interval,
            self_url=server.url,
            ca_file=ca_file,
            token_file=token_file,
            self_auth=auth,
        )
    )
    server.start_sync()
    return server
