"""`python -m bench.chaos [--vms N] [--per-fault K] [--json]`: faults one at a time over a VM
workload on a cluster of network-namespace hosts (bench/chaos/cluster.py), and after each
one what became of the VMs: acknowledged creates lost, VMs run twice, and how long until
every VM was Running again and `virtstream verify` passed.

The last row is `virtstream up` itself, the one-machine install: killed with SIGKILL while
VMs are created, then started again on its data dir as systemd's `Restart=` would.

The default (100 VMs, 10 created during each fault) is what CI runs
(tests/integration/test_chaos.py), about a minute and a half. Needs root (namespaces)."""

from __future__ import annotations

import argparse
import collections
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

from bench.chaos.cluster import NODES, ChaosCluster
from client import credentials
from ops.ports import free_port
from ops.supervisor import interrupt
from ops.up_reaper import live_launchers

VMS = "/apis/kubevirt.io/v1/namespaces/default/virtualmachines"
VMIS = "/apis/kubevirt.io/v1/namespaces/default/virtualmachineinstances"
REPO = Path(__file__).resolve().parents[2]
VERIFY_ATTEMPTS = 5  # 2 s apart


def vm(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "kubevirt.io/v1", "kind": "VirtualMachine",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"runStrategy": "Always", "template": {"spec": {
            "domain": {"memory": {"guest": "64Mi"}, "devices": {}},
            "terminationGracePeriodSeconds": 0}}},
    }  # fmt: skip


def launcher_titles() -> collections.Counter[str]:
    """Live launchers per VMI name, from their process titles (one domain each)."""
    seen: collections.Counter[str] = collections.Counter()
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmd = (proc / "cmdline").read_bytes()
        except OSError:
            continue
        if cmd.startswith(b"virt-launcher default/"):
            seen[cmd.split(b"/", 1)[1].split()[0].decode()] += 1
    return seen


class Run:
    """The workload on one api: what it acknowledged, what ran twice, whether it settled."""

    def __init__(self, api_url: str, nats_url: str) -> None:
        self.api_url, self.nats_url = api_url, nats_url
        # an `up` writes its credentials as it starts: wait for them
        opts = credentials.httpx_options(api_url, wait=30 if api_url.startswith("https") else 0)
        self.http = httpx.Client(timeout=10, **opts)
        self.acked: set[str] = set()
        self.ours: set[str] = set()  # VM names of this run: other runs' launchers are not ours
        self.most_launchers: dict[str, int] = {}
        self._watching = threading.Event()

    # ------------------------------------------------------------------ workload
    def create(self, name: str, retry_for: float = 0.0) -> bool:
        """POST the VM; with `retry_for`, as a client would: again while the api is away or
        unavailable (a 409 then means an earlier attempt landed: it exists)."""
        self.ours.add(name)
        deadline = time.monotonic() + retry_for
        while True:
            try:
                status = self.http.post(VMS, json=vm(name)).status_code
            except httpx.HTTPError:
                status = 0
            if status == 201 or (status == 409 and retry_for):
                self.acked.add(name)
                return True
            if status not in (0, 500, 502, 503, 504) or time.monotonic() > deadline:
                return False
            time.sleep(0.5)

    def create_many(self, names: list[str], spread: float) -> threading.Thread:
        def go() -> None:
            for name in names:
                self.create(name, retry_for=30)
                time.sleep(spread)

        t = threading.Thread(target=go, daemon=True)
        t.start()
        return t

    # ------------------------------------------------------------------ watching
    def watch_duplicates(self) -> None:
        """Every 0.2 s: the most launchers seen at once for each VM (more than 1: twice)."""
        self._watching.set()

        def go() -> None:
            while self._watching.is_set():
                for name, n in launcher_titles().items():
                    if name in self.ours and n > self.most_launchers.get(name, 0):
                        self.most_launchers[name] = n
                time.sleep(0.2)

        threading.Thread(target=go, daemon=True).start()

    def stop_watching(self) -> None:
        self._watching.clear()

    def duplicated(self) -> set[str]:
        return {n for n, most in self.most_launchers.items() if most > 1}

    # ------------------------------------------------------------------ checks
    def state(self) -> dict[str, str] | None:
        """VM name → printableStatus, when the api answers."""
        try:
            r = self.http.get(VMS)
            if not r.is_success:
                return None
            return {
                v["metadata"]["name"]: v.get("status", {}).get("printableStatus", "")
                for v in r.json()["items"]
            }
        except (httpx.HTTPError, ValueError, KeyError):
            return None

    def settled(self) -> bool:
        """Every acknowledged VM exists and is Running, each VMI Running on exactly one
        launcher."""
        st = self.state()
        if st is None or not self.acked <= set(st) or any(s != "Running" for s in st.values()):
            return False
        try:
            vmis = self.http.get(VMIS).json()["items"]
        except (httpx.HTTPError, ValueError, KeyError):
            return False
        if any(v.get("status", {}).get("phase") != "Running" for v in vmis):
            return False
        launchers = launcher_titles()
        return all(launchers.get(name) == 1 for name in st)

    def lost(self) -> set[str]:
        st = self.state() or {}
        return self.acked - set(st)

    def verify(self) -> tuple[bool, str]:
        """`virtstream verify` passed, and what it said when it did not. A JetStream request
        that timed out (the meta group still settling after a leader change) is asked
        again, a few times: that is NATS being slow, not a difference."""
        for _ in range(VERIFY_ATTEMPTS):
            done = subprocess.run(
                [sys.executable, "-m", "cli.main", "--server", self.api_url, "verify",
                 "--nats-url", self.nats_url],
                cwd=REPO, capture_output=True, timeout=120,
            )  # fmt: skip
            said = (done.stdout + done.stderr).decode(errors="replace").strip()
            if done.returncode == 0 or "nats: timeout" not in said:
                break
            time.sleep(2.0)
        return done.returncode == 0, said[-600:]

    def unsettled(self) -> str:
        """What keeps the cluster from settling, in a few words (for the table)."""
        st = self.state()
        if st is None:
            return "api not answering"
        not_running = sorted(n for n, s in st.items() if s != "Running")
        launchers = launcher_titles()
        not_once = sorted(n for n in st if launchers.get(n) != 1)
        return f"not Running: {not_running[:5]}; not exactly one launcher: {not_once[:5]}"

    def wait_answering(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while self.state() is None:
            if time.monotonic() > deadline:
                raise RuntimeError(f"the api at {self.api_url} did not answer in {timeout} s")
            time.sleep(0.5)

    def row(self, fault: str, before: set[str], started: float, settle: float) -> dict[str, Any]:
        """The fault's outcome once every VM is Running again (or `settle` s passed)."""
        settled = self.wait_settled(settle)
        recovered = time.monotonic() - started
        verified, said = self.verify()
        return {
            "fault": fault,
            "acked": len(self.acked - before),
            "lost": sorted(self.lost()),
            "duplicated": sorted(self.duplicated()),
            "recovered_s": None if settled is None else round(recovered, 1),
            "verify": verified,
            **({} if verified else {"verify_said": said}),
            **({} if settled is not None else {"unsettled": self.unsettled()}),
        }

    def wait_settled(self, timeout: float) -> float | None:
        started = time.monotonic()
        while time.monotonic() - started < timeout:
            if self.settled():
                return time.monotonic() - started
            time.sleep(0.25)
        return None


# ---------------------------------------------------------------------- faults
def kill(pid: int) -> None:
    os.kill(pid, signal.SIGKILL)


def faults(c: ChaosCluster, run: Run) -> list[tuple[str, Callable[[], None]]]:
    async_holder = _holder(c)

    def link_cut() -> None:
        host = NODES["node-1"]
        c.hosts.cut(host)
        time.sleep(c.node_timeout + 3)  # past the node timeout: the node's VMs move
        c.hosts.restore(host)

    def a_launcher() -> None:
        pids = [p for host in NODES.values() for p in live_launchers(c.work / "run" / host)]
        kill(pids[0])

    return [
        ("kill -9 api", lambda: kill(c.pid("api"))),
        ("kill -9 active controller", lambda: kill(c.pid(async_holder()))),
        ("kill -9 handler node-1", lambda: kill(c.pid("handler-node-1"))),
        ("kill -9 a launcher", a_launcher),
        ("kill -9 NATS meta leader", lambda: kill(c.pid(c.meta_leader()))),
        ("cut node-1's link past the node timeout", link_cut),
    ]


def _holder(c: ChaosCluster) -> Callable[[], str]:
    def holder() -> str:
        import asyncio

        from eventstore.connection import connect_once
        from eventstore.lease import Lease

        async def ask() -> str:
            nc = await connect_once(c.nats_url)
            try:
                return await Lease(nc.jetstream(), "virt-controller", "chaos").holder()
            finally:
                await nc.close()

        return asyncio.run(ask()) or "controller-1"

    return holder


# ---------------------------------------------------------------------- the run
def chaos(vms: int, per_fault: int, node_timeout: float, settle: float) -> dict[str, Any]:
    work = Path(tempfile.mkdtemp(prefix="vs-chaos-"))
    c = ChaosCluster(work, os.getpid(), node_timeout)
    rows: list[dict[str, Any]] = []
    result: dict[str, Any] = {"vms": vms, "per_fault": per_fault, "faults": rows}
    try:
        c.start()
        run = Run(c.api_url, c.nats_url)
        run.wait_answering(90)
        run.watch_duplicates()
        for i in range(vms):
            run.create(f"vm-{i}")
        result["baseline_settled_s"] = run.wait_settled(settle)
        for name, inject in faults(c, run):
            before = set(run.acked)
            creating = run.create_many(
                [f"fault{len(rows)}-{i}" for i in range(per_fault)],
                spread=0.2,
            )
            started = time.monotonic()
            try:
                inject()
            except Exception as e:  # the fault could not be made: say so in the table
                rows.append({"fault": name, "error": repr(e)})
                creating.join(60)
                continue
            creating.join(60)
            rows.append(run.row(name, before, started, settle))
        final = run.state() or {}
        result["final"] = {
            "acked": len(run.acked),
            "equal_to_fault_free": {n: final.get(n) for n in run.acked}
            == {n: "Running" for n in run.acked},
            "unacked_but_stored": len(set(final) - run.acked),
        }
        run.stop_watching()
    finally:
        c.stop()
    return result


def up_killed(work: Path, vms: int, per_fault: int, settle: float) -> dict[str, Any]:
    """`virtstream up --nodes 2` (secure by default) with `vms` VMs, killed with SIGKILL
    while `per_fault` more are created, and started again on the same data dir; restarts
    that fail (its ports still held by the dying services) are retried, as systemd does.
    Runs on this process's host's loopback."""
    data, port, nats_port = work / "up", free_port(), free_port()
    argv = [sys.executable, "-m", "cli.main", "up", "--data-dir", str(data), "--nodes", "2",
            "--port", str(port), "--nats-port", str(nats_port),
            "--node-memory", "64Gi", "--node-cpus", "512"]  # fmt: skip
    log = (work / "up.log").open("ab")

    def start() -> subprocess.Popen[bytes]:
        return subprocess.Popen(argv, cwd=REPO, stdout=log, stderr=subprocess.STDOUT)

    up = start()
    try:
        run = Run(f"https://127.0.0.1:{port}", f"nats://127.0.0.1:{nats_port}")
        run.wait_answering(90)
        run.watch_duplicates()
        for i in range(vms):
            run.create(f"up-vm-{i}")
        run.wait_settled(settle)
        before = set(run.acked)
        creating = run.create_many([f"up-fault-{i}" for i in range(per_fault)], spread=0.2)
        started = time.monotonic()
        up.kill()
        up.wait()
        restarts = 0
        while True:  # Restart=on-failure, RestartSec=0.5
            up = start()
            restarts += 1
            try:
                up.wait(5)
            except subprocess.TimeoutExpired:
                break
            if time.monotonic() - started > settle:
                raise RuntimeError("`up` did not start again")
            time.sleep(0.5)
        creating.join(60)
        row = run.row("kill -9 up (one machine), started again", before, started, settle)
        run.stop_watching()
        return {**row, "restarts": restarts}
    finally:
        interrupt(up, 60)
        log.close()


def table(result: dict[str, Any]) -> str:
    lines = [
        f"chaos: {result['vms']} VMs, {result['per_fault']} created during each fault",
        "| fault | acked creates | lost | duplicated | recovered in | verify |",
        "|---|---|---|---|---|---|",
    ]
    for row in result["faults"]:
        if "error" in row:
            lines.append(f"| {row['fault']} | not injected: {row['error']} | | | | |")
            continue
        rec = f"{row['recovered_s']} s" if row["recovered_s"] is not None else "no"
        lines.append(
            f"| {row['fault']} | {row['acked']} | {len(row['lost'])} | "
            f"{len(row['duplicated'])} | {rec} | {'passes' if row['verify'] else 'FAILS'} |"
        )
    final = result.get("final", {})
    lines.append(
        f"final state equals the fault-free run's: {final.get('equal_to_fault_free')} "
        f"({final.get('acked')} acknowledged VMs, all Running)"
    )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.chaos", description=__doc__)
    p.add_argument("--vms", type=int, default=100)
    p.add_argument("--per-fault", type=int, default=10)
    # a NATS leader election takes seconds: the fence (half of this) must outlast it
    p.add_argument("--node-timeout", type=float, default=16.0)
    p.add_argument("--settle", type=float, default=60.0, help="seconds a fault may take")
    p.add_argument("--json", action="store_true")
    a = p.parse_args(argv)
    if os.geteuid() != 0:
        print("error: the chaos suite makes network namespaces: run it as root", file=sys.stderr)
        return 1
    result = chaos(a.vms, a.per_fault, a.node_timeout, a.settle)
    work = Path(tempfile.mkdtemp(prefix="vs-chaos-up-"))
    try:
        result["faults"].append(up_killed(work, a.vms, a.per_fault, a.settle))
    except Exception as e:
        result["faults"].append({"fault": "kill -9 up (one machine)", "error": repr(e)})
    print(json.dumps(result) if a.json else table(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
