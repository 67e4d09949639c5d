"""Where a node's launchers live on disk, and how a restarted handler finds them again.

One run dir per node (e.g. `<data-dir>/node-1/launchers/`) holds, per VMI,
`<ns>_<name>.sock` (the launcher's socket), `<ns>_<name>.pid`, `<ns>_<name>.log` and, in
qemu mode, `<ns>_<name>.console.log` (everything the guest wrote to its serial console
since its domain started, written by QEMU; it stays after the launcher exits).
A launcher removes its socket and pidfile when it exits, so whatever is listed with a
live pid is a launcher to re-attach to.
"""

from __future__ import annotations

import os
from pathlib import Path

import msgspec

from host.procs import pid_alive

SOCKET_SUFFIX = ".sock"


class LauncherEntry(msgspec.Struct, frozen=True):
    domain_name: str
    socket_path: str
    pid: int | None
    alive: bool


def launcher_socket_path(run_dir: str | os.PathLike[str], domain_name: str) -> Path:
    return Path(run_dir) / f"{domain_name}{SOCKET_SUFFIX}"


def pidfile_path(socket_path: str | os.PathLike[str]) -> Path:
    return Path(socket_path).with_suffix(".pid")


def log_path(socket_path: str | os.PathLike[str]) -> Path:
    return Path(socket_path).with_suffix(".log")


def console_log_path(socket_path: str | os.PathLike[str]) -> Path:
    return Path(socket_path).with_suffix(".console.log")


def guest_console_log(
    run_dir: str | os.PathLike[str], node: str, namespace: str, name: str
) -> Path:
    """A VMI's serial console log, from `virtstream up`'s run dir (`<data-dir>/run`) and
    the VMI's status.nodeName: `<run-dir>/<node>/launchers/<ns>_<name>.console.log`."""
    sock = launcher_socket_path(Path(run_dir) / node / "launchers", f"{namespace}_{name}")
    return console_log_path(sock)


def read_pid(pidfile: str | os.PathLike[str]) -> int | None:
    try:
        return int(Path(pidfile).read_text().strip())
    except (OSError, ValueError):
        return None


def write_pidfile(socket_path: str | os.PathLike[str], pid: int) -> None:
    target = pidfile_path(socket_path)
    # one temporary name per writer: the zygote and its child may both write it at once
    tmp = target.with_suffix(f".pid.{os.getpid()}.tmp")
    tmp.write_text(f"{pid}\n")
    tmp.replace(target)  # atomic: a reader never sees a half-written pid


def discover_launchers(run_dir: str | os.PathLike[str]) -> list[LauncherEntry]:
    """The launchers of a run dir, by socket, with whether their process is alive."""
    entries = []
    directory = Path(run_dir)
    if not directory.is_dir():
        return []
    for sock in sorted(directory.glob(f"*{SOCKET_SUFFIX}")):
        pid = read_pid(pidfile_path(sock))
        entries.append(
            LauncherEntry(
                domain_name=sock.name.removesuffix(SOCKET_SUFFIX),
                socket_path=str(sock),
                pid=pid,
                alive=pid is not None and pid_alive(pid),
            )
        )
    return entries
