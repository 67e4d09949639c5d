"""Observability under `virtstream up --metrics`: the real services (api, controller, three
handlers) run a real workload, the Prometheus `up` started scrapes them, and

- every query of every Grafana panel returns at least one series (a failure names the
  dashboard, the panel and the query), every dashboard variable has values;
- every metric a panel, a variable, an alert rule or the web console's charts name is one
  a service exposes on its /metrics (read directly, with Prometheus's token);
- the alert rules load in that Prometheus and evaluate without errors;
- a handler stopped with SIGSTOP (the supervisor would restart a killed one) makes the
  node-unresponsive alert's expression name its node.

The workload, through the KubeVirt REST API: VMs Running, one paused, one stopped, one
Unschedulable (1 Ti of memory), a standalone VMI; a migration that succeeds, one that
fails (a policy with a 1 s completion timeout), one kept running (1 KiB/s) while the panels
are checked and then cancelled with DELETE; an undecodable message on a VM subject that the
controller dead-letters.

tests/integration/test_observability_prometheus.py checks the same dashboards against an
in-process stack (faster, finer assertions); its helpers are reused here."""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
import ssl
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import msgspec
import nats
import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from cli.up import live_launchers
from ops.nats_server import free_port
from ops.prometheus_server import ALERTS
from ops.supervisor import importable, stop_recorded
from tests.integration.polling import up_client
from tests.integration.test_observability_prometheus import (
    alert_expr,
    concrete,
    needs_prometheus,
    panel_queries,
    variable_queries,
)
from tests.integration.test_up_cluster import _handler_pid

REPO = Path(__file__).resolve().parents[2]
NS = "default"
V1 = f"/apis/kubevirt.io/v1/namespaces/{NS}"
VMS = f"{V1}/virtualmachines"
VMIS = f"{V1}/virtualmachineinstances"
MIGRATIONS = f"{V1}/virtualmachineinstancemigrations"
SUB = f"/apis/subresources.kubevirt.io/v1/namespaces/{NS}"
POLICIES = "/apis/migrations.kubevirt.io/v1alpha1/migrationpolicies"

NODES = 3
# short, but well above the handlers' heartbeat interval (up: a quarter of the timeout),
# so a loaded machine does not flap nodes
NODE_TIMEOUT = 8.0
STOPPED_NODE = "node-3"

pytestmark = [
    needs_prometheus,
    pytest.mark.skipif(
        not all(importable(m) for m in ("services.api", "services.controller", "services.handler")),
        reason="api, controller and handler are needed",
    ),
]


# ------------------------------------------------------------------------ helpers
def until(probe: Callable[[], Any], what: str, timeout: float = 30.0) -> Any:
    """Poll `probe` until it returns something truthy; HTTP errors count as not yet."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        try:
            last = probe()
        except (httpx.HTTPError, KeyError, ValueError) as e:
            last = e
        if last and not isinstance(last, Exception):
            return last
        time.sleep(0.2)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}: {last!r}")


def vm(name: str, memory: str = "64Mi", labels: dict[str, str] | None = None) -> dict[str, Any]:
    template: dict[str, Any] = {
        "spec": {
            "domain": {"memory": {"guest": memory}, "devices": {}},
            "terminationGracePeriodSeconds": 0,
        }
    }
    if labels:
        template["metadata"] = {"labels": labels}
    return {
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachine",
        "metadata": {"name": name, "namespace": NS},
        "spec": {"runStrategy": "Always", "template": template},
    }


def policy(name: str, speed: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "migrations.kubevirt.io/v1alpha1",
        "kind": "MigrationPolicy",
        "metadata": {"name": name},
        "spec": {**spec, "selectors": {"virtualMachineInstanceSelector": {"speed": speed}}},
    }


def migration(name: str, vmi: str) -> dict[str, Any]:
    return {
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachineInstanceMigration",
        "metadata": {"name": name, "namespace": NS},
        "spec": {"vmiName": vmi},
    }


def get(http: httpx.Client, path: str) -> dict[str, Any] | None:
    r = http.get(path)
    if r.status_code == 404:
        return None
    r.raise_for_status()
    body: dict[str, Any] = r.json()
    return body


def phase(http: httpx.Client, path: str) -> str | None:
    obj = get(http, path)
    return None if obj is None else (obj.get("status") or {}).get("phase")


def created(r: httpx.Response) -> None:
    assert r.is_success, f"{r.request.method} {r.request.url}: {r.status_code} {r.text}"


async def publish_undecodable(nats_url: str, subject: str) -> None:
    nc = await nats.connect(nats_url)
    try:
        await nc.jetstream().publish(subject, b"this is not an event")
    finally:
        await nc.close()


class Prometheus:
    def __init__(self, url: str, password: str) -> None:
        # Prometheus answers its own user only (ops/prometheus_auth.py)
        self.http = httpx.Client(base_url=url, auth=("virtstream", password), timeout=10)

    def api(self, path: str, **params: str) -> Any:
        body = self.http.get(f"/api/v1/{path}", params=params).json()
        assert body.get("status") == "success", f"{path} {params}: {body}"
        return body["data"]

    def query(self, expr: str) -> list[dict[str, Any]]:
        return list(self.api("query", query=expr)["result"])


def grafana_expr(expr: str) -> str:
    """A panel query as Grafana sends it with every variable at All (the in-process test's
    `concrete`, plus `$__interval`, which it would turn into a regex)."""
    return concrete(expr.replace("$__interval", "5s"))


# ------------------------------------------------------------------------ the up
class Up:
    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir
        self.api_port = free_port()
        self.nats_port = free_port()
        self.prom_port = free_port()
        self.out = data_dir / "up.out"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        with open(self.out, "wb") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "cli.main", "up", "--data-dir", str(self.data_dir),
                 "--port", str(self.api_port), "--nats-port", str(self.nats_port),
                 "--nodes", str(NODES), "--metrics", "--prometheus-port", str(self.prom_port),
                 "--scrape-interval", "1s", "--node-timeout", str(NODE_TIMEOUT)],
                cwd=REPO, stdout=out, stderr=subprocess.STDOUT,
                env={**os.environ, "COLUMNS": "120"},
            )  # fmt: skip

    def output(self) -> str:
        return self.out.read_text(errors="replace")[-4000:]

    def ctrl_c(self, timeout: float = 90.0) -> int:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGINT)
        return self.proc.wait(timeout)

    def cleanup(self) -> None:
        """After a failure: whatever the up left behind, by pid."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        stop_recorded(self.data_dir / "up.json")
        for pid in [*live_launchers(self.data_dir / "run"), *self.leftovers()]:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)
                os.kill(pid, signal.SIGKILL)

    def leftovers(self) -> list[int]:
        """Processes whose command line names this data dir (services, Prometheus)."""
        pids = []
        for proc in Path("/proc").iterdir():
            if not proc.name.isdigit() or int(proc.name) == os.getpid():
                continue
            try:
                cmd = (proc / "cmdline").read_bytes()
            except OSError:
                continue
            if str(self.data_dir).encode() in cmd:
                pids.append(int(proc.name))
        return pids


@pytest.fixture
def up() -> Iterator[Up]:
    # short: launcher sockets live under <data-dir>/run (107-byte unix socket limit)
    with tempfile.TemporaryDirectory(prefix="vs-obs-") as d:
        u = Up(Path(d))
        try:
            yield u
        finally:
            u.cleanup()


# ------------------------------------------------------------------------ the test
def test_dashboards_alerts_and_unresponsive_node_under_up(up: Up) -> None:
    up.start()
    api = up_client(up.api_port, timeout=10)
    password = up.data_dir / "credentials" / "prometheus-password"
    until(password.exists, f"Prometheus's password\n{up.output()}", 60)
    prom = Prometheus(f"http://127.0.0.1:{up.prom_port}", password.read_text().strip())
    stopped_pid: int | None = None
    try:
        until(lambda: api.get(VMS).is_success, f"the api\n{up.output()}", timeout=60)
        until(lambda: prom.http.get("/-/ready").is_success, f"Prometheus\n{up.output()}", 60)
        workload(api, up)
        check_metric_names(up)
        check_panels(prom)
        check_rules(prom)

        # the slow migration was there for the data panels: cancel it now
        assert api.delete(f"{MIGRATIONS}/mig-slow").is_success
        until(
            lambda: phase(api, f"{MIGRATIONS}/mig-slow") in (None, "Failed"),
            "the cancelled migration to end",
        )
        assert phase(api, f"{VMIS}/vm-slow") == "Running"

        # a stopped handler: its heartbeats stop, the alert's expression names its node
        expr = alert_expr("VirtstreamNodeUnresponsive")

        def unresponsive() -> set[str]:
            return {s["metric"].get("node", "") for s in prom.query(expr)}

        until(lambda: not unresponsive(), "every node responsive before a handler stops")
        stopped_pid = _handler_pid(up.data_dir, STOPPED_NODE)
        assert stopped_pid is not None, f"no handler process for {STOPPED_NODE}"
        os.kill(stopped_pid, signal.SIGSTOP)
        fired = until(unresponsive, "the node-unresponsive expression", NODE_TIMEOUT + 30)
        assert fired == {STOPPED_NODE}
        os.kill(stopped_pid, signal.SIGCONT)
        stopped_pid = None
    finally:
        if stopped_pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(stopped_pid, signal.SIGCONT)
        api.close()
        prom.http.close()
    code = up.ctrl_c()
    assert code == 0, up.output()
    assert not live_launchers(up.data_dir / "run"), "Ctrl-C left launchers running"


def workload(api: httpx.Client, up: Up) -> None:
    created(api.post(POLICIES, json=policy("slow", "slow", bandwidthPerMigration="1Ki")))
    created(
        api.post(
            POLICIES,
            json=policy("doomed", "doomed", bandwidthPerMigration="1Mi", completionTimeoutPerGiB=1),
        )
    )
    running = ["vm-a", "vm-b", "vm-mig", "vm-paused", "vm-stopped"]
    for name in running:
        created(api.post(VMS, json=vm(name)))
    created(api.post(VMS, json=vm("vm-slow", labels={"speed": "slow"})))
    created(api.post(VMS, json=vm("vm-doomed", labels={"speed": "doomed"})))
    created(api.post(VMS, json=vm("vm-huge", memory="1Ti")))  # no node has room
    created(
        api.post(
            VMIS,
            json={
                "apiVersion": "kubevirt.io/v1",
                "kind": "VirtualMachineInstance",
                "metadata": {"name": "vmi-solo", "namespace": NS},
                "spec": vm("x")["spec"]["template"]["spec"],
            },
        )
    )
    everything = [*running, "vm-slow", "vm-doomed", "vmi-solo"]
    until(
        lambda: all(phase(api, f"{VMIS}/{n}") == "Running" for n in everything),
        "every VMI Running",
        timeout=60,
    )

    def unschedulable() -> bool:
        status = (get(api, f"{VMS}/vm-huge") or {}).get("status") or {}
        return status.get("printableStatus") == "ErrorUnschedulable"

    until(unschedulable, "vm-huge ErrorUnschedulable")

    created(api.put(f"{SUB}/virtualmachineinstances/vm-paused/pause", json={}))
    created(api.put(f"{SUB}/virtualmachines/vm-stopped/stop", json={}))

    for name, vmi in (("mig-ok", "vm-mig"), ("mig-doomed", "vm-doomed"), ("mig-slow", "vm-slow")):
        created(api.post(MIGRATIONS, json=migration(name, vmi)))

    def paused() -> bool:
        conds = ((get(api, f"{VMIS}/vm-paused") or {}).get("status") or {}).get("conditions")
        return any(c.get("type") == "Paused" and c.get("status") == "True" for c in conds or [])

    until(paused, "vm-paused Paused")
    until(lambda: get(api, f"{VMIS}/vm-stopped") is None, "vm-stopped's VMI gone")
    until(lambda: phase(api, f"{MIGRATIONS}/mig-ok") == "Succeeded", "mig-ok Succeeded", 60)
    until(lambda: phase(api, f"{MIGRATIONS}/mig-doomed") == "Failed", "mig-doomed Failed", 60)
    until(lambda: phase(api, f"{MIGRATIONS}/mig-slow") == "Running", "mig-slow Running", 60)

    # the controller consumes virt.vm.>: a message it cannot decode goes to the dead letters
    # (published by the admin NATS user, whose password `up` keeps in the data dir)
    password = (up.data_dir / "credentials" / "nats-admin").read_text().strip()
    nats_url = f"nats://admin:{password}@127.0.0.1:{up.nats_port}"
    asyncio.run(publish_undecodable(nats_url, f"virt.vm.{NS}.poison.X._"))


# the project's metrics (KubeVirt's names and its own); `up` is Prometheus's, per target
METRIC = re.compile(r"\b(?:kubevirt|virtstream)_[A-Za-z0-9_]+\b")
PROMETHEUS_OWN = {"up"}
CONSOLE_CHARTS = REPO / "services" / "api" / "ui" / "js" / "metrics.js"


def queried_metrics() -> dict[str, set[str]]:
    """Every metric name a query names, by where it is asked (dashboard and panel,
    variable, alert rule, the console's charts)."""
    out: dict[str, set[str]] = {}
    for board, panel, expr in panel_queries():
        names = set(METRIC.findall(expr)) | {w for w in PROMETHEUS_OWN if f"{w}{{" in expr}
        assert names, f"{board} / {panel}: no metric found in {expr}"
        out.setdefault(f"{board} / {panel}", set()).update(names)
    for board, var, metric, _ in variable_queries():
        out[f"{board} / ${var}"] = {metric}
    for group in yaml.safe_load(ALERTS.read_text())["groups"]:
        for rule in group["rules"]:
            name = rule.get("alert") or rule.get("record")
            out[f"alert {name}"] = set(METRIC.findall(str(rule["expr"])))
    out["web console charts"] = set(METRIC.findall(CONSOLE_CHARTS.read_text()))
    return out


def exposed_metrics(up: Up) -> set[str]:
    """The metric names (families and their samples: _total, _bucket, ...) the api, the
    controller and the handlers expose on /metrics."""
    ca = ssl.create_default_context(cafile=up.data_dir / "pki" / "ca.crt")
    token = (up.data_dir / "credentials" / "prometheus-token").read_text().strip()
    urls = [f"https://127.0.0.1:{up.api_port}/metrics"]
    for r in msgspec.json.decode((up.data_dir / "up.json").read_bytes()).values():
        if "--metrics-port" in r["argv"]:
            port = r["argv"][r["argv"].index("--metrics-port") + 1]
            urls.append(f"https://127.0.0.1:{port}/metrics")
    assert len(urls) == 3 + NODES, urls  # the api, the controller, the upkeep, the handlers
    names: set[str] = set()
    with httpx.Client(verify=ca, headers={"Authorization": f"Bearer {token}"}) as http:
        for url in urls:
            r = http.get(url)
            assert r.status_code == 200, f"{url}: {r.status_code}"
            for family in text_string_to_metric_families(r.text):
                names.add(family.name)
                names.update(s.name for s in family.samples)
    return names


def check_metric_names(up: Up) -> None:
    exposed = exposed_metrics(up) | PROMETHEUS_OWN
    missing = {
        where: sorted(names - exposed)
        for where, names in queried_metrics().items()
        if names - exposed
    }
    assert not missing, "queries of metrics no service exposes:\n" + "\n".join(
        f"{where}: {', '.join(names)}" for where, names in sorted(missing.items())
    )


def check_panels(prom: Prometheus) -> None:
    queries = panel_queries()
    assert len(queries) > 20
    targets = until(
        lambda: (r := prom.query('up{job=~"api|controller|handler"} == 1')) and len(r) == 2 + NODES,
        "every service scraped",
    )
    assert targets

    def empty_panels() -> list[str]:
        return [
            f"{board} / {panel}: {expr}"
            for board, panel, expr in queries
            if not prom.query(grafana_expr(expr))
        ]

    # each series shows up within a scrape or two (rate() needs two): poll, don't race
    deadline = time.monotonic() + 30
    empty = empty_panels()
    while empty and time.monotonic() < deadline:
        time.sleep(0.5)
        empty = empty_panels()
    assert not empty, "panels with no series:\n" + "\n".join(empty)

    for board, var, metric, label in variable_queries():
        values = prom.api(f"label/{label}/values", **{"match[]": metric})
        assert values, f"{board}: variable ${var} has no values ({label} of {metric})"
    nodes = prom.api("label/node/values", **{"match[]": "virtstream_node_capacity_cpu_cores"})
    assert set(nodes) == {f"node-{i}" for i in range(1, NODES + 1)}

    # the workload is what the panels show, not just any series
    expectations = {
        'kubevirt_vmi_info{phase="running"}': 7,  # 6 VMs' VMIs (one paused) + vmi-solo
        'kubevirt_vm_info{status=~"(?i)stopped"}': 1,
        'kubevirt_vm_info{status=~"(?i)paused"}': 1,
        'kubevirt_vm_info{status=~"(?i)errorunschedulable"}': 1,
        "kubevirt_vmi_migration_succeeded == 1": 1,
        "kubevirt_vmi_migration_failed == 1": 1,
        'kubevirt_vmi_migration_data_remaining_bytes{name="vm-slow"}': 1,
        'virtstream_dead_letters_total{service="virt-controller"} >= 1': 1,
    }
    for expr, n in expectations.items():

        def count_is(expr: str = expr, n: int = n) -> bool:
            return len(prom.query(expr)) == n

        until(count_is, f"{n} series of {expr}", 20)


def check_rules(prom: Prometheus) -> None:
    want = {g["name"]: len(g["rules"]) for g in yaml.safe_load(ALERTS.read_text())["groups"]}

    def evaluated() -> dict[str, Any] | None:
        groups = {g["name"]: g for g in prom.api("rules")["groups"]}
        rules = [r for g in groups.values() for r in g["rules"]]
        if any(r.get("health") == "unknown" for r in rules):
            return None  # not evaluated yet
        return groups

    groups = until(evaluated, "every alert rule evaluated")
    assert {n: len(g["rules"]) for n, g in groups.items()} == want
    broken = [
        f"{g['name']} / {r['name']}: {r.get('lastError')}"
        for g in groups.values()
        for r in g["rules"]
        if r.get("health") != "ok" or r.get("lastError")
    ]
    assert not broken, "alert rules with evaluation errors:\n" + "\n".join(broken)
