"""`virtstream up`: the whole cluster on this machine.

nats-server (embedded unless --nats-url), api, controller and one handler per node, each a
supervised subprocess logging to `<data-dir>/logs/`. Ctrl-C shuts the VMs down (unless
--keep-vms), then stops the services, then nats. Starting again on the same data dir
resumes from the stored events (and says so; with --keep-vms it re-attaches to the running
VMs): the api starts first, then `stored_nodes` says in which mode the stored nodes ran when
that differs, and cordons those this run does not start, before a controller places
anything. `--demo` runs the tour of `cli/demo.py`, then keeps the cluster up, in its own data
dir (`.virtstream-demo`) so that a later plain `up` does not pick its objects up.

`--hypervisor qemu`: before the handlers, one libvirtd per node (ops.node_libvirtd, in
`<data-dir>/nodes/<node>/`); its URI goes to the node's handler. Ctrl-C stops them after the
handlers (unless --keep-vms: then they and their guests live on, and the next `up` adopts
them). One `up` runs on a data dir at a time (`ops/run_lock.py`): a killed one's reaper
(`ops/up_reaper.py`) stops what it left (services, and launchers unless --keep-vms) before
the next starts, which waits for it and says so. The services are recorded in
`<data-dir>/up.json`, so what a killed reaper did not stop is stopped on the next start;
node dirs no longer in use are cleaned.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import secrets
import signal
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import msgspec
import typer
from rich.console import Console
from rich.table import Table

from cli import external_nats, kubeconfig, security
from client import credentials
from eventstore import connection
from host import pod_network
from kinds.registry import REGISTRY
from ops import guest_images, node_libvirtd, prometheus_auth, run_lock, up_reaper
from ops.nats_config import local_cluster
from ops.nats_server import NatsServer
from ops.node_libvirtd import NodeRuntime
from ops.ports import free_port, reserve, taken
from ops.prometheus_server import PrometheusServer, start_for_cluster, target_for
from ops.prometheus_server import find_binary as find_prometheus
from ops.supervisor import ServiceSpec, Supervisor, stop_recorded
from ops.up_reaper import live_launchers, terminate_launchers, wait_launchers
from services.launcher.images import default_image_dir
from services.launcher.storage import uploads_dir

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
    nats_url: str = typer.Option(
        "", help="Use these NATS servers (comma-separated URLs) instead of embedded ones"
    ),
    nats_port: int = typer.Option(4222, help="Embedded nats-server client port (the first's)"),
    nats_cluster: int = typer.Option(
        1,
        min=1,
        help="Embedded nats-servers, clustered on this machine when more than one "
        "(3: streams get 3 replicas and losing one server is invisible)",
    ),
    nodes: int = typer.Option(1, min=1, help="How many nodes (one virt-handler each)"),
    controllers: int = typer.Option(
        1, min=1, help="Controllers: one active, the others standing by to take over"
    ),
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
        0,
        min=0,
        help="Stream replicas (default: 3 with --nats-cluster 3 or more, else 1; "
        "3 or 5 on a NATS cluster given with --nats-url)",
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
        "unresponsive and restarts its VMs elsewhere (default 60); a handler off the bus "
        "for half of it stops its node's VMs first; handlers beat 4 times per timeout",
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
    nats_monitoring: bool = typer.Option(
        False,
        "--nats-monitoring",
        help="Open the embedded nats-server's monitoring port (/varz, /connz, /jsz: "
        "unauthenticated, to anyone on this machine)",
    ),
    common_instancetypes: bool = typer.Option(
        True,
        "--common-instancetypes/--no-common-instancetypes",
        help="Deploy KubeVirt's common instance types and preferences (u1.small, "
        "centos.stream9, ...) at the start, as its operator does "
        "(commonInstancetypesDeployment)",
    ),
    shadow: list[str] = typer.Option(
        [],
        metavar="controller=MODULE:FACTORY",
        help="Also run this version of the controller's decider in shadow on the live "
        "stream: it appends nothing and reports each decision that differs from the live "
        "controller's (MODULE is looked up from here too; repeatable)",
    ),
) -> None:
    """Run nats-server, api, controller and N handlers until Ctrl-C."""
    # from the start: a Ctrl-C while starting lets the start finish, then stops in order
    stop = threading.Event()
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    options = Options(
        data_dir=data_dir, nats_url=nats_url, nats_port=nats_port, nats_cluster=nats_cluster,
        nodes=nodes, controllers=controllers, hypervisor=hypervisor, image_dir=image_dir,
        port=port, keep_vms=keep_vms, demo=demo, metrics=metrics,
        prometheus_port=prometheus_port, sync_interval=sync_interval, replicas=replicas,
        duplicate_window=duplicate_window, scrape_interval=scrape_interval,
        node_timeout=node_timeout, node_memory=node_memory, node_cpus=node_cpus,
        insecure=insecure, nats_tls=nats_tls, nats_monitoring=nats_monitoring,
        common_instancetypes=common_instancetypes, shadow=tuple(shadow),
    )  # fmt: skip
    Run(options, stop).main()


@dataclasses.dataclass(frozen=True)
class Options:
    """`up`'s options, as given."""

    data_dir: Path | None
    nats_url: str
    nats_port: int
    nats_cluster: int
    nodes: int
    controllers: int
    hypervisor: str
    image_dir: Path | None
    port: int
    keep_vms: bool
    demo: bool
    metrics: bool
    prometheus_port: int
    sync_interval: str
    replicas: int
    duplicate_window: float
    scrape_interval: str
    node_timeout: float
    node_memory: str
    node_cpus: int
    insecure: bool
    nats_tls: bool
    nats_monitoring: bool
    common_instancetypes: bool
    shadow: tuple[str, ...] = ()


class Run:
    """One `up`, as named steps in the order they run (`main`): check the options, take
    the data dir, check the ports, secure, start the bus, start the nodes' runtimes, start
    the services, then wait for a stop and stop everything in order. A step that fails
    undoes what the steps before it started."""

    def __init__(self, o: Options, stop: threading.Event) -> None:
        self.o = o
        self.stop = stop
        self.node_names = [f"node-{i}" for i in range(1, o.nodes + 1)]
        self.nats_url = o.nats_url
        self.servers: list[NatsServer] = []
        self.runtimes: dict[str, NodeRuntime] = {}
        self.handler_extra: dict[str, tuple[str, ...]] = {}
        self.secured: security.Secured | None = None
        self.bus: security.Bus | None = None

    def main(self) -> None:
        self.check_options()
        self.take_data_dir()
        self.check_ports()
        self.secure()
        self.supervise()
        self.start_bus()
        self.start_node_runtimes()
        self.start_services()
        result = self.run_demo() if self.o.demo else []
        try:
            while not self.stop.wait(0.2):
                self.sup.poll()
        finally:
            self.stop_everything()
        if self.o.demo and not (result and result[0]):
            raise typer.Exit(1)

    # ------------------------------------------------------------------ steps
    def check_options(self) -> None:
        o = self.o
        if not o.nats_url and o.nats_cluster == 2:
            console.print("[red]error[/]: --nats-cluster 2 cannot keep a quorum: use 1, 3 or 5")
            raise typer.Exit(2)
        if o.hypervisor not in ("test", "qemu"):
            console.print(f"[red]error[/]: --hypervisor must be test or qemu, not {o.hypervisor!r}")
            raise typer.Exit(2)
        if o.hypervisor == "qemu":
            qemu_preflight()
        for spec in o.shadow:
            from services.controller import decider_spec

            try:
                decider_spec.load(spec, os.getcwd())  # refused now, not by a child later
            except ValueError as e:
                console.print(f"[red]error[/]: --shadow {e}")
                raise typer.Exit(2) from None

    def take_data_dir(self) -> None:
        """The data dir, locked for this run, after a killed run's reaper has finished."""
        o = self.o
        data_dir = (o.data_dir or (DEMO_DATA_DIR if o.demo else DATA_DIR)).resolve()
        self.data_dir = data_dir
        self.resumed = any(d.is_dir() and any(d.iterdir()) for d in data_dir.glob("nats*"))
        self.stored = self.resumed or bool(o.nats_url)  # an external bus may hold a cluster
        data_dir.mkdir(parents=True, exist_ok=True)
        data_dir.chmod(0o700)  # the event log, logs and sockets are the owner's alone
        self.run_dir = data_dir / "run"
        self.state_file = data_dir / "up.json"
        # before anything is read or started: a killed run's reaper finishes first
        try:
            self.lock = run_lock.take(data_dir, console.print, stopped=self.stop.is_set)
        except run_lock.RunLockError as e:
            console.print(f"[red]error[/]: {e}")
            raise typer.Exit(1) from None
        self.reaped = up_reaper.take_report(data_dir)
        if leftovers := stop_recorded(self.state_file):  # its reaper was killed too
            console.print(f"stopped what a killed previous run left: {', '.join(leftovers)}")

    def check_ports(self) -> None:
        """After the previous run's processes are gone: they no longer hold its ports."""
        o = self.o
        ports = {"NATS (--nats-port)": 0 if o.nats_url else o.nats_port, "API (--port)": o.port}
        if o.metrics:
            ports["Prometheus (--prometheus-port)"] = o.prometheus_port
        reserve(*ports.values())  # the metrics ports picked below are none of these
        if busy := taken(ports):
            console.print(
                f"[red]error[/]: {', '.join(busy)} already in use on 127.0.0.1 (another "
                "`virtstream up`? pick free ones with the options named)"
            )
            raise typer.Exit(1)
        _say_previous_vms(self.reaped, len(live_launchers(self.run_dir)))
        if len(str(self.run_dir)) > 60:
            console.print(
                f"[yellow]warning[/]: {self.run_dir} is long; launcher socket paths may "
                "exceed the 107-byte unix socket limit (use a shorter --data-dir)"
            )

    def secure(self) -> None:
        """Credentials, the CA and the bus's users (none with --insecure); an external
        bus's owner includes the users file written here, checked before anything starts."""
        o = self.o
        self.secured = None if o.insecure else security.prepare(self.data_dir)
        if self.secured is None:
            return
        pki = self.secured.pki if o.nats_tls and not o.nats_url else None
        self.bus = security.nats_users(self.data_dir, self.node_names, pki)
        if o.nats_url:
            include = external_nats.write(self.data_dir, self.bus)
            if problem := external_nats.check(o.nats_url, self.bus, include):
                console.print(f"[red]error[/]: {problem}")
                raise typer.Exit(1)

    def supervise(self) -> None:
        """The supervisor, and the reaper that stops the launchers should this process die
        without its `finally` (SIGKILL)."""
        self.sup = Supervisor(self.data_dir / "logs", console.print, state_file=self.state_file)
        self.reaper = up_reaper.start(self.data_dir, self.o.keep_vms, self.lock)
        run_lock.note_reaper(self.lock, self.reaper.pid)

    def _undo(self) -> None:
        """What the steps so far started, stopped (a later step failed)."""
        self.sup.stop()
        self.sup.forget()
        up_reaper.finish(self.reaper)

    def start_bus(self) -> None:
        o, bus = self.o, self.bus
        if not o.nats_url:
            try:
                self.servers = start_nats(
                    self.sup,
                    self.data_dir,
                    o.nats_port,
                    o.nats_cluster,
                    o.sync_interval,
                    authorization=bus.authorization if bus else "",
                    tls=bus.tls if bus else None,
                    monitoring=o.nats_monitoring,
                    probe=bus.auth("reader") if bus else None,
                )
            except NatsStartError as e:
                self._undo()
                console.print(f"[red]error[/]: {e}")
                raise typer.Exit(1) from None
            self.nats_url = ",".join(s.url for s in self.servers)
            if self.resumed:
                console.print(
                    f"resuming the cluster stored in {self.data_dir} "
                    "(a fresh one: another --data-dir, or remove that one)"
                )
        # the services read the stream settings from the environment (StreamSettings.from_env)
        replicas = o.replicas or (3 if len(self.servers) >= 3 else 1)
        os.environ["VIRTSTREAM_STREAM_REPLICAS"] = str(replicas)
        os.environ["VIRTSTREAM_STREAM_DUPLICATE_WINDOW"] = str(o.duplicate_window)
        os.environ["VIRTSTREAM_SYNC_INTERVAL"] = o.sync_interval

    def start_node_runtimes(self) -> None:
        """qemu mode: a libvirtd per node and the pod network. Every mode: the claims'
        disks (a DataVolume's import writes one in test mode too) are the data dir's."""
        data_dir = self.data_dir
        disks = ("--disk-dir", str(data_dir / "disks"))
        self.handler_extra = {n: disks for n in self.node_names}
        if self.o.hypervisor != "qemu":
            return
        try:
            self.runtimes = start_node_runtimes(data_dir / "nodes", self.node_names)
            extra = qemu_handler_args(self.runtimes, data_dir / "disks", self.o.image_dir)
            net = start_pod_network(data_dir, self.node_names)
            more = (
                ("--pod-network", net.dir)
                if isinstance(net, pod_network.PodNetwork)
                else ("--no-pod-network", net)
            )
            self.handler_extra = {n: (*args, *more) for n, args in extra.items()}
        except Exception:
            stop_node_runtimes(self.runtimes)
            pod_network.destroy(data_dir)
            self._undo()
            raise

    def start_services(self) -> None:
        """The api first: what the stored cluster was is read, and its nodes this run does
        not start are cordoned, before a controller places anything or a handler rejoins;
        then the controllers, the upkeep and the handlers; the kubeconfig, the
        credentials' records and, with --metrics, Prometheus."""
        o, secured = self.o, self.secured
        self.api_url = f"{'http' if secured is None else 'https'}://127.0.0.1:{o.port}"
        # Prometheus answers its own user only (the api's proxy and Grafana use it)
        self.prom_auth = prometheus_auth.ensure(self.data_dir) if o.metrics else None
        specs = self.service_specs()
        kube = kubeconfig.write(
            self.data_dir / "kubeconfig",
            self.api_url,
            token=secured.admin_token if secured else "",
            ca_pem=secured.pki.ca.read_bytes() if secured else b"",
        )
        credentials.record("api", o.port, self.data_dir)
        self.api_started = self.sup.add(specs[0])
        if self.stored and self.api_started is not None:
            stored_nodes(self.api_url, self.node_names, o.hypervisor, self.sup, self.stop)
        started = [self.api_started, *(self.sup.add(spec) for spec in specs[1:])]
        services = [s for s in started if s is not None and s.spec.module]  # not nats-server
        _print_urls(
            self.servers, self.nats_url, self.api_url, [s.spec for s in services], self.sup.log_dir
        )
        # the debug commands and scripts find the bus's credentials by its port
        self.nats_ports = [s.port for s in self.servers] or [
            urlsplit(u).port or 4222 for u in connection.servers(self.nats_url)
        ]
        for nats_port_in_use in self.nats_ports:
            credentials.record("nats", nats_port_in_use, self.data_dir)
        console.print(f"kubectl: KUBECONFIG={kube} kubectl get vms")
        if secured is None:
            console.print("[yellow]--insecure[/]: the api has no TLS and no authentication")
        for node, runtime in self.runtimes.items():
            console.print(f"{node} libvirtd: {runtime.uri}")
        self.prom = (
            _start_prometheus(
                self.data_dir,
                [s.spec for s in services],
                o.prometheus_port,
                o.scrape_interval,
                ca_file=secured.pki.ca if secured else None,
                token_file=secured.metrics_token_file if secured else None,
                auth=self.prom_auth,
            )
            if o.metrics
            else None
        )
        if self.prom is not None and self.prom.proc is not None:  # for the reaper
            self.sup.record("prometheus", self.prom.proc.pid, self.prom.command())

    def service_specs(self) -> list[ServiceSpec]:
        """The api, the leased roles (`--controllers` of each: one works, the others stand
        by) and a handler per node."""
        o, secured, bus, nats_url = self.o, self.secured, self.bus, self.nats_url
        data_dir, api_url = self.data_dir, self.api_url
        prom_auth = self.prom_auth
        specs = [
            ServiceSpec(
                name="api",
                module="services.api",
                args=(
                    "--nats-url",
                    nats_url,
                    "--port",
                    str(o.port),
                    *(secured.api_args() if secured else ()),
                    # the web console's charts ask the api, which relays to Prometheus
                    *(
                        ("--prometheus-url", f"http://127.0.0.1:{o.prometheus_port}")
                        if o.metrics
                        else ()
                    ),
                    *(prometheus_auth.api_args(prom_auth) if prom_auth else ()),
                    # the disks VirtualMachineExports serve (real files in qemu mode only)
                    *(("--disk-dir", str(data_dir / "disks")) if o.hypervisor == "qemu" else ()),
                    *(() if o.common_instancetypes else ("--no-common-instancetypes",)),
                    # CDI's uploads: tokens signed with the data dir's key, the bytes
                    # staged where the handlers' imports read them
                    "--upload-key-file",
                    str(_key_file(data_dir, "upload.key")),
                    "--upload-dir",
                    str(uploads_dir(str(data_dir / "disks"))),
                ),
                metrics_url=f"{api_url}/metrics",
                env=bus.env("api") if bus else {},
            )
        ]
        metrics_args = secured.metrics_args() if secured else ()
        scheme = "https" if secured else "http"  # the controller's and handlers' /metrics

        def leased(role: str, module: str, *extra: str) -> list[ServiceSpec]:
            out = []
            for i in range(1, o.controllers + 1):
                mport = free_port()
                out.append(
                    ServiceSpec(
                        name=role if i == 1 else f"{role}-{i}",
                        module=module,
                        args=(
                            "--nats-url",
                            nats_url,
                            "--metrics-port",
                            str(mport),
                            "--identity",
                            f"{role}-{i}",
                            *extra,
                            *metrics_args,
                        ),
                        metrics_url=f"{scheme}://127.0.0.1:{mport}/metrics",
                        env=bus.env(role) if bus else {},
                    )
                )
            return out

        specs += leased(
            "controller",
            "services.controller",
            *(("--node-timeout", str(o.node_timeout)) if o.node_timeout else ()),
            # a node of an earlier run that this one does not start is not coming back: it
            # gets no grace from the controller's start
            "--cluster-nodes",
            ",".join(self.node_names),
            "--export-key-file",
            str(_key_file(data_dir, "export.key")),
            "--export-url",
            api_url,
        )
        specs += leased("upkeep", "services.upkeep")  # the log's upkeep
        for i, spec in enumerate(o.shadow, 1):
            sport = free_port()
            shadow = "shadow" if i == 1 else f"shadow-{i}"
            specs.append(
                ServiceSpec(
                    name=shadow,
                    module="services.shadow",
                    args=(
                        "--decider",
                        spec,
                        "--name",
                        shadow,
                        "--module-path",
                        os.getcwd(),
                        "--nats-url",
                        nats_url,
                        "--metrics-port",
                        str(sport),
                        *metrics_args,
                    ),
                    metrics_url=f"{scheme}://127.0.0.1:{sport}/metrics",
                    env=bus.env("shadow") if bus else {},
                )
            )
        for node in self.node_names:
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
                        str(self.run_dir),
                        "--hypervisor",
                        o.hypervisor,
                        "--metrics-port",
                        str(hport),
                        *(("--memory", o.node_memory) if o.node_memory else ()),
                        *(("--cpus", str(o.node_cpus)) if o.node_cpus else ()),
                        # the same node timeout as the controller's: the handler's fence
                        # (half of it) and heartbeat interval follow from it
                        *(("--node-timeout", str(o.node_timeout)) if o.node_timeout else ()),
                        *self.handler_extra[node],
                        *metrics_args,
                        *(secured.console_args() if secured and o.hypervisor == "qemu" else ()),
                    ),
                    metrics_url=f"{scheme}://127.0.0.1:{hport}/metrics",
                    env=bus.env(f"handler-{node}") if bus else {},
                )
            )
        return specs

    def run_demo(self) -> list[bool]:
        """`--demo`: the tour, in a thread; its result lands in the list returned."""
        from cli.demo import run_demo, using_it

        result: list[bool] = []

        def _demo() -> None:
            try:
                guests = self.run_dir if self.o.hypervisor == "qemu" else None
                passed = run_demo(
                    self.api_url,
                    self.o.nodes,
                    console.print,
                    console_run_dir=guests,
                    nats_url=self.nats_url,
                )
            except Exception as e:
                console.print(f"[red]demo failed[/]: {e!r}")
                passed = False
            result.append(passed)
            if passed:  # the cluster stays for the README's "Using it"
                using_it(self.api_url, self.nats_url, console.print)
            else:
                self.stop.set()

        threading.Thread(target=_demo, daemon=True).start()
        return result

    def stop_everything(self) -> None:
        """The VMs (unless --keep-vms), the services, the nodes' runtimes, Prometheus, the
        credentials' records, the reaper, the lock: in that order."""
        o = self.o
        console.print("[bold]stopping[/]")
        if not o.keep_vms:
            shutdown_vms(self.api_url, self.run_dir, self.api_started is not None)
        self.sup.stop()
        if self.runtimes and o.keep_vms:
            console.print("the nodes' libvirtds keep running with the VMs (the next `up` adopts)")
        elif self.runtimes:
            stop_node_runtimes(self.runtimes)
            pod_network.destroy(self.data_dir)
        if self.prom is not None:
            self.prom.stop_sync()
        for nats_port_in_use in self.nats_ports:
            credentials.forget("nats", nats_port_in_use, self.data_dir)
        credentials.forget("api", o.port, self.data_dir)
        self.sup.forget()
        up_reaper.finish(self.reaper)
        os.close(self.lock)  # the data dir is free for the next `up`
        console.print("stopped")


def _say_previous_vms(reaped: up_reaper.Reaped | None, running: int) -> None:
    """What became of the previous run's VMs, when it was killed or kept them."""
    if reaped is not None:
        stopped = f" and {reaped.vms_stopped} VM(s)" if reaped.vms_stopped else ""
        services = ", ".join(reaped.services) or "no service"
        console.print(
            f"the previous run was killed; its reaper stopped {services}{stopped} "
            f"in {reaped.seconds} s"
        )
        if reaped.vms_stopped:
            console.print(
                f"its {reaped.vms_stopped} VM(s) were shut down: each starts again as its "
                "run strategy says (a standalone VMI ends Failed)"
            )
    if running:  # --keep-vms
        console.print(
            f"{running} VM(s) of the previous run kept running: the handlers re-attach to them"
        )


def stored_nodes(
    api_url: str, node_names: list[str], hypervisor: str, sup: Supervisor, stop: threading.Event
) -> None:
    """A resumed cluster's nodes, once the api answers: says in which mode they ran when
    that was another, and cordons each node this run does not start (its handler is not
    coming back: nothing new may be placed on it), saying so and what to do about it."""
    node_kind = REGISTRY.resource("node")
    deadline = time.monotonic() + API_WAIT_SECONDS
    with httpx.Client(timeout=5.0, **credentials.httpx_options(api_url)) as http:
        while not _ready(http, f"{api_url}/readyz"):
            sup.poll()
            if stop.is_set() or time.monotonic() > deadline:
                console.print(
                    "[yellow]warning[/]: the api did not answer: the stored nodes were not checked"
                )
                return
            time.sleep(0.1)
        try:
            listed = http.get(f"{api_url}{node_kind.collection_path()}")
            nodes = listed.json().get("items", []) if listed.is_success else []
        except (httpx.HTTPError, ValueError) as e:
            console.print(f"[yellow]warning[/]: the stored nodes were not checked: {e}")
            return
        ran = sorted(
            {(n["metadata"].get("annotations") or {}).get(HYPERVISOR_ANNOTATION, "test")
             for n in nodes if n["metadata"]["name"] in node_names}
        )  # fmt: skip
        if ran and ran != [hypervisor]:
            console.print(
                f"the stored cluster ran --hypervisor {' and '.join(ran)}; this run is "
                f"--hypervisor {hypervisor}: {MODE_CHANGE[hypervisor]}"
            )
        for node in nodes:
            name = node["metadata"]["name"]
            cordoned = bool((node.get("spec") or {}).get("unschedulable"))
            if name in node_names:
                if cordoned:
                    console.print(
                        f"{name} is cordoned: `virtstream uncordon {name}` lets work on it"
                    )
                continue
            if not cordoned:
                try:
                    r = http.put(f"{api_url}{node_kind.subresource_path(name, 'cordon', '')}")
                except httpx.HTTPError as e:
                    console.print(f"[yellow]could not cordon {name}[/]: {e}")
                    continue
                if not r.is_success:
                    console.print(f"[yellow]could not cordon {name}[/]: {_message(r)}")
                    continue
            console.print(
                f"{name} of the stored cluster is not started by this run (--nodes "
                f"{len(node_names)}): cordoned, nothing new is placed on it, and its VMIs fail "
                f"over once it is NotReady; `virtstream delete node {name}` removes it, "
                f"`virtstream up --nodes {_index(name) or 'N'}` runs it again "
                f"(then `virtstream uncordon {name}`)"
            )


API_WAIT_SECONDS = 60.0
HYPERVISOR_ANNOTATION = "virtstream.io/hypervisor"
MODE_CHANGE = {
    "qemu": "its nodes rejoin as QEMU nodes and its VMs boot real guests when they start",
    "test": "its nodes rejoin with libvirt's test driver and its VMs run no guest",
}


def _ready(http: httpx.Client, url: str) -> bool:
    try:
        return http.get(url).is_success
    except httpx.HTTPError:
        return False


def _index(node: str) -> int | None:
    """node-3 → 3: the --nodes that runs it again (None for a name up does not give)."""
    prefix, _, number = node.rpartition("-")
    return int(number) if prefix == "node" and number.isdigit() else None


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


def start_pod_network(data_dir: Path, nodes: list[str]) -> pod_network.PodNetwork | str:
    """The cluster's pod network (a bridge per node in a namespace of its own); a host that
    cannot make one gets QEMU's user-mode networking, said in one line (and in each node's
    NetworkUnavailable condition): then the reason is returned."""
    try:
        net = pod_network.ensure(data_dir, nodes)
    except pod_network.PodNetworkUnavailable as e:
        console.print(f"[yellow]pod network[/]: none, guests get user-mode networking ({e})")
        return str(e)
    first = next(iter(net.nodes.values()))
    console.print(
        f"pod network: a bridge per node in network namespace {net.netns} "
        f"({first.cidr} on {nodes[0]}, ...)"
    )
    return net


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

    image_dir = (image_dir or default_image_dir()).resolve()
    try:
        with console.status(f"guest images in {image_dir}"):
            guest_images.ensure_images(image_dir, log=console.print)  # once; then a no-op
    except guest_images.GuestBuildError as exc:
        console.print(f"[yellow]warning[/]: no built guest image ({exc}); only added images boot")
    first = next(iter(runtimes.values()))
    # once for all handlers: the guest image booted under KVM (and TCG) on the first node;
    # cached per host and image
    with console.status("probing KVM and TCG with the guest image"):
        probe = domain_type(first.uri, image_dir)
    kind = "kvm" if str(probe.domain_type) == "kvm" else "qemu (software emulation, TCG)"
    console.print(f"domain type {kind}: {probe.reason}")
    common: tuple[str, ...] = ("--domain-type", str(probe.domain_type), "--disk-dir", str(disk_dir))
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
    token_file: Path | None = None,
    auth: prometheus_auth.BasicAuth | None = None,
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
            token_file=token_file,
            auth=auth,
        )
    console.print(f"[green]Prometheus[/] {prom.url}")
    if auth is not None:
        source = prometheus_auth.grafana_datasource(data_dir, prom.url, auth)
        console.print(
            f"  user {auth.user}, password in {auth.password_file}; Grafana data source: {source}"
        )
    console.print("  dashboards to import: ops/grafana/dashboards/*.json")
    return prom


def _print_urls(
    servers: list[NatsServer],
    nats_url: str,
    api_url: str,
    specs: list[ServiceSpec],
    log_dir: Path,
) -> None:
    table = Table(title="virtstream", show_header=True)
    table.add_column("service")
    table.add_column("url")
    table.add_row("NATS", nats_url)
    for server in (s for s in servers if s.monitoring_url):  # --nats-monitoring
        label = f"NATS {server.name}" if len(servers) > 1 else "NATS"
        table.add_row(f"{label} monitoring (unauthenticated)", server.monitoring_url)
    for spec in specs:
        if spec.name == "api":
            table.add_row("API", api_url)
        table.add_row(f"{spec.name} metrics", spec.metrics_url)
    console.print(table)
    console.print(f"logs in {log_dir}")
    console.print("Ctrl-C stops the cluster")


class NatsStartError(RuntimeError):
    """An embedded nats-server did not come up; the message says where to look."""


def start_nats(
    sup: Supervisor,
    data_dir: Path,
    port: int,
    size: int,
    sync_interval: str,
    timeout: float = 30.0,
    *,
    authorization: str = "",
    tls: tuple[Path, Path] | None = None,
    monitoring: bool = False,
    probe: connection.ConnectOptions | None = None,
) -> list[NatsServer]:
    """The embedded nats-server(s) as supervised services (restarted on the same store dir
    and ports when they exit); returns once JetStream answers on all of them (asked as
    `probe`'s user unless `monitoring` opens the unauthenticated monitoring port)."""
    logs = data_dir / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    if size == 1:
        servers = [
            NatsServer(
                data_dir / "nats",
                port=port,
                log_file=logs / "nats-server.log",
                sync_interval=sync_interval,
                authorization=authorization,
                tls=tls,
                monitoring=monitoring,
                client=probe,
            )
        ]
    else:
        ports = [port or free_port(), *(free_port() for _ in range(size - 1))]
        cert, key = tls or ("", "")
        servers = [
            NatsServer.from_settings(
                msgspec.structs.replace(
                    s, authorization=authorization, tls_cert=str(cert), tls_key=str(key)
                ),
                logs / f"{s.name}.log",
                probe,
            )
            for s in local_cluster(
                size,
                data_dir,
                sync_interval=sync_interval,
                client_ports=ports,
                monitoring=monitoring,
            )
        ]
    names = ["nats-server"] if size == 1 else [s.name for s in servers]
    supervised = []
    for name, server in zip(names, servers, strict=True):
        server.prepare()
        # umask 077: the server's data and log files are the owner's alone
        added = sup.add(
            ServiceSpec(name=name, command=tuple(server.command()), umask=0o077, stop_last=True)
        )
        assert added is not None
        supervised.append(added)
    deadline = time.monotonic() + timeout
    with console.status(f"starting {len(servers)} nats-server(s)"):
        while not all(s.ready(clustered=size > 1) for s in servers):
            for name, server, proc in zip(names, servers, supervised, strict=True):
                if not proc.running:
                    raise NatsStartError(f"{name} exited at start; see {server.log_file}")
            if time.monotonic() > deadline:
                raise NatsStartError(f"nats-server not ready after {timeout:.0f}s; see {logs}")
            time.sleep(0.05)
    return servers  # fmt: skip


def shutdown_vms(api_url: str, run_dir: Path, api_running: bool) -> None:
    """Stop every VM (through the API, so the events say so), then make sure no launcher
    is left: SIGTERM (the launcher shuts its domain down gracefully), then SIGKILL."""
    if not live_launchers(run_dir):
        return
    if api_running:
        with contextlib.suppress(httpx.HTTPError, ValueError):
            stop_all_through_api(api_url)
        wait_launchers(run_dir, 15.0)
    if pids := live_launchers(run_dir):
        console.print(f"terminating {len(pids)} launcher(s)")
        terminate_launchers(run_dir)


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


def _key_file(data_dir: Path, name: str) -> Path:
    """A signing key (the controller's for VirtualMachineExport tokens, the api's for
    CDI's upload tokens): made once per data dir, readable by its owner only."""
    path = data_dir / name
    if not path.exists():
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(secrets.token_bytes(32))
    return path
