"""`python -m ops.node_reaper`: a node's private mount namespace and child subreaper.

It unshares a mount namespace (what `unshare -m` does, without the extra process), makes
every mount in it private so nothing propagates back to the host, bind-mounts the node's
own directories over libvirt's fixed paths, becomes a child subreaper and runs the command
(libvirtd). QEMU processes that libvirtd daemonizes are re-parented to this process, which
reaps them at once: without a subreaper they sit as zombies of init until libvirtd notices,
and destroy/migration take ~1.5 s longer waiting for them.

When the command exits (or on SIGTERM/SIGINT, forwarded to it first), whatever is left in
the namespace is killed and reaped; the namespace, and with it every bind mount, vanishes
with the last process.

Usage: python -m ops.node_reaper --state FILE --bind SRC:DST ... -- COMMAND ARGS...
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import ctypes.util
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

_CLONE_NEWNS = 0x00020000
_MS_BIND = 4096
_MS_REC = 16384
_MS_PRIVATE = 1 << 18
_PR_SET_CHILD_SUBREAPER = 36

_libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)


def _check(result: int, what: str) -> None:
    if result != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"{what}: {os.strerror(errno)}")


def enter_private_namespace(binds: list[tuple[str, str]]) -> None:
    _check(_libc.unshare(_CLONE_NEWNS), "unshare(CLONE_NEWNS)")
    _check(_libc.mount(b"none", b"/", None, _MS_REC | _MS_PRIVATE, None), "make / private")
    for src, dst in binds:
        os.makedirs(dst, exist_ok=True)  # a mount point; created on the host's filesystem
        _check(_libc.mount(src.encode(), dst.encode(), None, _MS_BIND, None), f"bind {dst}")


def mount_namespace_id(pid: int | str = "self") -> str:
    return os.readlink(f"/proc/{pid}/ns/mnt")


def _children() -> list[int]:
    """Every process whose parent is this one (direct or re-parented orphans)."""
    me = os.getpid()
    pids = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry.name}/stat").read_text()
        except OSError:
            continue
        if int(stat.rsplit(")", 1)[1].split()[1]) == me:
            pids.append(int(entry.name))
    return pids


def _reap_all() -> list[int]:
    reaped: list[int] = []
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return reaped
        if pid == 0:
            return reaped
        reaped.append(pid)


def _kill_leftovers(grace: float) -> None:
    for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 5.0)):
        pids = _children()
        if not pids:
            return
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
        deadline = time.monotonic() + wait
        while _children() and time.monotonic() < deadline:
            _reap_all()
            time.sleep(0.02)
    _reap_all()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ops.node_reaper")
    parser.add_argument("--state", required=True, help="JSON file to record pids/namespace in")
    parser.add_argument("--bind", action="append", default=[], metavar="SRC:DST")
    parser.add_argument("--leftover-grace", type=float, default=2.0)
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("no command given")

    binds = [(src, dst) for src, _, dst in (b.partition(":") for b in args.bind)]
    enter_private_namespace(binds)
    _check(_libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0), "PR_SET_CHILD_SUBREAPER")

    stopping = False

    def _forward(sig: int, _frame: object) -> None:
        nonlocal stopping
        stopping = True
        if child.poll() is None:
            child.send_signal(sig)

    child = subprocess.Popen(command)
    signal.signal(signal.SIGTERM, _forward)
    signal.signal(signal.SIGINT, _forward)
    state = {
        "reaper_pid": os.getpid(),
        "child_pid": child.pid,
        "mount_namespace": mount_namespace_id(),
    }
    tmp = Path(args.state).with_suffix(".tmp")
    tmp.write_text(json.dumps(state))
    tmp.replace(args.state)

    # Reap until the command ends; waitpid(-1) also collects re-parented QEMU processes.
    code = 0
    while True:
        try:
            pid, status = os.waitpid(-1, 0)
        except ChildProcessError:
            break
        except InterruptedError:
            continue
        if pid == child.pid:
            child.returncode = os.waitstatus_to_exitcode(status)
            code = child.returncode
            break
    _kill_leftovers(args.leftover_grace)
    return 0 if stopping else code


if __name__ == "__main__":
    sys.exit(main())
