"""`python -m ops.up_reaper`: stops what a `virtstream up` leaves behind when it dies.

`up` starts this process in its own session with a pipe on its stdin and keeps the write
end. A clean stop writes `done` first; an end of file without it means `up` died (SIGKILL,
a crash): the services already got their parent-death SIGTERM, so what is left is what
outlives a handler on purpose, the launchers (and, in qemu mode, the nodes' libvirtds).
They are stopped here (SIGTERM, then SIGKILL), unless `up` ran with --keep-vms.

Usage: python -m ops.up_reaper --data-dir DIR [--keep-vms]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from ops.supervisor import stop_recorded
from services.launcher import rundir

DONE = b"done\n"


def live_launchers(run_dir: Path) -> list[int]:
    pids = []
    for pidfile in run_dir.glob("*/launchers/*.pid"):
        pid = rundir.read_pid(pidfile)
        if pid and rundir.pid_alive(pid):
            pids.append(pid)
    return pids


def wait_launchers(run_dir: Path, timeout: float) -> list[int]:
    deadline = time.monotonic() + timeout
    while (pids := live_launchers(run_dir)) and time.monotonic() < deadline:
        time.sleep(0.2)
    return pids


def terminate_launchers(run_dir: Path, grace: float = 10.0) -> int:
    """SIGTERM every live launcher (a graceful shutdown of its domain), SIGKILL after
    `grace`; returns how many there were."""
    pids = live_launchers(run_dir)
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
    for pid in wait_launchers(run_dir, grace):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    return len(pids)


def start(data_dir: Path, keep_vms: bool) -> subprocess.Popen[bytes]:
    """The reaper of the calling `up`; `finish()` it on a clean stop."""
    return subprocess.Popen(
        [sys.executable, "-m", "ops.up_reaper", "--data-dir", str(data_dir),
         *(["--keep-vms"] if keep_vms else [])],
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        start_new_session=True,  # neither the terminal's Ctrl-C nor up's death stops it
        cwd=Path(__file__).resolve().parents[1],
    )  # fmt: skip


def finish(reaper: subprocess.Popen[bytes]) -> None:
    """A clean stop: the reaper exits without touching anything."""
    assert reaper.stdin is not None
    with contextlib.suppress(OSError):
        reaper.stdin.write(DONE)
        reaper.stdin.close()
    with contextlib.suppress(subprocess.TimeoutExpired):
        reaper.wait(5)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m ops.up_reaper")
    p.add_argument("--data-dir", required=True, type=Path)
    p.add_argument("--keep-vms", action="store_true")
    a = p.parse_args(argv)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    said = sys.stdin.buffer.read()  # until `up` closes the pipe or dies
    if said == DONE:
        return 0
    if not a.keep_vms:
        terminate_launchers(a.data_dir / "run")
    stop_recorded(a.data_dir / "up.json")  # whatever ignored its parent-death signal
    if not a.keep_vms:
        nodes = a.data_dir / "nodes"
        if nodes.is_dir():
            from ops.node_libvirtd import cleanup_stale

            cleanup_stale(nodes)
    return 0


if __name__ == "__main__":
    sys.exit(main())
