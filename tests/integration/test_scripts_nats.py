"""The script examples against a real `virtstream up`: each creates a VM, starts it and
waits for its VMI to be Running through NATS alone (Python with nats-py; Node with the
`nats` npm package, installed into a temporary directory), with the admin's api token on
its intents (an intent without one is refused: `tests/integration/test_doors.py`)."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from cli.up import live_launchers
from ops.nats_server import free_port
from ops.supervisor import importable, interrupt
from tests.integration.polling import until, up_client

REPO = Path(__file__).resolve().parents[2]
SCRIPTS = REPO / "examples" / "scripts"

pytestmark = pytest.mark.skipif(
    not (importable("services.api") and importable("services.controller")),
    reason="api and controller are needed",
)


def _ready(nats_url: str) -> bool:
    # the intent service answers discovery once the api is up
    probe = (
        "import asyncio, nats\n"
        "async def m():\n"
        f"    nc = await nats.connect('{nats_url}')\n"
        "    await nc.request('$SRV.PING.virt-api', b'', timeout=1)\n"
        "    await nc.close()\n"
        "asyncio.run(m())\n"
    )
    return subprocess.run([sys.executable, "-c", probe], capture_output=True).returncode == 0


@pytest.fixture(scope="module")
def cluster() -> Iterator[tuple[str, str]]:
    """`virtstream up` on free ports; yields its NATS URL and the admin's api token."""
    with tempfile.TemporaryDirectory(prefix="vs-scripts-") as d:
        port, nats_port = free_port(), free_port()
        up = subprocess.Popen(
            [sys.executable, "-m", "cli.main", "up", "--data-dir", d, "--port", str(port),
             "--nats-port", str(nats_port)],
            cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        try:
            with up_client(port, timeout=5) as http:
                until(lambda: http.get("/readyz").is_success, timeout=60)
            # the scripts' NATS user (`up` keeps its password in the data dir)
            password = (Path(d) / "credentials" / "nats-scripts").read_text().strip()
            url = f"nats://scripts:{password}@127.0.0.1:{nats_port}"
            until(lambda: _ready(url), timeout=30)
            yield url, (Path(d) / "credentials" / "admin-token").read_text().strip()
        finally:
            interrupt(up, 60)
            for pid in live_launchers(Path(d) / "run"):
                os.kill(pid, signal.SIGKILL)


def _check(out: subprocess.CompletedProcess[str], name: str) -> None:
    assert out.returncode == 0, out.stdout + out.stderr
    assert f"default/{name} is Running" in out.stdout
    assert "DomainStarted" in out.stdout


def test_python_script_starts_a_vm(cluster: tuple[str, str]) -> None:
    url, token = cluster
    out = subprocess.run(
        [sys.executable, str(SCRIPTS / "start_vm.py"), "--nats-url", url, "--name", "py-vm"],
        capture_output=True, text=True, timeout=120,
        env={**os.environ, "VIRTSTREAM_TOKEN": token},
    )  # fmt: skip
    _check(out, "py-vm")


@pytest.mark.skipif(not (shutil.which("node") and shutil.which("npm")), reason="needs Node")
def test_node_script_starts_a_vm(cluster: tuple[str, str], tmp_path: Path) -> None:
    url, token = cluster
    install = subprocess.run(
        ["npm", "install", "--silent", "--no-audit", "--no-fund", "nats@2"],
        cwd=tmp_path, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert install.returncode == 0, install.stderr
    script = tmp_path / "start_vm.mjs"  # beside node_modules, so `import "nats"` resolves
    shutil.copy(SCRIPTS / "start_vm.mjs", script)
    out = subprocess.run(
        ["node", str(script), "--name", "node-vm"],
        capture_output=True, text=True, timeout=120,
        env={**os.environ, "NATS_URL": url, "VIRTSTREAM_TOKEN": token},
    )  # fmt: skip
    _check(out, "node-vm")
