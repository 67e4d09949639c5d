"""`virtstream up`: the whole cluster on this machine.

nats-server (embedded unless --nats-url), api, controller and one handler per node, each a
supervised subprocess logging to `<data-dir>/logs/`. Ctrl-C shuts the VMs down (unless
--keep-vms), then stops the services, then nats. Starting again on the same data dir
resumes from the stored events (and says so; with --keep-vms it re-attaches to the running
VMs). `--demo` runs the tour of `cli/demo.py`, then keeps the cluster up, in its own data
dir (`.virtstream-demo`) so that a later plain `up` does not pick its objects up.

`--hypervisor qemu`: before the handlers, one libvirtd per node (ops.node_libvirtd, in
`<data-dir>/nodes/<node>/`); its URI goes to the node's handler. Ctrl-C stops them after the
handlers (unless --keep-vms: then they and their guests live on, and the next `up` adopts
them). A previous `up` that was killed leaves its services running: they are recorded in
`<data-dir>/up.json` and stopped on the next start; node dirs no longer in use are cleaned.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import typer
from rich.console import Console
from rich.table import Table

from cli import kubeconfig, security
from client import credentials
from kinds.registry import REGISTRY
from ops import guest_images, node_libvirtd
from ops.nats_server import NatsServer, free_port
from ops.node_libvirtd import NodeRuntime
from ops.prometheus_server import PrometheusServer, start_for_cluster, target_for
from ops.prometheus_server import find_binary as find_prometheus
from ops.supervisor import ServiceSpec, Supervisor, stop_recorded
from services.launcher import rundir
from services.launcher.images import default_image_dir

console = Console(soft_wrap=True)


DATA_DIR = Path(".virtstream")
DEMO_DATA_DIR = Path(".virtstream-demo")


def up(
    data_dir: Path | None = typer.Option(
        None,
        metavar="DIR",
        help=f"Where the event store and logs live (default {DATA_DIR}; {DEMO_DATA_DIR} "
        "with --demo); an existing one is resumed",
    ),
    nats_url: str = typer.Option("", help="Use this NATS server instead of the embedded one"),
    nats_port: int = typer.Option(4222, help="Embedded nats-server client port"),
    nodes: int = typer.Option(1, min=1, help="How many nodes (one virt-handler each)"),
    hypervisor: str = typer.Option(
        "test", help="test (libvirt's test driver) or qemu (a libvirtd per node, real QEMU)"
    ),
    image_dir: Path | None = typer.Option(
        None,
        help="qemu: the image catalogue, containerDisk images by name "
        "(<dir>/<image>.qcow2|.raw|.img; default: `virtstream images`'s dir)",
    ),
    port: int = typer.Option(8080, help="API port"),
    keep_vms: bool = typer.Option(False, help="On Ctrl-C leave the VMs running"),
    demo: bool = typer.Option(
        False, help="Tour a VM through its life with narration, then keep the cluster up"
    ),
    metrics: bool = typer.Option(
        False, help="Also run Prometheus (Debian's package) scraping every service"
    ),
    prometheus_port: int = typer.Option(9090, help="Prometheus port with --metrics"),
    sync_interval: str = typer.Option(
        "always",
        help="Embedded server's fsync interval: 'always' (an acknowledged event is on disk) "
        "or a duration such as 2m (faster, loses up to that much on power loss)",
    ),
    replicas: int = typer.Option(
        1, help="Stream replicas (3 or 5 on a NATS cluster given with --nats-url)"
    ),
    duplicate_window: float = typer.Option(
        120.0, help="Seconds JetStream remembers event ids to drop duplicate appends"
    ),
    scrape_interval: str = typer.Option(
        "5s", hidden=True, help="Prometheus scrape interval with --metrics (tests use 1s)"
    ),
    node_timeout: float = typer.Option(
        0.0,
        min=0.0,
        help="Seconds without a heartbeat before the controller declares a node "
        "unresponsive (default: the controller's, 60); handlers beat 4 times per timeout",
    ),
    node_memory: str = typer.Option(
        "", help="Each node's memory capacity, e.g. 64Gi (default: the hypervisor's)"
    ),
    node_cpus: int = typer.Option(0, min=0, help="Each node's CPUs (default: the hypervisor's)"),
    insecure: bool = typer.Option(
        False,
        "--insecure",
        help="No TLS and no authentication on the api, anonymous NATS (anyone on this "
        "machine may do anything): for experiments only",
    ),
    nats_tls: bool = typer.Option(
        False, "--nats-tls", help="The embedded nats-server requires TLS from its clients"
    ),
) -> None:
    """Run nats-server, api, controller and N handlers until Ctrl-C."""
    # from the start: a Ctrl-C while starting lets the start finish, then stops in order
    stop = threading.Event()
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    if hypervisor not in ("test", "qemu"):
        console.print(f"[red]error[/]: --hypervisor must be test or qemu, not {hypervisor!r}")
        raise typer.Exit(2)
    if hypervisor == "qemu":
        qemu_preflight()
    data_dir = (data_dir or (DEMO_DATA_DIR if demo else DATA_DIR)).resolve()
    resumed = (data_dir / "nats").is_dir() and any((data_dir / "nats").iterdir())
    data_dir.mkdir(parents=True, exist_ok=True)
    data_dir.chmod(0o700)  # the event log, logs and sockets are the owner's alone
    run_dir = data_dir / "run"
    state_file = data_dir / "up.json"
    if leftovers := stop_recorded(state_file):
        console.print(f"stopped what a killed previous run left: {', '.join(leftovers)}")
    if len(str(run_dir)) > 60:
        console.print(
            f"[yellow]warning[/]: {run_dir} is long; launcher socket paths may exceed the "
            "107-byte unix socket limit (use a shorter --data-dir)"
        )
    server = None
    node_names = [f"node-{i}" for i in range(1, nodes + 1)]
    secured = None if insecure else security.prepare(data_dir)
    # the bus's users: only with the embedded server (another is configured by its owner)
    bus = (
        security.nats_users(data_dir, node_names, secured.pki if nats_tls else None)
        if secured is not None and not nats_url
        else None
    )
    if not nats_url:
        server = NatsServer(
            data_dir / "nats",
            port=nats_port,
            log_file=data_dir / "logs" / "nats-server.log",
            sync_interval=sync_interval,
            authorization=bus.authorization if bus else "",
            tls=bus.tls if bus else None,
        )
        (data_dir / "logs").mkdir(parents=True, exist_ok=True)
        with console.status("starting nats-server"):
            server.start_sync()
        nats_url = server.url
        if resumed:
            console.print(
                f"resuming the cluster stored in {data_dir} "
                "(a fresh one: another --data-dir, or remove that one)"
            )
    # the services read the stream settings from the environment (StreamSettings.from_env)
    os.environ["VIRTSTREAM_STREAM_REPLICAS"] = str(replicas)
    os.environ["VIRTSTREAM_STREAM_DUPLICATE_WINDOW"] = str(duplicate_window)
    os.environ["VIRTSTREAM_SYNC_INTERVAL"] = sync_interval
    sup = Supervisor(data_dir / "logs", console.print, state_file=state_file)
    if server is not None and server.proc is not None:
        sup.record("nats-server", server.proc.pid, list(server.proc.args))  # type: ignore[arg-type]
    runtimes: dict[str, NodeRuntime] = {}
    handler_extra: dict[str, tuple[str, ...]] = {n: () for n in node_names}
    if hypervisor == "qemu":
        try:
            runtimes = start_node_runtimes(data_dir / "nodes", node_names)
            handler_extra = qemu_handler_args(runtimes, data_dir / "disks", image_dir)
        except Exception:
            stop_node_runtimes(runtimes)
            if server:
                server.stop_sync()
            sup.forget()
            raise
    api_url = f"{'http' if secured is None else 'https'}://127.0.0.1:{port}"
    specs = [
        ServiceSpec(
            name="api",
            module="services.api",
            args=(
                "--nats-url",
                nats_url,
                "--port",
                str(port),
                *(secured.api_args() if secured else ()),
            ),
            metrics_url=f"{api_url}/metrics",
            env=bus.env("api") if bus else {},
        )
    ]
    cport = free_port()
    specs.append(
        ServiceSpec(
            name="controller",
            module="services.controller",
            args=(
                "--nats-url",
                nats_url,
                "--metrics-port",
                str(cport),
                *(("--node-timeout", str(node_timeout)) if node_timeout else ()),
            ),
            metrics_url=f"http://127.0.0.1:{cport}/metrics",
            env=bus.env("controller") if bus else {},
        )
    )
    for node in node_names:
        hport = free_port()
        specs.append(
            ServiceSpec(
                name=f"handler {node}",
                module="services.handler",
                args=(
                    "--node",
                    node,
                    "--nats-url",
                    nats_url,
                    "--run-dir",
                    str(run_dir),
                    "--hypervisor",
                    hypervisor,
                    "--metrics-port",
                    str(hport),
                    *(("--memory", node_memory) if node_memory else ()),
                    *(("--cpus", str(node_cpus)) if node_cpus else ()),
                    # a short node timeout needs heartbeats well within it (default 5 s)
                    *(
                        ("--heartbeat-interval", str(min(5.0, node_timeout / 4)))
                        if node_timeout
                        else ()
                    ),
                    *handler_extra[node],
                ),
                metrics_url=f"http://127.0.0.1:{hport}/metrics",
                env=bus.env(f"handler-{node}") if bus else {},
            )
        )
    started = [s for s in (sup.add(spec) for spec in specs) if s is not None]
    _print_urls(server, nats_url, api_url, [s.spec for s in started], sup.log_dir)
    kube = kubeconfig.write(
        data_dir / "kubeconfig",
        api_url,
        token=secured.admin_token if secured else "",
        ca_pem=secured.pki.ca.read_bytes() if secured else b"",
    )
    credentials.record("api", port, data_dir)
    if server is not None:
        credentials.record("nats", server.port, data_dir)
    console.print(f"kubectl: KUBECONFIG={kube} kubectl get vms")
    if secured is None:
        console.print("[yellow]--insecure[/]: the api has no TLS and no authentication")
    for node, runtime in runtimes.items():
        console.print(f"{node} libvirtd: {runtime.uri}")
    prom = (
        _start_prometheus(
            data_dir,
            [s.spec for s in started],
            prometheus_port,
            scrape_interval,
            ca_file=secured.pki.ca if secured else None,
        )
        if metrics
        else None
    )

    result: list[bool] = []
    if demo:
        from cli.demo import run_demo, using_it

        def _demo() -> None:
            try:
                guests = run_dir if hypervisor == "qemu" else None
                passed = run_demo(api_url, nodes, console.print, console_run_dir=guests)
            except Exception as e:
                console.print(f"[red]demo failed[/]: {e!r}")
                passed = False
            result.append(passed)
            if passed:  # the cluster stays for the README's "Using it"
                using_it(api_url, nats_url, console.print)
            else:
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
        if runtimes and keep_vms:
            console.print("the nodes' libvirtds keep running with the VMs (the next `up` adopts)")
        elif runtimes:
            stop_node_runtimes(runtimes)
        if prom is not None:
            prom.stop_sync()
        if server:
            server.stop_sync()
            credentials.forget("nats", server.port, data_dir)
        credentials.forget("api", port, data_dir)
        sup.forget()
        console.print("stopped")
    if demo and not (result and result[0]):
        raise typer.Exit(1)


def _message(r: httpx.Response) -> str:
    try:
        return str(r.json().get("message") or r.reason_phrase)
    except ValueError:
        return r.reason_phrase


def qemu_preflight() -> None:
    """Exit with the one command that fixes it when qemu mode cannot run here."""
    missing = node_libvirtd.missing_requirements()
    if missing:
        console.print(
            f"[red]error[/]: --hypervisor qemu needs {', '.join(missing)}; install them with: "
            "bash ops/install.sh --qemu"
        )
        raise typer.Exit(1)
    if os.geteuid() != 0:
        console.print("[red]error[/]: --hypervisor qemu runs a libvirtd per node: run as root")
        raise typer.Exit(1)
    node_libvirtd.ensure_accounts()  # once, before the nodes start side by side


def start_node_runtimes(base: Path, names: list[str]) -> dict[str, NodeRuntime]:
    """A libvirtd per node; one a previous run left running (with its guests) is adopted.
    Node dirs of that run not among `names` are cleaned up (processes, mounts, domains)."""
    base.mkdir(parents=True, exist_ok=True)
    sock = base / names[-1] / "sock" / "libvirt-sock"
    if len(str(sock)) > 100:
        console.print(f"[yellow]warning[/]: {sock} is near the 107-byte unix socket limit")
    for node_dir in sorted(p for p in base.iterdir() if p.name not in names):
        if (node_dir / node_libvirtd.STATE_FILE).exists():
            node_libvirtd.cleanup_node(node_dir)
            console.print(f"cleaned up {node_dir.name} of a previous run")
    runtimes = {n: NodeRuntime(n, base) for n in names}
    errors = []
    with console.status(f"starting {len(names)} libvirtd(s)"), ThreadPoolExecutor() as pool:
        futures = {n: pool.submit(r.start, True) for n, r in runtimes.items()}
        for n, f in futures.items():
            try:
                f.result()
            except Exception as e:
                errors.append(f"{n}: {e}")
    if errors:
        stop_node_runtimes(runtimes)
        raise RuntimeError("; ".join(errors))
    return runtimes


def stop_node_runtimes(runtimes: dict[str, NodeRuntime]) -> None:
    """Destroy what is left on each node and stop its libvirtd (nothing stays behind)."""
    with ThreadPoolExecutor() as pool:
        for f in [pool.submit(r.stop) for r in runtimes.values()]:
            with contextlib.suppress(Exception):
                f.result()


def qemu_handler_args(
    runtimes: dict[str, NodeRuntime], disk_dir: Path, image_dir: Path | None
) -> dict[str, tuple[str, ...]]:
    from services.launcher.kvm_probe import domain_type

    with console.status("probing KVM"):
        probe = domain_type()  # once for all handlers (cached per boot)
    if str(probe.domain_type) == "qemu":
        console.print(f"domain type qemu (software emulation): {probe.reason}")
    common: tuple[str, ...] = ("--domain-type", str(probe.domain_type), "--disk-dir", str(disk_dir))
    image_dir = (image_dir or default_image_dir()).resolve()
    try:
        with console.status(f"guest images in {image_dir}"):
            guest_images.ensure_images(image_dir, log=console.print)  # once; then a no-op
    except guest_images.GuestBuildError as exc:
        console.print(f"[yellow]warning[/]: no built guest image ({exc}); only added images boot")
    common += ("--image-dir", str(image_dir))
    return {
        n: ("--libvirt-uri", r.uri, "--qemu-pid-dir", str(r.qemu_pid_dir), *common)
        for n, r in runtimes.items()
    }


def _start_prometheus(
    data_dir: Path,
    specs: list[ServiceSpec],
    port: int,
    scrape_interval: str = "5s",
    ca_file: Path | None = None,
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
        prom = start_for_cluster(
            targets,
            data_dir / "prometheus",
            port=port,
            scrape_interval=scrape_interval,
            ca_file=ca_file,
        )
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
    vm_kind, vmi_kind = REGISTRY.resource("vm"), REGISTRY.resource("vmi")
    with httpx.Client(timeout=5.0, **credentials.httpx_options(api_url)) as http:
        vms = http.get(vm_kind.collection_path())
        if vms.status_code == 404:
            vms = http.get(vm_kind.collection_path("default"))
        owned = set()
        for vm in vms.json().get("items", []) if vms.is_success else []:
            md = vm["metadata"]
            owned.add((md.get("namespace", "default"), md["name"]))
            path = vm_kind.subresource_path(md["name"], "stop", md.get("namespace", "default"))
            r = http.put(path, json={})
            # 409: not running (nothing to stop); other refusals say why, in words
            if r.is_success:
                console.print(f"stopping VM {md.get('namespace', 'default')}/{md['name']}")
            elif r.status_code != 409:
                reason = _message(r)
                console.print(f"[yellow]could not stop VM {md['name']}[/]: {reason}")
        vmis = http.get(vmi_kind.collection_path())
        if vmis.status_code == 404:
            vmis = http.get(vmi_kind.collection_path("default"))
        for vmi in vmis.json().get("items", []) if vmis.is_success else []:
            md = vmi["metadata"]
            ns = md.get("namespace", "default")
            if (ns, md["name"]) not in owned:
                http.delete(f"{vmi_kind.collection_path(ns)}/{md['name']}")
