"""`virtstream up` killed with SIGKILL and started again at once, as systemd's `Restart=`
does: the new run waits until the killed run's reaper has stopped what that run left (and
says so), nothing of the killed run touches the new one, and the VMs start again (or, with
--keep-vms, keep running on the launchers they had), the log saying which. A second `up`
on a data dir that one runs on is refused in one line."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import msgspec
import pytest

from cli.up import live_launchers
from host.procs import pid_alive, start_time
from ops.ports import free_port
from ops.supervisor import Recorded
from tests.integration.polling import until, up_client

REPO = Path(__file__).resolve().parents[2]
VMS = "/apis/kubevirt.io/v1/namespaces/default/virtualmachines"
VMIS = "/apis/kubevirt.io/v1/namespaces/default/virtualmachineinstances"
NAMES = [f"vm-{i}" for i in range(4)]


def vm(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "kubevirt.io/v1", "kind": "VirtualMachine",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"runStrategy": "Always", "template": {"spec": {
            "domain": {"memory": {"guest": "64Mi"}, "devices": {}},
            "terminationGracePeriodSeconds": 0}}},
    }  # fmt: skip


@pytest.fixture
def data_dir() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="vs-restart-") as d:
        yield Path(d)
        for pid in live_launchers(Path(d) / "run"):
            os.kill(pid, signal.SIGKILL)  # SIGSTOPped ones included


class Up:
    """One `virtstream up` process on the data dir, its output in a file."""

    def __init__(self, data_dir: Path, port: int, nats_port: int, name: str, *extra: str):
        self.out = data_dir.parent / f"{data_dir.name}-{name}.log"
        with self.out.open("wb") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "cli.main", "up", "--data-dir", str(data_dir),
                 "--port", str(port), "--nats-port", str(nats_port), "--nodes", "2", *extra],
                cwd=REPO, stdout=out, stderr=subprocess.STDOUT,
                env={**os.environ, "COLUMNS": "300"},
            )  # fmt: skip

    def said(self) -> str:
        return self.out.read_text(errors="replace")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.out.unlink(missing_ok=True)


def reaper_of(data_dir: Path) -> int:
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                cmd = (proc / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if b"ops.up_reaper" in cmd and str(data_dir).encode() in cmd:
                return int(proc.name)
    raise AssertionError(f"no reaper runs for {data_dir}")


def recorded(data_dir: Path) -> dict[str, tuple[int, int | None]]:
    """The services up.json records: name → (pid, start time)."""
    state = msgspec.json.decode((data_dir / "up.json").read_bytes(), type=dict[str, Recorded])
    return {name: (r.pid, start_time(r.pid)) for name, r in state.items()}


def all_running(http: httpx.Client, old_launchers: set[int], run_dir: Path) -> bool:
    """Every VM Running, on exactly one launcher each, none of them the killed run's."""
    vmis = http.get(VMIS).json()["items"]
    phases = {v["metadata"]["name"]: v.get("status", {}).get("phase") for v in vmis}
    launchers = set(live_launchers(run_dir))
    return (
        phases == dict.fromkeys(NAMES, "Running")
        and len(launchers) == len(NAMES)
        and not launchers & old_launchers
    )


def start_vms(http: httpx.Client, run_dir: Path) -> set[int]:
    until(lambda: http.get("/readyz").is_success, 90, "the api ready")
    until(lambda: len(http.get("/api/v1/nodes").json()["items"]) == 2, 30, "both nodes")
    for name in NAMES:
        assert http.post(VMS, json=vm(name)).status_code == 201
    until(lambda: all_running(http, set(), run_dir), 60, "the VMs running")
    return set(live_launchers(run_dir))


@pytest.mark.timeout(300)
def test_a_restart_within_half_a_second_waits_for_the_reaper_and_is_left_alone(
    data_dir: Path,
) -> None:
    port, nats_port = free_port(), free_port()
    run_dir = data_dir / "run"
    old = Up(data_dir, port, nats_port, "old")
    new: Up | None = None
    try:
        with up_client(port, timeout=5) as http:  # closed: the api stops at once when told
            launchers = start_vms(http, run_dir)
        reaper = reaper_of(data_dir)
        # a stopped launcher acts on SIGTERM only once continued: the reaper is at it for
        # its whole grace (10 s), then SIGKILLs it
        stuck = min(launchers)
        os.kill(stuck, signal.SIGSTOP)

        # `up` and every service of its run die at once (SIGKILL: no `finally` runs, no
        # clean stop), so the next `up` could start in a second: only the killed run's
        # reaper and its launchers are left
        services = recorded(data_dir)
        old.proc.kill()
        for pid, _ in services.values():
            os.kill(pid, signal.SIGKILL)
        old.proc.wait()
        time.sleep(0.2)  # systemd's Restart= with RestartSec under 0.5 s
        new = Up(data_dir, port, nats_port, "new")
        # the race is on: the killed run's reaper is still stopping its launchers
        assert pid_alive(reaper) and pid_alive(stuck)

        with up_client(port, timeout=5) as http:
            until(lambda: all_running(http, launchers, run_dir), 120, "the VMs running again")
            until(lambda: not pid_alive(reaper), 40, "the reaper done")
            ours = recorded(data_dir)
            assert set(ours) == {"nats-server", "api", "controller", "upkeep",
                                 "handler node-1", "handler node-2"}  # fmt: skip
            time.sleep(2)  # whatever the killed run's reaper did, it has done by now
            said = new.said()
            assert new.proc.poll() is None, said
            assert " exited" not in said, said  # no service of the new run was stopped
            assert recorded(data_dir) == ours, said  # the same processes, still running
            assert all(started is not None for _, started in ours.values()), ours
            assert all_running(http, launchers, run_dir), said  # no launcher of it killed
            assert not pid_alive(stuck)
        # it said it waited, and what became of the VMs
        assert "waiting for the killed previous run's reaper" in said, said
        assert "the previous run's reaper is done" in said, said
        assert "its 4 VM(s) were shut down: each starts again" in said, said
        assert "kept running" not in said, said
    finally:
        if new is not None:
            new.stop()
        old.stop()


@pytest.mark.timeout(300)
def test_with_keep_vms_the_restart_keeps_the_vms_on_their_launchers(data_dir: Path) -> None:
    port, nats_port = free_port(), free_port()
    run_dir = data_dir / "run"
    old = Up(data_dir, port, nats_port, "old", "--keep-vms")
    new: Up | None = None
    try:
        with up_client(port, timeout=5) as http:
            launchers = start_vms(http, run_dir)
            old.proc.kill()
            old.proc.wait()
            time.sleep(0.2)
            new = Up(data_dir, port, nats_port, "new", "--keep-vms")
            until(lambda: http.get("/readyz").is_success, 90, "the new run's api ready")
            until(lambda: len(http.get("/api/v1/nodes").json()["items"]) == 2, 30, "nodes")
            until(
                lambda: all(
                    v.get("status", {}).get("phase") == "Running"
                    for v in http.get(VMIS).json()["items"]
                ),
                30,
                "the VMs running",
            )
            time.sleep(2)
            said = new.said()
            assert set(live_launchers(run_dir)) == launchers, said  # the same launchers
            assert " exited" not in said, said
            assert "the previous run was killed" in said, said
            assert "4 VM(s) of the previous run kept running" in said, said
            assert "were shut down" not in said, said

            # a second `up` on the data dir while this one runs: one line, exit 1
            other = subprocess.run(
                [sys.executable, "-m", "cli.main", "up", "--data-dir", str(data_dir),
                 "--port", str(free_port()), "--nats-port", str(free_port())],
                cwd=REPO, capture_output=True, timeout=60, env={**os.environ, "COLUMNS": "300"},
            )  # fmt: skip
            lines = (other.stdout + other.stderr).decode().strip().splitlines()
            assert other.returncode == 1, lines
            assert lines == [
                f"error: another `virtstream up` (pid {new.proc.pid}) runs on {data_dir}"
            ]
    finally:
        if new is not None:
            new.stop()
        old.stop()
