"""`virtstream up` as an operator meets it: a taken port is one line and a non-zero exit
before anything starts; the embedded nats-server is supervised like every service (killed,
it is restarted on the same store and creates are accepted again); launchers are named for
their VMI; and an `up` killed with SIGKILL leaves no process behind, launchers included."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import nats
import pytest

from cli.up import live_launchers
from client import credentials
from ops.ports import free_port
from tests.integration.polling import until, up_client

REPO = Path(__file__).resolve().parents[2]
VMS = "/apis/kubevirt.io/v1/namespaces/default/virtualmachines"
VMIS = "/apis/kubevirt.io/v1/namespaces/default/virtualmachineinstances"


def vm(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "kubevirt.io/v1", "kind": "VirtualMachine",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"runStrategy": "Always", "template": {"spec": {
            "domain": {"memory": {"guest": "64Mi"}, "devices": {}},
            "terminationGracePeriodSeconds": 0}}},
    }  # fmt: skip


def phase(http: httpx.Client, name: str) -> str:
    r = http.get(f"{VMIS}/{name}")
    return str(r.json()["status"].get("phase", "")) if r.status_code == 200 else ""


def up_argv(data_dir: Path, port: int, nats_port: int, *extra: str) -> list[str]:
    return [sys.executable, "-m", "cli.main", "up", "--data-dir", str(data_dir),
            "--port", str(port), "--nats-port", str(nats_port), *extra]  # fmt: skip


def processes_of(data_dir: Path) -> list[str]:
    """Command lines of live processes that name the data dir, or are its launchers."""
    found = []
    launcher_pids = set(live_launchers(data_dir / "run"))
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == os.getpid():
            continue
        try:
            cmd = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            state = (proc / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state != "Z" and (str(data_dir) in cmd or int(proc.name) in launcher_pids):
            found.append(f"{proc.name}: {cmd}")
    return found


@pytest.fixture
def data_dir() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="vs-ops-") as d:
        yield Path(d)
        for pid in live_launchers(Path(d) / "run"):
            os.kill(pid, signal.SIGKILL)


@pytest.mark.parametrize("which", ["--nats-port", "--port"])
def test_a_taken_port_is_one_line_and_a_non_zero_exit(data_dir: Path, which: str) -> None:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        busy = holder.getsockname()[1]
        port, nats_port = (free_port(), busy) if which == "--nats-port" else (busy, free_port())
        done = subprocess.run(
            up_argv(data_dir, port, nats_port), cwd=REPO, capture_output=True, timeout=30,
            env={**os.environ, "COLUMNS": "300"},
        )  # fmt: skip
    out = (done.stdout + done.stderr).decode()
    lines = [line for line in out.splitlines() if line.strip()]
    assert done.returncode == 1, out
    assert len(lines) == 1 and "Traceback" not in out, out
    assert f"port {busy} already in use" in lines[0] and which in lines[0], lines[0]
    assert not processes_of(data_dir)


def test_nats_restarted_launchers_named_and_kill_9_of_up_leaves_nothing(data_dir: Path) -> None:
    port, nats_port = free_port(), free_port()
    up = subprocess.Popen(
        up_argv(data_dir, port, nats_port), cwd=REPO, stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        with up_client(port, timeout=5) as http:
            until(lambda: http.get("/readyz").is_success, what="the api ready")
            assert http.post(VMS, json=vm("before")).status_code == 201
            until(lambda: phase(http, "before") == "Running", what="the VM running")
            # the launcher names its VMI in ps, not the zygote's command line
            (pid,) = live_launchers(data_dir / "run")
            title = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
            assert title.startswith("virt-launcher default/before"), title

            # the embedded nats-server killed: restarted on the same store, creates accepted
            (nats,) = [p for p in processes_of(data_dir) if "nats-server -c" in p]
            os.kill(int(nats.split(":")[0]), signal.SIGKILL)
            # (a request that timed out while the server was down may have landed since: 409)
            until(
                lambda: http.post(VMS, json=vm("after")).status_code in (201, 409),
                what="a create accepted after the restart",
                every=0.5,
            )
            until(lambda: phase(http, "after") == "Running", what="the new VM running")
            assert http.get(f"{VMS}/before").is_success  # the store survived the restart
            assert up.poll() is None
        up.kill()  # SIGKILL: no `finally` of up's own runs
        up.wait()
        until(lambda: not processes_of(data_dir), timeout=30, what="every process gone")
    finally:
        if up.poll() is None:
            up.kill()
            up.wait()


async def stream_replicas_and_leader(url: str) -> tuple[int, str]:
    nc = await nats.connect(url, **credentials.nats_options(url, "admin"))
    try:
        info = await nc.jetstream().stream_info("VIRT")
        assert info.cluster is not None
        return int(info.config.num_replicas or 1), str(info.cluster.leader)
    finally:
        await nc.close()


@contextlib.contextmanager
def explained(data_dir: Path, up_out: Path) -> Iterator[None]:
    """A failed assertion told with what `up` printed and its services' warnings."""
    try:
        yield
    except AssertionError as e:
        told = [up_out.read_text(errors="replace")[-4000:]]
        for log in sorted((data_dir / "logs").glob("*.log")):
            lines = log.read_text(errors="replace").splitlines()
            bad = [line[:300] for line in lines if '"level":"warning"' in line or "Error" in line]
            told.append(f"--- {log.name}: {len(lines)} lines\n" + "\n".join(bad[-15:]))
        raise AssertionError(f"{e}\n" + "\n".join(told)) from e


def test_nats_cluster_of_3_loses_a_server_invisibly(data_dir: Path) -> None:
    port, nats_port = free_port(), free_port()
    up_out = data_dir / "up.out"
    with up_out.open("wb") as out:
        up = subprocess.Popen(
            up_argv(data_dir, port, nats_port, "--nats-cluster", "3"), cwd=REPO,
            stdout=out, stderr=subprocess.STDOUT,
        )  # fmt: skip
    try:
        with up_client(port, timeout=30) as http, explained(data_dir, up_out):
            until(lambda: http.get("/readyz").is_success, timeout=120, what="the api ready")
            assert http.post(VMS, json=vm("before")).status_code == 201
            url = f"nats://127.0.0.1:{nats_port}"
            replicas, leader = asyncio.run(stream_replicas_and_leader(url))
            assert replicas == 3
            # the stream's leader killed: the others elect one, the api retries meanwhile
            store = f"{data_dir}/nats-{leader.rsplit('-', 1)[1]}/"
            (victim,) = [p for p in processes_of(data_dir) if "nats-server -c " + store in p]
            os.kill(int(victim.split(":")[0]), signal.SIGKILL)
            assert http.post(VMS, json=vm("after")).status_code == 201  # no retry by us
            # the services ask again through the elections (a few seconds); under load a
            # consumer's may take longer, and a delivery in flight when the leader died
            # comes again after its ack wait
            until(lambda: phase(http, "after") == "Running", 60, "the new VM running")
            until(lambda: phase(http, "before") == "Running", 60, "the first VM running")
            # and the supervisor brought the server back on its store
            until(
                lambda: [p for p in processes_of(data_dir) if "nats-server -c " + store in p],
                what="the killed server restarted",
            )
        up.send_signal(signal.SIGINT)
        with explained(data_dir, up_out):
            try:
                up.wait(timeout=90)
            except subprocess.TimeoutExpired:
                raise AssertionError("up did not stop within 90 s of SIGINT") from None
            assert up.returncode == 0, up_out.read_text()
    finally:
        if up.poll() is None:
            up.kill()
            up.wait()
