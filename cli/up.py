"""`virtstream up`: the whole cluster on this machine.

nats-server (embedded unless --nats-url), api, controller and one handler per node, each a
supervised subprocess logging to `<data-dir>/logs/`. Ctrl-C shuts the VMs down (unless
--keep-vms), then stops the services, then nats. Starting again on the same data dir
resumes from the stored events (and, with --keep-vms, re-attaches to the running VMs).
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from pathlib import Path

import httpx
import typer
from rich.console import Console
from rich.table import Table

from ops.nats_server import NatsServer, free_port
from ops.prometheus_server import PrometheusServer, start_for_cluster, target_for
from ops.prometheus_server import find_binary as find_prometheus
from ops.supervisor import ServiceSpec, Supervisor
from services.launcher import rundir

console = Console()

API_PATH = "/apis/kubevirt.io/v1"
SUB_PATH = "/apis/subresources.kubevirt.io/v1"


def up(
    data_dir: Path = typer.Option(Path(".virtstream"), help="Where the event store lives"),
    nats_url: str = typer.Option("", help="Use this NATS server instead of the embedded one"),
    nats_port: int = typer.Option(4222, help="Embedded nats-server client port"),
    nodes: int = typer.Option(1, min=1, help="How many nodes (one virt-handler each)"),
    hypervisor: str = typer.Option("test", help="test (libvirt's test driver)"),
    port: int = typer.Option(8080, help="API port"),
    keep_vms: bool = typer.Option(False, help="On Ctrl-C leave the VMs running"),
    demo: bool = typer.Option(False, help="Run the demo workload, then stop"),
    metrics: bool = typer.Option(
        False, help="Also run Prometheus (Debian's package) scraping every service"
    ),
    prometheus_port: int = typer.Option(9090, help="Prometheus port with --metrics"),
) -> None:
    """Run nats-server, api, controller and N handlers until Ctrl-C."""
    data_dir = data_dir.resolve()
    run_dir = data_dir / "run"
    if len(str(run_dir)) > 60:
        console.print(
            f"[yellow]warning[/]: {run_dir} is long; launcher socket paths may exceed the "
            "107-byte unix socket limit (use a shorter --data-dir)"
        )
    server = None
    if not nats_url:
        server = NatsServer(
            data_dir / "nats", port=nats_port, log_file=data_dir / "logs" / "nats-server.log"
        )
        (data_dir / "logs").mkdir(parents=True, exist_ok=True)
        with console.status("starting nats-server"):
            server.start_sync()
        nats_url = server.url
    sup = Supervisor(data_dir / "logs", console.print)
    api_url = f"http://127.0.0.1:{port}"
    specs = [
        ServiceSpec(
            name="api",
            module="services.api",
            args=("--nats-url", nats_url, "--port", str(port)),
            metrics_url=f"{api_url}/metrics",
        )
    ]
    cport = free_port()
    specs.append(
        ServiceSpec(
            name="controller",
            module="services.controller",
            args=("--nats-url", nats_url, "--metrics-port", str(cport)),
            metrics_url=f"http://127.0.0.1:{cport}/metrics",
        )
    )
    for i in range(1, nodes + 1):
        hport = free_port()
        specs.append(
            ServiceSpec(
                name=f"handler node-{i}",
                module="services.handler",
                args=(
                    "--node",
                    f"node-{i}",
                    "--nats-url",
                    nats_url,
                    "--run-dir",
                    str(run_dir),
                    "--hypervisor",
                    hypervisor,
                    "--metrics-port",
                    str(hport),
                ),
                metrics_url=f"http://127.0.0.1:{hport}/metrics",
            )
        )
    started = [s for s in (sup.add(spec) for spec in specs) if s is not None]
    _print_urls(server, nats_url, api_url, [s.spec for s in started], sup.log_dir)
    prom = (
        _start_prometheus(data_dir, [s.spec for s in started], prometheus_port) if metrics else None
    )

    stop = threading.Event()
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    result: list[bool] = []
    if demo:
        from cli.demo import run_demo

        def _demo() -> None:
            try:
                result.append(run_demo(api_url, nodes, console.print))
            except Exception as e:
                console.print(f"[red]demo failed[/]: {e!r}")
                result.append(False)
            stop.set()

        threading.Thread(target=_demo, daemon=True).start()
    try:
        while not stop.wait(0.2):
            sup.poll()
    finally:
        console.print("[bold]stopping[/]")
        if not keep_vms:
            shutdown_vms(api_url, run_dir, any(s.spec.name == "api" for s in started))
        sup.stop()
        if prom is not None:
            prom.stop_sync()
        if server:
            server.stop_sync()
        console.print("stopped")
    if demo and not (result and result[0]):
        raise typer.Exit(1)


def _start_prometheus(
    data_dir: Path, specs: list[ServiceSpec], port: int
) -> PrometheusServer | None:
    """Prometheus on loopback with a config rendered from what this `up` started
    (ops/prometheus/, dashboards in ops/grafana/). A restarted service keeps its port, so
    the targets stay valid without a reload."""
    if find_prometheus() is None:
        console.print(
            "[yellow]--metrics[/]: Prometheus is not installed "
            "(apt-get install --no-install-recommends prometheus); continuing without it"
        )
        return None
    targets = [target_for(spec.name, spec.metrics_url) for spec in specs]
    with console.status("starting Prometheus"):
        prom = start_for_cluster(targets, data_dir / "prometheus", port=port)
    console.print(f"[green]Prometheus[/] {prom.url}  (Grafana data source: Prometheus, {prom.url})")
    console.print("  dashboards to import: ops/grafana/dashboards/*.json")
    return prom


def _print_urls(
    server: NatsServer | None,
    nats_url: str,
    api_url: str,
    specs: list[ServiceSpec],
    log_dir: Path,
) -> None:
    table = Table(title="virtstream", show_header=True)
    table.add_column("service")
    table.add_column("url")
    table.add_row("NATS", nats_url)
    if server:
        table.add_row("NATS monitoring", server.monitoring_url)
    for spec in specs:
        if spec.name == "api":
            table.add_row("API", api_url)
        table.add_row(f"{spec.name} metrics", spec.metrics_url)
    console.print(table)
    console.print(f"logs in {log_dir}")
    console.print("Ctrl-C stops the cluster")


def live_launchers(run_dir: Path) -> list[int]:
    pids = []
    for pidfile in run_dir.glob("*/launchers/*.pid"):
        pid = rundir.read_pid(pidfile)
        if pid and rundir.pid_alive(pid):
            pids.append(pid)
    return pids


def _wait_launchers(run_dir: Path, timeout: float) -> list[int]:
    deadline = time.monotonic() + timeout
    while (pids := live_launchers(run_dir)) and time.monotonic() < deadline:
        time.sleep(0.2)
    return pids


def shutdown_vms(api_url: str, run_dir: Path, api_running: bool) -> None:
    """Stop every VM (through the API, so the events say so), then make sure no launcher
    is left: SIGTERM (the launcher shuts its domain down gracefully), then SIGKILL."""
    if not live_launchers(run_dir):
        return
    if api_running:
        with contextlib.suppress(httpx.HTTPError, ValueError):
            stop_all_through_api(api_url)
        _wait_launchers(run_dir, 15.0)
    pids = live_launchers(run_dir)
    if pids:
        console.print(f"terminating {len(pids)} launcher(s)")
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
        for pid in _wait_launchers(run_dir, 10.0):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def stop_all_through_api(api_url: str) -> None:
    with httpx.Client(base_url=api_url, timeout=5.0) as http:
        vms = http.get(f"{API_PATH}/virtualmachines")
        if vms.status_code == 404:
            vms = http.get(f"{API_PATH}/namespaces/default/virtualmachines")
        owned = set()
        for vm in vms.json().get("items", []) if vms.is_success else []:
            md = vm["metadata"]
            owned.add((md.get("namespace", "default"), md["name"]))
            r = http.put(
                f"{SUB_PATH}/namespaces/{md.get('namespace', 'default')}"
                f"/virtualmachines/{md['name']}/stop",
                json={},
            )
            console.print(f"stop vm {md['name']}: {r.status_code}")
        vmis = http.get(f"{API_PATH}/virtualmachineinstances")
        if vmis.status_code == 404:
            vmis = http.get(f"{API_PATH}/namespaces/default/virtualmachineinstances")
        for vmi in vmis.json().get("items", []) if vmis.is_success else []:
            md = vmi["metadata"]
            ns = md.get("namespace", "default")
            if (ns, md["name"]) not in owned:
                http.delete(f"{API_PATH}/namespaces/{ns}/virtualmachineinstances/{md['name']}")
