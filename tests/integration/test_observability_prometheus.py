"""Observability end to end: a real Prometheus scrapes real /metrics endpoints, and every
query of every Grafana panel returns at least one series; the alert rules load and pass
their promtool unit tests; a stopped heartbeat fires the node-unresponsive expression.

What runs (in this process, against the session's nats-server):
- "api" job: a projection `Cluster` folded from the stream (as the api's runner does) with
  `ProjectionMetrics`, served by prometheus_client on its own registry;
- "controller" job: a `ServiceShell` running a small choreography (scheduler + node agent
  for VMIs named wave-*, one poison VMI that is dead-lettered) and the heartbeat ages the
  controller exports, served by the runtime's `HealthServer`;
- heartbeats put into a KV bucket per node and watched back, as handler and controller do.
The workload: events appended for VMs, VMIs running on two nodes, migrations running /
succeeded / failed / pending, a VMI stuck in Scheduling, a VMI deleted; then, once
Prometheus scrapes, a second wave the choreography drives to Running (so rates move).

When `virtstream up` runs the real services this test can scrape those instead: the
dashboards and rules do not change, only the targets."""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import subprocess
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

import pytest
import yaml
from nats.js.api import StorageType
from prometheus_client import CollectorRegistry, start_http_server

from events import subjects
from events.catalog import (
    DomainStarted,
    DomainStopped,
    Event,
    LauncherStarted,
    PodScheduled,
    StopReason,
    VMICreated,
    VMIDeleteRequested,
)
from events.envelope import Context, Decision, Stored
from events.meta import Kind
from eventstore import heartbeats
from eventstore.jetstream import JetStreamStore
from ops.nats_server import free_port
from ops.prometheus_server import (
    ALERTS,
    PROMETHEUS_DIR,
    PrometheusServer,
    Target,
    find_binary,
    render_config,
    start_for_cluster,
)
from projections.cluster import Cluster, key
from readside.metrics import PhaseHistograms, ProjectionMetrics
from services.runtime import metrics as runtime_metrics
from services.runtime.http import HealthServer
from services.runtime.shell import ServiceShell
from tests.factories import meta
from tests.unit.test_metrics_projections import vmi_manifest, workload_events

REPO = Path(__file__).resolve().parents[2]
DASHBOARDS = sorted((REPO / "ops" / "grafana" / "dashboards").glob("*.json"))
NS = "default"
HEARTBEAT_TIMEOUT = 2.0  # the test's node timeout, exported like the controller's

needs_prometheus = pytest.mark.skipif(
    find_binary("prometheus") is None,
    reason="prometheus not installed (Debian package `prometheus`: apt-get install prometheus)",
)
needs_promtool = pytest.mark.skipif(
    find_binary("promtool") is None,
    reason="promtool not installed (it ships in Debian's `prometheus` package)",
)


# ------------------------------------------------------------------ the dashboards
def panel_queries() -> list[tuple[str, str, str]]:
    """(dashboard title, panel title, expr) for every target of every panel."""
    out = []
    for path in DASHBOARDS:
        board = json.loads(path.read_text())
        for panel in board["panels"]:
            for target in panel.get("targets", []):
                out.append((board["title"], panel["title"], target["expr"]))
    return out


def variable_queries() -> list[tuple[str, str, str, str]]:
    """(dashboard, variable, metric, label) for every label_values(metric, label) variable."""
    out = []
    for path in DASHBOARDS:
        board = json.loads(path.read_text())
        for var in board["templating"]["list"]:
            if var["type"] != "query":
                continue
            m = re.fullmatch(r"label_values\((\w+),\s*(\w+)\)", var["definition"])
            assert m, f"{board['title']}: variable {var['name']} is not label_values(m, l)"
            out.append((board["title"], var["name"], m.group(1), m.group(2)))
    return out


def concrete(expr: str) -> str:
    """A panel query as Grafana would send it with every variable at "All"."""
    expr = expr.replace("$__rate_interval", "1m")
    return re.sub(r"\$\{?(\w+)\}?", ".*", expr)


def alert_expr(name: str) -> str:
    rules = yaml.safe_load(ALERTS.read_text())
    for group in rules["groups"]:
        for rule in group["rules"]:
            if rule.get("alert") == name:
                return str(rule["expr"])
    raise KeyError(name)


# --------------------------------------------------------------- the choreography
class MiniChoreography:
    """Scheduler and node agent in one reactor, for VMIs named wave-*: Pending →
    PodScheduled → LauncherStarted → DomainStarted, deletion → DomainStopped. Decides from
    the folded Cluster (level-triggered). A VMI named wave-poison makes it raise."""

    name = "obs-choreography"
    node = "node-1"

    def filters(self) -> Sequence[str]:
        return [subjects.kind_filter(Kind.VMI)]

    def initial_state(self) -> Cluster:
        return Cluster()

    def holds(self, state: Cluster, key: str) -> bool:
        return True  # keeps every version

    def evolve(self, state: Cluster, stored: Stored) -> Cluster:
        state.apply(stored)
        return state

    def react(self, state: Cluster, stored: Stored, ctx: Context) -> Sequence[Decision]:
        agg = stored.event.meta.aggregate
        if not agg.name.startswith("wave-"):
            return []
        if agg.name == "wave-poison":
            raise ValueError("this VMI cannot be handled")
        vmi = state.vmis.get(key(agg.namespace, agg.name))
        if vmi is None or vmi.final:
            return []
        node = self.node
        m = ctx.meta(agg, node=node)
        ev: Event
        if vmi.deletion_requested_at is not None and vmi.phase == "Running":
            ev = DomainStopped(meta=m, reason=StopReason.SHUTDOWN)
        elif vmi.phase == "Pending":
            ev = PodScheduled(
                meta=m,
                node=node,
                pod_name=f"virt-launcher-{vmi.name}",
                pod_uid=ctx.uid("pod"),
                manifest=vmi.manifest,
            )
        elif vmi.phase == "Scheduling":
            ev = LauncherStarted(meta=m, node=node, pod_uid=vmi.pod_uid, pid=1)
        elif vmi.phase == "Scheduled":
            ev = DomainStarted(meta=m, node=node, domain=f"{vmi.namespace}_{vmi.name}")
        else:
            return []
        return [Decision(ev)]

    def tick(self, state: Cluster, ctx: Context) -> Sequence[Decision]:
        return []


# ------------------------------------------------------------------------ helpers
async def eventually(check: Callable[[], Awaitable[Any]], what: str, timeout: float = 20.0) -> Any:
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = await check()
        if last:
            return last
        await asyncio.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}: {last!r}")


async def fold_forever(store: JetStreamStore, cluster: Cluster, metrics: ProjectionMetrics) -> None:
    async for stored in store.replay(follow=True):
        metrics.observe(stored, cluster.apply(stored))


class Heartbeats:
    """Per-node putters (the handlers) and a watcher recording what it sees (the
    controller), through a real KV bucket."""

    def __init__(self, store: JetStreamStore) -> None:
        self.store = store
        self.bucket = f"obs-hb-{uuid.uuid4().hex[:8]}"
        self.putters: dict[str, asyncio.Task[None]] = {}
        self.watcher: asyncio.Task[None] | None = None

    async def start(self, nodes: Sequence[str]) -> None:
        kv = await heartbeats.ensure_bucket(
            self.store.js, self.bucket, ttl=60, storage=StorageType.MEMORY
        )
        runtime_metrics.HEARTBEATS.timeout = HEARTBEAT_TIMEOUT
        # the collector is process-wide: forget nodes other tests' controllers recorded
        runtime_metrics.HEARTBEATS.seen.clear()

        async def put(node: str) -> None:
            while True:
                await heartbeats.put(kv, node, time.time())
                await asyncio.sleep(0.2)

        async def watch() -> None:
            async for node, at in heartbeats.watch(kv):
                runtime_metrics.HEARTBEATS.record(node, at)

        self.watcher = asyncio.create_task(watch())
        for node in nodes:
            self.putters[node] = asyncio.create_task(put(node))

    async def stop_node(self, node: str) -> None:
        await cancel(self.putters.pop(node))

    async def stop(self) -> None:
        for task in [*self.putters.values(), self.watcher]:
            await cancel(task)
        for node in ("node-1", "node-2"):
            runtime_metrics.HEARTBEATS.forget(node)
        runtime_metrics.HEARTBEATS.timeout = None
        with contextlib.suppress(Exception):
            await self.store.js.delete_key_value(self.bucket)


async def cancel(task: asyncio.Task[Any] | None) -> None:
    if task is None:
        return
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError, Exception):
        await asyncio.wait_for(task, 10)  # re-cancels if the first cancel was swallowed


class Stack:
    """Endpoints, workload and Prometheus for one test."""

    def __init__(self, store: JetStreamStore, data_dir: Path) -> None:
        self.store = store
        self.data_dir = data_dir
        self.cluster = Cluster()
        self.registry = CollectorRegistry()
        self.metrics = ProjectionMetrics(
            self.cluster, histograms=PhaseHistograms(self.registry)
        ).register(self.registry)
        self.heartbeats = Heartbeats(store)
        self.tasks: list[asyncio.Task[Any]] = []
        self.shell: ServiceShell[Cluster] | None = None
        self.prometheus: PrometheusServer | None = None
        self._closers: list[Callable[[], Awaitable[None]]] = []

    async def start(self) -> PrometheusServer:
        for ev in workload_events(time.time() - 120):
            await self.store.append(ev)
        self.tasks.append(asyncio.create_task(fold_forever(self.store, self.cluster, self.metrics)))
        self.shell = ServiceShell(MiniChoreography(), self.store, tick_interval=0.2)
        self.tasks.append(asyncio.create_task(self.shell.run()))
        await self.heartbeats.start(["node-1", "node-2"])

        api_port = free_port()
        httpd, _thread = start_http_server(api_port, addr="127.0.0.1", registry=self.registry)

        async def close_httpd() -> None:
            httpd.shutdown()
            httpd.server_close()

        self._closers.append(close_httpd)
        health = HealthServer("127.0.0.1", 0, lambda: True)
        controller_port = await health.start()
        self._closers.append(health.stop)

        targets = [
            Target("api", f"http://127.0.0.1:{api_port}/metrics"),
            Target("controller", f"http://127.0.0.1:{controller_port}/metrics"),
        ]
        self.prometheus = await asyncio.to_thread(
            start_for_cluster, targets, self.data_dir, port=0, scrape_interval="1s"
        )
        await asyncio.to_thread(self.prometheus.wait_healthy, 30.0)
        return self.prometheus

    async def query(self, expr: str) -> list[dict[str, Any]]:
        assert self.prometheus is not None
        return await asyncio.to_thread(self.prometheus.query, expr)

    async def second_wave(self) -> None:
        """New VMIs the choreography runs, one it dead-letters, one deleted again: the
        counters and histograms move while Prometheus watches."""
        await eventually(
            lambda: self.query('count_over_time(up{job="api"}[1m]) >= 3'),
            "three scrapes of the api job",
        )
        names = ["wave-1", "wave-2", "wave-3", "wave-poison"]
        for name in names:
            await self.store.append(
                VMICreated(meta=meta(Kind.VMI, name, NS), manifest=vmi_manifest(name))
            )

        async def running() -> bool:
            phases = [self.cluster.vmis.get(f"{NS}/{n}") for n in names[:3]]
            return all(v is not None and v.phase == "Running" for v in phases)

        await eventually(running, "the second wave Running")
        await self.store.append(
            VMIDeleteRequested(meta=meta(Kind.VMI, "wave-1", NS, node="node-1"))
        )

        async def deleted() -> bool:
            vmi = self.cluster.vmis.get(f"{NS}/wave-1")
            return vmi is not None and vmi.phase == "Succeeded"

        await eventually(deleted, "wave-1 Succeeded after its deletion")

    async def stop(self) -> None:
        if self.prometheus is not None:
            await asyncio.to_thread(self.prometheus.stop_sync)
        if self.shell is not None:
            self.shell.stop()
        for task in self.tasks:
            await cancel(task)
        await self.heartbeats.stop()
        for close in reversed(self._closers):
            await close()
        self.metrics.unregister(self.registry)
        with contextlib.suppress(Exception):
            await self.store.js.delete_consumer(self.store.stream, MiniChoreography.name)


@pytest.fixture
async def stack(store: JetStreamStore, tmp_path: Path) -> AsyncIterator[Stack]:
    s = Stack(store, tmp_path / "prometheus")
    try:
        yield s
    finally:
        await s.stop()


# -------------------------------------------------------------------------- tests
@needs_promtool
def test_alert_rules_load_and_pass_their_unit_tests(tmp_path: Path) -> None:
    checked = subprocess.run(
        ["promtool", "check", "rules", str(ALERTS)], capture_output=True, text=True
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
    tested = subprocess.run(
        ["promtool", "test", "rules", "alerts_test.yml"],
        cwd=PROMETHEUS_DIR,
        capture_output=True,
        text=True,
    )
    assert tested.returncode == 0, tested.stdout + tested.stderr
    config = tmp_path / "prometheus.yml"
    config.write_text(
        render_config(
            [
                Target("api", "http://127.0.0.1:8080/metrics"),
                Target("handler", "http://127.0.0.1:9102/metrics"),
                Target("handler", "http://127.0.0.1:9103/metrics"),
            ],
            self_url="http://127.0.0.1:9090",
        )
    )
    valid = subprocess.run(
        ["promtool", "check", "config", str(config)], capture_output=True, text=True
    )
    assert valid.returncode == 0, valid.stdout + valid.stderr


def test_rendered_config_groups_targets_by_job() -> None:
    cfg = yaml.safe_load(
        render_config(
            [
                Target("handler", "http://127.0.0.1:9102/metrics"),
                Target("handler", "http://127.0.0.1:9103/metrics"),
                Target("api", "http://127.0.0.1:8080/metrics"),
            ],
            scrape_interval="2s",
        )
    )
    jobs = {j["job_name"]: j for j in cfg["scrape_configs"]}
    assert set(jobs) == {"handler", "api"}
    assert jobs["handler"]["static_configs"] == [{"targets": ["127.0.0.1:9102", "127.0.0.1:9103"]}]
    assert cfg["global"]["scrape_interval"] == "2s"
    assert cfg["rule_files"] == [str(ALERTS)]


@needs_prometheus
async def test_every_dashboard_panel_query_returns_series(stack: Stack) -> None:
    prometheus = await stack.start()
    await stack.second_wave()
    queries = panel_queries()
    assert len(queries) > 20

    async def empty_panels() -> list[str]:
        empty = []
        for board, panel, expr in queries:
            if not await stack.query(concrete(expr)):
                empty.append(f"{board} / {panel}: {expr}")
        return empty

    # each series shows up within a scrape or two; give the slowest a few seconds
    deadline = time.monotonic() + 15
    empty = await empty_panels()
    while empty and time.monotonic() < deadline:
        await asyncio.sleep(0.5)
        empty = await empty_panels()
    assert not empty, "panels with no series:\n" + "\n".join(empty)

    for board, var, metric, label in variable_queries():
        values = await asyncio.to_thread(
            prometheus.api, f"label/{label}/values", **{"match[]": metric}
        )
        assert values, f"{board}: variable ${var} has no values ({label} of {metric})"

    # the moving parts did move: creation → Running and a hop latency are real numbers
    p50_expr = concrete(
        "histogram_quantile(0.5, sum by (le) (rate("
        'kubevirt_vmi_phase_transition_time_from_creation_seconds_bucket{phase="Running"}'
        "[$__rate_interval])))"
    )

    async def p50() -> list[dict[str, Any]]:
        result = await stack.query(p50_expr)
        return result if result and result[0]["value"][1] != "NaN" else []

    # a scrape must land after the second wave's transitions: poll, don't race it
    assert await eventually(p50, "a creation→Running p50")

    async def dead_letters() -> list[dict[str, Any]]:
        q = 'virtstream_dead_letters_total{service="obs-choreography"} >= 1'
        return await stack.query(q)

    assert await eventually(dead_letters, "the dead letter counted by Prometheus")


@needs_prometheus
async def test_stopped_heartbeat_fires_the_node_unresponsive_expression(stack: Stack) -> None:
    await stack.start()
    expr = alert_expr("VirtstreamNodeUnresponsive")

    async def unresponsive_nodes() -> set[str]:
        return {s["metric"].get("node", "") for s in await stack.query(expr)}

    assert await unresponsive_nodes() == set()  # both handlers beat
    await stack.heartbeats.stop_node("node-2")  # the handler of node-2 stops
    fired = await eventually(
        unresponsive_nodes, "the node-unresponsive expression", timeout=HEARTBEAT_TIMEOUT + 15
    )
    assert fired == {"node-2"}
