"""`python -m bench.chaos [--vms N] [--per-fault K] [--only ROW] [--repeat N] [--json]`:
faults one at a time over a VM workload on a cluster of network-namespace hosts
(bench/chaos/cluster.py), and after each one what became of the VMs: acknowledged creates
lost, VMs run twice, and how long until every VM was Running again and `virtstream verify`
passed. At the end, `virtstream whatif` over the whole log the faults left: how many of the
controller's recorded decisions today's decider makes again (the chaos test wants all).

The last row is `virtstream up` itself, the one-machine install: killed with SIGKILL while
VMs are created, then started again on its data dir 0.5 s later, once, as systemd's
`Restart=` would.

`--only ROW` runs the rows whose name contains ROW (`--only "kill -9 up"`: the `up` row
alone, which needs no namespaces); `--repeat N` runs them N times, each on a fresh cluster,
and says how many passed and how long they took to recover, to measure a flake's rate. The
exit status is 1 when any row failed (lost or doubled a VM, did not recover, verify failed,
or could not be injected).

The default (100 VMs, 10 created during each fault) is what CI runs
(tests/integration/test_chaos.py), about a minute and a half. Needs root (namespaces)."""

from __future__ import annotations

import argparse
import collections
import json
import os
import shutil
import signal
import statistics
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
from cli import whatif_process
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


def launcher_titles(run_dir: Path) -> collections.Counter[str]:
    """Live launchers per VMI name, from their process titles (one domain each): those of
    this run only, whose output goes to a log under `run_dir` (another run on the machine,
    another engineer's chaos suite, has launchers with the same names)."""
    seen: collections.Counter[str] = collections.Counter()
    ours = f"{run_dir.resolve()}/"
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmd = (proc / "cmdline").read_bytes()
            if not cmd.startswith(b"virt-launcher default/"):
                continue
            if not os.readlink(proc / "fd" / "1").startswith(ours):
                continue
        except OSError:
            continue
        seen[cmd.split(b"/", 1)[1].split()[0].decode()] += 1
    return seen


class Run:
    """The workload on one api: what it acknowledged, what ran twice, whether it settled."""

    def __init__(self, api_url: str, nats_url: str, run_dir: Path) -> None:
        self.api_url, self.nats_url = api_url, nats_url
        self.run_dir = run_dir  # where this run's launchers live
        # an `up` writes its credentials as it starts: wait for them
        opts = credentials.httpx_options(api_url, wait=30 if api_url.startswith("https") else 0)
        self.http = httpx.Client(timeout=10, **opts)
        self.acked: set[str] = set()
        #: creates given up on → the last answer (0: none), each meant once per run
        self.given_up: dict[str, int] = {}
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
                self.given_up[name] = status
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
                for name, n in launcher_titles(self.run_dir).items():
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
        launchers = launcher_titles(self.run_dir)
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
        launchers = launcher_titles(self.run_dir)
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
        given_up, self.given_up = self.given_up, {}  # this fault's, for the next row
        return {
            "fault": fault,
            "acked": len(self.acked - before),
            # not acknowledged within the client's 30 s: refused, or no answer (0)
            "given_up": given_up,
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


CLUSTER_ROWS = (
    "kill -9 api",
    "kill -9 active controller",
    "kill -9 handler node-1",
    "kill -9 a launcher",
    "kill -9 NATS meta leader",
    "cut node-1's link past the node timeout",
)
UP_ROW = "kill -9 up (one machine), started again"


def faults(c: ChaosCluster, run: Run) -> dict[str, Callable[[], None]]:
    async_holder = _holder(c)

    def link_cut() -> None:
        host = NODES["node-1"]
        c.hosts.cut(host)
        time.sleep(c.node_timeout + 3)  # past the node timeout: the node's VMs move
        c.hosts.restore(host)

    def a_launcher() -> None:
        pids = [p for host in NODES.values() for p in live_launchers(c.work / "run" / host)]
        kill(pids[0])

    made = {
        "kill -9 api": lambda: kill(c.pid("api")),
        "kill -9 active controller": lambda: kill(c.pid(async_holder())),
        "kill -9 handler node-1": lambda: kill(c.pid("handler-node-1")),
        "kill -9 a launcher": a_launcher,
        "kill -9 NATS meta leader": lambda: kill(c.pid(c.meta_leader())),
        "cut node-1's link past the node timeout": link_cut,
    }
    assert tuple(made) == CLUSTER_ROWS
    return made


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
def chaos(
    vms: int, per_fault: int, node_timeout: float, settle: float, only: list[str]
) -> dict[str, Any]:
    """The cluster rows named in `only`, in their order, on one fresh cluster."""
    work = Path(tempfile.mkdtemp(prefix="vs-chaos-"))
    c = ChaosCluster(work, os.getpid(), node_timeout)
    rows: list[dict[str, Any]] = []
    result: dict[str, Any] = {"vms": vms, "per_fault": per_fault, "faults": rows, "work": str(work)}
    try:
        c.start()
        run = Run(c.api_url, c.nats_url, work / "run")
        run.wait_answering(90)
        run.watch_duplicates()
        for i in range(vms):
            run.create(f"vm-{i}")
        result["baseline_settled_s"] = run.wait_settled(settle)
        run.given_up.clear()  # the baseline's: fewer VMs, not a fault's doing
        for name, inject in faults(c, run).items():
            if name not in only:
                continue
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
        result["final"]["whatif"] = whatif_process.summary(run.nats_url)
    finally:
        c.stop()
    return result


def up_killed(work: Path, vms: int, per_fault: int, settle: float) -> dict[str, Any]:
    """`virtstream up --nodes 2` (secure by default) with `vms` VMs, killed with SIGKILL
    while `per_fault` more are created, and started again on the same data dir 0.5 s later,
    once (systemd's `Restart=`, `RestartSec=0.5`): that start must come back, whatever the
    killed run's reaper is still doing. Runs on this process's host's loopback."""
    data, port, nats_port = work / "up", free_port(), free_port()
    argv = [sys.executable, "-m", "cli.main", "up", "--data-dir", str(data), "--nodes", "2",
            "--port", str(port), "--nats-port", str(nats_port),
            "--node-memory", "64Gi", "--node-cpus", "512"]  # fmt: skip

    def start(log: Path) -> subprocess.Popen[bytes]:
        with log.open("ab") as out:
            return subprocess.Popen(
                argv, cwd=REPO, stdout=out, stderr=subprocess.STDOUT,
                env={**os.environ, "COLUMNS": "200"},
            )  # fmt: skip

    up = start(work / "up-1.log")
    try:
        run = Run(f"https://127.0.0.1:{port}", f"nats://127.0.0.1:{nats_port}", data / "run")
        run.wait_answering(90)
        run.watch_duplicates()
        for i in range(vms):
            run.create(f"up-vm-{i}")
        run.wait_settled(settle)
        run.given_up.clear()  # the baseline's: fewer VMs, not a fault's doing
        before = set(run.acked)
        creating = run.create_many([f"up-fault-{i}" for i in range(per_fault)], spread=0.2)
        started = time.monotonic()
        up.kill()
        up.wait()
        time.sleep(0.5)
        up = start(work / "up-2.log")
        creating.join(60)
        row = run.row(UP_ROW, before, started, settle)
        run.stop_watching()
        said = (work / "up-2.log").read_text(errors="replace").splitlines()
        row["restart_said"] = [line for line in said if "previous run" in line or "VM(s)" in line]
        if up.poll() is not None:  # the start after the kill did not stay up
            row["up_exited"] = up.returncode
            row["up_said"] = said[-5:]
        return row
    finally:
        interrupt(up, 60)


def failures(row: dict[str, Any]) -> list[str]:
    """Why a row failed, in a few words each; empty when it passed."""
    if "error" in row:
        return [f"not injected: {row['error']}"]
    why = []
    if row["lost"]:
        why.append(f"{len(row['lost'])} lost")
    if row["duplicated"]:
        why.append(f"{len(row['duplicated'])} ran twice")
    if row["recovered_s"] is None:
        why.append(f"not recovered ({row.get('unsettled')})")
    if not row["verify"]:
        why.append("verify fails")
    if "up_exited" in row:
        why.append(f"`up` exited with {row['up_exited']}: {' / '.join(row['up_said'])}")
    return why


def passed(result: dict[str, Any]) -> bool:
    final = result.get("final", {"equal_to_fault_free": True})
    return final["equal_to_fault_free"] and not any(failures(r) for r in result["faults"])


def table(result: dict[str, Any]) -> str:
    lines = [
        f"chaos: {result['vms']} VMs, {result['per_fault']} created during each fault",
        "| fault | acked creates | lost | duplicated | recovered in | verify | row |",
        "|---|---|---|---|---|---|---|",
    ]
    for row in result["faults"]:
        if "error" in row:
            lines.append(f"| {row['fault']} | not injected: {row['error']} | | | | | FAILS |")
            continue
        rec = f"{row['recovered_s']} s" if row["recovered_s"] is not None else "no"
        why = failures(row)
        lines.append(
            f"| {row['fault']} | {row['acked']} | {len(row['lost'])} | "
            f"{len(row['duplicated'])} | {rec} | {'passes' if row['verify'] else 'FAILS'} | "
            f"{'FAILS: ' + '; '.join(why) if why else 'passes'} |"
        )
        for name, status in row.get("given_up", {}).items():
            answer = f"answered {status}" if status else "no answer in 30 s"
            lines.append(f"  a create given up on (not acknowledged): {name}, {answer}")
        for line in row.get("restart_said", []):  # what became of the killed run's VMs
            lines.append(f"  the restarted `up` said: {line}")
    if "final" in result:
        final = result["final"]
        lines.append(
            f"final state equals the fault-free run's: {final.get('equal_to_fault_free')} "
            f"({final.get('acked')} acknowledged VMs, all Running)"
        )
        w = final.get("whatif") or {}
        if "error" in w:
            lines.append(f"whatif over the whole log: {w['error']}")
        elif w:
            lines.append(
                f"whatif over the whole log: {w['events']} events, {w['reproduced']} of the "
                f"{w['recorded']} decisions recorded reproduced, {w['differences']} differ"
            )
    kept = [r["work"] for r in [result, *result["faults"]] if "work" in r]
    if kept and not passed(result):
        lines.append(f"logs and stores left for a look: {', '.join(kept)}")
    return "\n".join(lines)


def summary(results: list[dict[str, Any]]) -> str:
    """Each row over the repeats: how many passed, and its recovery times."""
    lines = [
        f"over {len(results)} runs:",
        "| fault | passed | recovered in: min / median / max |",
        "|---|---|---|",
    ]
    names = [r["fault"] for r in results[0]["faults"]]
    for name in names:
        rows = [r for res in results for r in res["faults"] if r["fault"] == name]
        ok = sum(1 for r in rows if not failures(r))
        times = [r["recovered_s"] for r in rows if r.get("recovered_s") is not None]
        spread = f"{min(times)} / {statistics.median(times):.1f} / {max(times)} s" if times else "-"
        lines.append(f"| {name} | {ok} of {len(rows)} | {spread} |")
    finals = [r["final"]["equal_to_fault_free"] for r in results if "final" in r]
    if finals:
        lines.append(f"final state equal to the fault-free run's in {sum(finals)} of {len(finals)}")
    return "\n".join(lines)


def once(a: argparse.Namespace, rows: list[str]) -> dict[str, Any]:
    """The chosen rows once: the cluster's on a fresh cluster, then `up`'s."""
    if any(r in CLUSTER_ROWS for r in rows):
        result = chaos(a.vms, a.per_fault, a.node_timeout, a.settle, rows)
    else:
        result = {"vms": a.vms, "per_fault": a.per_fault, "faults": []}
    if UP_ROW in rows:
        work = Path(tempfile.mkdtemp(prefix="vs-chaos-up-"))
        try:
            row = up_killed(work, a.vms, a.per_fault, a.settle)
        except Exception as e:
            row = {"fault": UP_ROW, "error": repr(e)}
        result["faults"].append({**row, "work": str(work)})
    if passed(result):  # what a failed run leaves stays, to be looked at
        for row in [result, *result["faults"]]:
            if "work" in row:
                shutil.rmtree(row.pop("work"), ignore_errors=True)
    return result


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.chaos", description=__doc__)
    p.add_argument("--vms", type=int, default=100)
    p.add_argument("--per-fault", type=int, default=10)
    # a NATS leader election takes seconds: the fence (half of this) must outlast it
    p.add_argument("--node-timeout", type=float, default=16.0)
    p.add_argument("--settle", type=float, default=60.0, help="seconds a fault may take")
    p.add_argument(
        "--only",
        default="",
        metavar="ROW",
        help='only the rows whose name contains this (e.g. "kill -9 up")',
    )
    p.add_argument(
        "--repeat",
        type=int,
        default=1,
        metavar="N",
        help="run the rows N times, each on a fresh cluster, and sum up",
    )
    p.add_argument("--json", action="store_true", help="one JSON line per run")  # fmt: skip
    a = p.parse_args(argv)
    rows = [r for r in (*CLUSTER_ROWS, UP_ROW) if a.only.lower() in r.lower()]
    if not rows:
        names = ", ".join(repr(r) for r in (*CLUSTER_ROWS, UP_ROW))
        print(f"error: no row's name contains {a.only!r}; the rows: {names}", file=sys.stderr)
        return 2
    if a.repeat < 1:
        print("error: --repeat must be at least 1", file=sys.stderr)
        return 2
    if any(r in CLUSTER_ROWS for r in rows) and os.geteuid() != 0:
        print("error: the chaos suite makes network namespaces: run it as root", file=sys.stderr)
        return 1
    results = []
    for i in range(a.repeat):
        result = once(a, rows)
        results.append(result)
        if a.json:
            print(json.dumps(result), flush=True)
        else:
            print(("" if a.repeat == 1 else f"run {i + 1} of {a.repeat}: ") + table(result))
            print(flush=True)
    if a.repeat > 1 and not a.json:
        print(summary(results))
    return 0 if all(passed(r) for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
