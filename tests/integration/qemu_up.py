"""One `virtstream up --hypervisor qemu` for a qemu test module: free ports, a temp data
dir (a short prefix: unix socket paths are limited), its api ready and its nodes
registered, what `up` prints kept as it goes; stopped with SIGINT (as Ctrl-C) and no
launcher left. With what the modules ask of it: a VMI and its phase, its serial console
(the node's log, or a session through the api), the QEMUs and domains of a node, the CLI
against it, the events and `why` from its stream."""

from __future__ import annotations

import json
import os
import re
import signal
import ssl
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import libvirt
from websockets.sync.client import ClientConnection, connect

from cli.up import live_launchers
from client import credentials
from ops import guest_images
from ops.node_libvirtd import connect_uri, processes_in_namespace, read_state
from ops.ports import free_port
from services.launcher.rundir import guest_console_log
from tests.conftest import REPO
from tests.integration.polling import until, up_client

VMS = "/apis/kubevirt.io/v1/namespaces/default/virtualmachines"
VMIS = "/apis/kubevirt.io/v1/namespaces/default/virtualmachineinstances"
SUB_VM = "/apis/subresources.kubevirt.io/v1/namespaces/default/virtualmachines"
SUB_VMI = "/apis/subresources.kubevirt.io/v1/namespaces/default/virtualmachineinstances"
BOOT_TIMEOUT = 120.0  # a TCG boot takes ~3-5 s alone; the machine is shared (and may be busy)


class Cluster:
    def __init__(self, data_dir: Path, nodes: int = 1) -> None:
        self.data_dir = data_dir
        self.nodes = nodes
        self.port = free_port()
        self.nats_port = free_port()
        self.server = f"http://127.0.0.1:{self.port}"  # the CLI finds the credentials
        self.http = httpx.Client()  # the api's, once `up` wrote its credentials (start)
        self.proc: subprocess.Popen[str] | None = None
        self.output: list[str] = []  # what `up` printed, read as it goes
        self._reader: threading.Thread | None = None

    def start(self) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "cli.main", "up", "--data-dir", str(self.data_dir),
             "--port", str(self.port), "--nats-port", str(self.nats_port),
             "--hypervisor", "qemu", "--nodes", str(self.nodes)],
            cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
            env={**os.environ, "COLUMNS": "200"},
        )  # fmt: skip
        self._reader = threading.Thread(target=self._read, args=(self.proc,), daemon=True)
        self._reader.start()
        self.http = up_client(self.port, timeout=10)
        # `up` starts a libvirtd per node and may boot the probe guest first: on a busy
        # machine that is more than the usual 30 s (seen once in a full run); a failure
        # says what `up` printed
        try:
            until(self._api_answers, timeout=BOOT_TIMEOUT, what="the API")
        except AssertionError as e:
            raise AssertionError(f"{e}; up printed:\n" + "\n".join(self.output[-30:])) from None
        until(lambda: len(self.http.get("/api/v1/nodes").json()["items"]) == self.nodes,
              what="the nodes")  # fmt: skip

    def _api_answers(self) -> bool:
        assert self.proc is not None
        if self.proc.poll() is not None:
            raise AssertionError(f"up exited ({self.proc.returncode}) before its API answered")
        return self.http.get(VMS).is_success

    def _read(self, proc: subprocess.Popen[str]) -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            self.output.append(line.rstrip("\n"))

    def stop(self) -> None:
        self.http.close()
        try:
            if self.proc is not None and self.proc.poll() is None:
                self.proc.send_signal(signal.SIGINT)
                try:
                    self.proc.wait(timeout=90)
                except subprocess.TimeoutExpired:
                    self.proc.kill()  # not left running on a shared machine; still a failure
                    self.proc.wait()
                    raise
        finally:
            for pid in live_launchers(self.data_dir / "run"):
                os.kill(pid, signal.SIGKILL)
            if self._reader is not None and self.proc is not None:
                self._reader.join(timeout=10)  # up's output to its end, then its pipe closed
                if not self._reader.is_alive() and self.proc.stdout is not None:
                    self.proc.stdout.close()

    def vmi(self, name: str) -> dict[str, Any]:
        r = self.http.get(f"{VMIS}/{name}")
        r.raise_for_status()
        return dict(r.json())

    def phase(self, name: str, phase: str) -> dict[str, Any]:
        return until(
            lambda: (v := self.vmi(name))["status"].get("phase") == phase and v,
            timeout=BOOT_TIMEOUT,
            what=f"{name} {phase}",
        )

    def console_log(self, name: str) -> Path:
        """The VMI's serial console as its node logs it."""
        node = self.vmi(name)["status"]["nodeName"]
        return guest_console_log(self.data_dir / "run", node, "default", name)

    def console_shows(self, name: str, *patterns: str) -> str:
        """The console log once every pattern (a regex) is in it."""
        log = self.console_log(name)

        def probe() -> str | None:
            text = log.read_text(errors="replace") if log.exists() else ""
            return text if all(re.search(p, text, re.M) for p in patterns) else None

        try:
            return str(until(probe, timeout=BOOT_TIMEOUT, what=f"{patterns} on the console"))
        except AssertionError:
            tail = log.read_text(errors="replace")[-2000:] if log.exists() else "(no log)"
            raise AssertionError(f"{patterns} not on {name}'s console:\n{tail}") from None

    def console_ws(self, name: str) -> ClientConnection:
        """The VMI's serial console through the api (as `virtstream console` opens it)."""
        creds = credentials.for_api(self.server)
        url = creds.server.replace("http", "ws", 1) + f"{SUB_VMI}/{name}/console"
        verify = creds.verify()
        return connect(
            url,
            subprotocols=["plain.kubevirt.io"],  # type: ignore[list-item]
            max_size=None,
            additional_headers=creds.headers(),
            ssl=verify if isinstance(verify, ssl.SSLContext) and url.startswith("wss") else None,
        )

    def domains(self, node: str = "node-1") -> list[str]:
        conn = libvirt.open(connect_uri(self.data_dir / "nodes" / node / "sock"))
        try:
            return [d.name() for d in conn.listAllDomains()]
        finally:
            conn.close()

    def qemus(self, node: str = "node-1") -> list[int]:
        state = read_state(self.data_dir / "nodes" / node)
        assert state is not None
        return [
            pid
            for pid in processes_in_namespace(state.mount_namespace)
            if Path(f"/proc/{pid}/comm").read_text().startswith("qemu")
        ]

    def events(self, name: str) -> list[dict[str, Any]]:
        """The VMI's events as `virtstream events -o json` prints them."""
        done = subprocess.run(
            [sys.executable, "-m", "cli.main", "events", "-a", f"vmi/default/{name}",
             "-o", "json", "--nats-url", f"nats://127.0.0.1:{self.nats_port}"],
            cwd=REPO, capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert done.returncode == 0, done.stdout + done.stderr
        return [json.loads(line) for line in done.stdout.splitlines() if line.strip()]

    def why(self, name: str) -> str:
        done = subprocess.run(
            [sys.executable, "-m", "cli.main", "why", f"vmi/default/{name}",
             "--nats-url", f"nats://127.0.0.1:{self.nats_port}"],
            cwd=REPO, capture_output=True, text=True, timeout=60,
            env={**os.environ, "COLUMNS": "250"},
        )  # fmt: skip
        assert done.returncode == 0, done.stdout + done.stderr
        return done.stdout

    def cli(self, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        env = {**os.environ, "VIRTSTREAM_SERVER": self.server}
        return subprocess.run(
            [sys.executable, "-m", "cli.main", *args],
            cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout,
        )  # fmt: skip

    def popen_cli(self, *args: str) -> subprocess.Popen[str]:
        env = {**os.environ, "VIRTSTREAM_SERVER": self.server}
        return subprocess.Popen(
            [sys.executable, "-m", "cli.main", *args], cwd=REPO, env=env, text=True,
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        )  # fmt: skip

    def delete_vmi(self, name: str) -> None:
        self.http.delete(f"{VMIS}/{name}", params={"gracePeriodSeconds": 0})
        until(lambda: self.http.get(f"{VMIS}/{name}").status_code == 404, what=f"{name} gone")


@contextmanager
def running_cluster(prefix: str, nodes: int = 1) -> Iterator[Cluster]:
    """`up --hypervisor qemu` with `nodes` nodes in a temporary data dir named from a
    short `prefix`, stopped at the end."""
    guest_images.ensure_images()  # a no-op after `ops/install.sh --qemu`
    with tempfile.TemporaryDirectory(prefix=prefix) as d:
        c = Cluster(Path(d), nodes=nodes)
        try:
            c.start()
            yield c
        finally:
            c.stop()


def read_for(ws: ClientConnection, seconds: float) -> str:
    """What a console session gave in `seconds`."""
    out, end = b"", time.monotonic() + seconds
    while (left := end - time.monotonic()) > 0:
        try:
            data = ws.recv(timeout=left)
        except TimeoutError:
            break
        out += data if isinstance(data, bytes) else data.encode()
    return out.decode(errors="replace")
