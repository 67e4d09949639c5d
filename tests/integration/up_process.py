"""One `virtstream up` subprocess for a test module: free ports, a temp data dir, its api
ready and its nodes registered; stopped with SIGINT (as Ctrl-C) and no launcher left."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx

from cli.up import live_launchers
from ops.ports import free_port
from tests.conftest import REPO
from tests.integration.polling import until, up_client


@dataclass
class RunningUp:
    data_dir: Path
    port: int
    nats_port: int
    http: httpx.Client  # with the credentials `up` wrote

    @property
    def url(self) -> str:
        return str(self.http.base_url).rstrip("/")

    @property
    def nats_url(self) -> str:
        return f"nats://127.0.0.1:{self.nats_port}"


@contextmanager
def running_up(
    prefix: str, nodes: int, *extra: str, data_dir: Path | None = None
) -> Iterator[RunningUp]:
    """`data_dir`: the test's own (kept afterwards), else a temporary one."""
    port, nats_port = free_port(), free_port()
    with (
        contextlib.nullcontext(str(data_dir))
        if data_dir is not None
        else tempfile.TemporaryDirectory(prefix=prefix)
    ) as d:
        proc = subprocess.Popen(
            [sys.executable, "-m", "cli.main", "up", "--data-dir", d, "--port", str(port),
             "--nats-port", str(nats_port), "--nodes", str(nodes), *extra],
            cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        )  # fmt: skip
        try:
            with up_client(port, timeout=10) as http:
                until(lambda: http.get("/readyz").is_success, 60, "the api")
                until(lambda: len(http.get("/api/v1/nodes").json()["items"]) == nodes, 30, "nodes")
                yield RunningUp(Path(d), port, nats_port, http)
        finally:
            proc.send_signal(signal.SIGINT)
            try:
                proc.communicate(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.communicate()
            for pid in live_launchers(Path(d) / "run"):
                os.kill(pid, signal.SIGKILL)
