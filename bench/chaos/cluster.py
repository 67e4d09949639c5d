"""The cluster the chaos suite runs: three nats-servers, an api, two controllers (active and
standby) and two handlers, each host a network namespace (`netns.Hosts`), every process
supervised (`ops.supervisor`: restarted when it exits, as `up` and systemd do)."""

from __future__ import annotations

import json
import sys
import threading
import time
import urllib.request
from pathlib import Path

from bench.chaos.netns import Hosts
from ops.nats_config import ClusterSettings, ServerSettings, render
from ops.nats_server import find_binary
from ops.supervisor import ServiceSpec, Supervised, Supervisor

NATS_HOSTS = ["nats1", "nats2", "nats3"]
NODES = {"node-1": "h1", "node-2": "h2"}  # node → its host
HOSTS = [*NATS_HOSTS, "api", "ctl", "h1", "h2", "client"]
API_PORT = 8080


class ChaosCluster:
    def __init__(self, work: Path, run_id: int, node_timeout: float) -> None:
        self.work = work
        self.hosts = Hosts(HOSTS, run_id)
        self.node_timeout = node_timeout
        self.sup = Supervisor(work / "logs", say=lambda _: None)
        self._polling = threading.Event()
        self._poller: threading.Thread | None = None

    # ------------------------------------------------------------------ addresses
    def addr(self, host: str) -> str:
        return self.hosts.addresses[host]

    @property
    def nats_url(self) -> str:
        return ",".join(f"nats://{self.addr(h)}:4222" for h in NATS_HOSTS)

    @property
    def api_url(self) -> str:
        return f"http://{self.addr('api')}:{API_PORT}"

    def run_dir(self, node: str) -> Path:
        return self.work / "run" / NODES[node]

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> None:
        """The hosts, then (from inside the `client` host, where this process stays) the
        services. Call it while this process has one thread."""
        self.hosts.create()
        self.hosts.enter("client")
        routes = tuple(f"nats-route://{self.addr(h)}:6222" for h in NATS_HOSTS)
        for i, host in enumerate(NATS_HOSTS):
            store = self.work / host
            store.mkdir(parents=True, exist_ok=True)
            settings = ServerSettings(
                name=f"nats-{i + 1}",
                host=self.addr(host),
                port=4222,
                http_port=8222,
                store_dir=str(store),
                cluster=ClusterSettings(host=self.addr(host), port=6222, routes=routes),
            )
            conf = store / "nats-server.conf"
            conf.write_text(render(settings))
            log = self.work / "logs" / f"{host}.log"
            self._add(host, host, [find_binary(), "-c", str(conf), "-l", str(log)], last=True)
        py = [sys.executable, "-m", "cli.main", "serve"]
        common = ["--nats-url", self.nats_url]
        self._add("api", "api", [*py, "api", *common, "--host", self.addr("api"),
                                 "--port", str(API_PORT)])  # fmt: skip
        for i in (1, 2):
            self._add(f"controller-{i}", "ctl", [*py, "controller", *common, "--identity",
                      f"controller-{i}", "--node-timeout", str(self.node_timeout)])  # fmt: skip
        for node, host in NODES.items():
            self._add(f"handler-{node}", host, [
                *py, "handler", *common, "--node", node, "--run-dir", str(self.work / "run" / host),
                "--node-timeout", str(self.node_timeout), "--memory", "64Gi", "--cpus", "512",
            ])  # fmt: skip
        self._polling.set()
        self._poller = threading.Thread(target=self._poll, daemon=True)
        self._poller.start()

    def _add(self, name: str, host: str, argv: list[str], last: bool = False) -> None:
        env = {"VIRTSTREAM_STREAM_REPLICAS": "3"}
        command = tuple(self.hosts.run_in(host, argv))
        self.sup.add(ServiceSpec(name=name, command=command, env=env, stop_last=last))

    def _poll(self) -> None:
        while self._polling.is_set():
            self.sup.poll()
            time.sleep(0.2)

    def stop(self) -> None:
        self._polling.clear()
        if self._poller is not None:
            self._poller.join(5)
        self.sup.stop(timeout=15)
        from ops.up_reaper import terminate_launchers

        for host in NODES.values():  # <run-dir>/<node>/launchers/ per host
            terminate_launchers(self.work / "run" / host, grace=5)
        self.hosts.destroy()

    # ------------------------------------------------------------------ processes
    def service(self, name: str) -> Supervised:
        return next(s for s in self.sup.services if s.spec.name == name)

    def pid(self, name: str) -> int:
        proc = self.service(name).proc
        assert proc is not None
        return proc.pid

    def meta_leader(self) -> str:
        """The NATS host whose server leads the JetStream meta group."""
        for host in NATS_HOSTS:
            try:
                with urllib.request.urlopen(f"http://{self.addr(host)}:8222/jsz", timeout=2) as r:
                    leader = json.load(r).get("meta_cluster", {}).get("leader", "")
            except OSError:
                continue
            if leader:
                return NATS_HOSTS[int(leader.rsplit("-", 1)[1]) - 1]
        raise RuntimeError("no JetStream meta leader")
