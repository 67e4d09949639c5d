"""`python -m ops.up_reaper`: stops what a `virtstream up` leaves behind when it dies.

`up` starts this process in its own session with a pipe on its stdin and keeps the write
end. It also hands over its data dir's run lock (`ops/run_lock.py`), which this process
holds until it exits: the next `up` on the data dir starts only once everything here is
done, so nothing done here can touch that next run. A clean stop writes `done` first; an
end of file without it means `up` died (SIGKILL, a crash). Then:

- the services, which got their parent-death SIGTERM, get 3 s before SIGKILL, then
  nats-server (it outlives `up` so that they drain against it) SIGTERM and 10 s, as
  `up.json` records them (under the lock, only this run wrote it);
- meanwhile, unless `up` ran with --keep-vms, the launchers (which outlive a handler on
  purpose): each is connected to as a handler would (a launcher hands its final status
  to the handlers connected and exits; with none it lingers for a restarted one, which
  cannot start while this runs), then sent SIGTERM (a graceful shutdown of its domain),
  SIGKILL after 10 s; once the handlers, and with them their zygotes, are gone, the run
  dir is swept once more for a launcher forked meanwhile;
- in qemu mode, unless --keep-vms, the nodes' libvirtds and what runs in them;
- what was done goes to `<data-dir>/reaped.json`, for the next `up` to say.

Usage: python -m ops.up_reaper --data-dir DIR [--keep-vms]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import msgspec

from ops.supervisor import stop_recorded
from services.launcher import rundir

DONE = b"done\n"
REPORT = "reaped.json"
#: how long a launcher gets for its graceful shutdown before SIGKILL
LAUNCHER_GRACE_SECONDS = 10.0
#: how long a killed run's services get to stop (they got SIGTERM as it died) before
#: SIGKILL: a clean stop takes about a second, but the api waits on its clients' idle
#: keep-alive connections; nats-server, stopped after them, gets the usual 10 s
SERVICE_GRACE_SECONDS = 3.0


class Reaped(msgspec.Struct, frozen=True):
    """What the reaper of a killed `up` did, for the next `up` to say."""

    services: list[str]  # still running when it looked, then stopped
    vms_stopped: int  # launchers stopped (their domains shut down)
    seconds: float


def _launchers(run_dir: Path) -> dict[int, Path]:
    """Live launchers: pid → socket."""
    found = {}
    for pidfile in run_dir.glob("*/launchers/*.pid"):
        pid = rundir.read_pid(pidfile)
        if pid and rundir.pid_alive(pid):
            found[pid] = pidfile.with_suffix(rundir.SOCKET_SUFFIX)
    return found


def live_launchers(run_dir: Path) -> list[int]:
    return list(_launchers(run_dir))


def wait_launchers(run_dir: Path, timeout: float) -> list[int]:
    deadline = time.monotonic() + timeout
    while (pids := live_launchers(run_dir)) and time.monotonic() < deadline:
        time.sleep(0.2)
    return pids


def _subscribe(sock: Path) -> socket.socket | None:
    """A connection to a launcher, as its handler's: it gets the launcher's final status."""
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    conn.settimeout(1.0)
    try:
        conn.connect(str(sock))
    except OSError:
        conn.close()
        return None
    conn.setblocking(False)
    return conn


def _drain(conns: dict[int, socket.socket | None]) -> None:
    """Read what the launchers sent (their reports are not needed, only delivered)."""
    for pid, conn in conns.items():
        if conn is None:
            continue
        try:
            while conn.recv(65536):
                pass
        except BlockingIOError:
            continue
        except OSError:
            pass
        conn.close()  # end of file: the launcher hung up
        conns[pid] = None


def terminate_launchers(run_dir: Path, grace: float = LAUNCHER_GRACE_SECONDS) -> set[int]:
    """Stop every live launcher of the run dir, and any that appears meanwhile; returns
    their pids. Each is connected to (so it exits once its final status is delivered,
    instead of lingering for a handler), sent SIGTERM (a graceful shutdown of its domain)
    and, if still there after `grace`, SIGKILL."""
    conns: dict[int, socket.socket | None] = {}
    deadline = time.monotonic() + grace
    try:
        while (live := _launchers(run_dir)) and time.monotonic() < deadline:
            for pid, sock in live.items():
                if pid not in conns:
                    conns[pid] = _subscribe(sock)
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGTERM)
            _drain(conns)
            time.sleep(0.1)
        for pid in live_launchers(run_dir):
            conns.setdefault(pid, None)
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
    finally:
        for conn in conns.values():
            if conn is not None:
                conn.close()
    return set(conns)


def start(data_dir: Path, keep_vms: bool, lock_fd: int) -> subprocess.Popen[bytes]:
    """The reaper of the calling `up`, holding its run lock (`lock_fd`, the same open file:
    the lock is held until both have exited); `finish()` it on a clean stop."""
    return subprocess.Popen(
        [sys.executable, "-m", "ops.up_reaper", "--data-dir", str(data_dir),
         *(["--keep-vms"] if keep_vms else [])],
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        start_new_session=True,  # neither the terminal's Ctrl-C nor up's death stops it
        pass_fds=(lock_fd,),
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


def take_report(data_dir: Path) -> Reaped | None:
    """What the reaper of a killed previous run did (once: the report is removed)."""
    path = data_dir / REPORT
    try:
        report = msgspec.json.decode(path.read_bytes(), type=Reaped)
    except (OSError, msgspec.DecodeError, msgspec.ValidationError):
        report = None
    with contextlib.suppress(FileNotFoundError):
        path.unlink()
    return report


def reap(data_dir: Path, keep_vms: bool) -> Reaped:
    """Stop what a killed `up` left (see the module's docstring)."""
    started = time.monotonic()
    run_dir = data_dir / "run"
    stopped: set[int] = set()
    launchers = threading.Thread(target=lambda: stopped.update(terminate_launchers(run_dir)))
    if not keep_vms:  # the launchers shut their domains down while the services stop
        launchers.start()
    services = stop_recorded(data_dir / "up.json", first_timeout=SERVICE_GRACE_SECONDS)
    if not keep_vms:
        launchers.join()
        # with the handlers gone no zygote forks any more: any launcher started meanwhile
        stopped.update(terminate_launchers(run_dir))
    if not keep_vms and (data_dir / "nodes").is_dir():
        from ops.node_libvirtd import cleanup_stale

        cleanup_stale(data_dir / "nodes")
    if not keep_vms:
        from host.pod_network import destroy

        destroy(data_dir)
    return Reaped(services, len(stopped), round(time.monotonic() - started, 1))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m ops.up_reaper")
    p.add_argument("--data-dir", required=True, type=Path)
    p.add_argument("--keep-vms", action="store_true")
    a = p.parse_args(argv)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    said = sys.stdin.buffer.read()  # until `up` closes the pipe or dies
    if said == DONE:
        return 0
    report = reap(a.data_dir, a.keep_vms)
    tmp = a.data_dir / f"{REPORT}.tmp"
    with contextlib.suppress(OSError):
        tmp.write_bytes(msgspec.json.encode(report))
        tmp.replace(a.data_dir / REPORT)
    return 0  # the run lock goes with this process


if __name__ == "__main__":
    sys.exit(main())
