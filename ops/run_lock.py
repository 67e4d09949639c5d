"""One run of `virtstream up` per data dir at a time, the killed run's reaper included.

`up` takes an exclusive flock on `<data-dir>/up.lock` before it reads or starts anything,
and hands the same open file to its reaper (`ops/up_reaper.py`). A flock belongs to the
open file, so it is held until both have ended: when `up` is killed, the next `up` on the
data dir waits until the reaper has stopped everything the killed run left, and nothing of
that run can touch the next one. The kernel drops the lock however its holders end (a
killed reaper included), so it never goes stale.

The file names its holders (`up`'s pid and start time, the reaper's pid), so a waiter tells
a live `up` (refused in one line) from a reaper at work (waited for, with a line saying so).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import time
from collections.abc import Callable
from pathlib import Path

import msgspec

from host.procs import start_time

LOCK_FILE = "up.lock"
#: the reaper's own bounds (services 10 s, launchers 10 s, node cleanup) with room to spare
REAPER_WAIT_SECONDS = 120.0


class Holder(msgspec.Struct, frozen=True):
    up: int
    up_started: int  # clock ticks since boot: tells this `up` from a reused pid
    reaper: int = 0


class RunLockError(RuntimeError):
    """The data dir is not ours to run on; the message says why, in one line."""


def _try_lock(fd: int) -> bool:
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


def _holder(path: Path) -> Holder | None:
    try:
        return msgspec.json.decode(path.read_bytes(), type=Holder)
    except (OSError, msgspec.DecodeError, msgspec.ValidationError):
        return None  # not written yet (its holder has just taken it), or an older format


def _live_up(holder: Holder | None) -> bool:
    return holder is not None and start_time(holder.up) == holder.up_started


def _write(fd: int, holder: Holder) -> None:
    data = msgspec.json.encode(holder)
    os.ftruncate(fd, 0)
    os.pwrite(fd, data, 0)


def take(
    data_dir: Path,
    say: Callable[[str], None],
    stopped: Callable[[], bool] = lambda: False,
    timeout: float = REAPER_WAIT_SECONDS,
) -> int:
    """Lock `data_dir` for this process and return the lock's file descriptor (keep it open
    while the run lasts). A killed run's reaper still at work is waited for; a live `up`,
    a reaper that is not done within `timeout` or `stopped()` turning true raise
    RunLockError."""
    path = data_dir / LOCK_FILE
    # no O_TRUNC: until we hold the lock, what is in the file is its holder's
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        if not _try_lock(fd):
            _wait(fd, path, data_dir, say, stopped, timeout)
        me = start_time(os.getpid())
        assert me is not None
        _write(fd, Holder(os.getpid(), me))
    except BaseException:
        os.close(fd)
        raise
    return fd


def _wait(
    fd: int,
    path: Path,
    data_dir: Path,
    say: Callable[[str], None],
    stopped: Callable[[], bool],
    timeout: float,
) -> None:
    holder = _holder(path)
    if _live_up(holder):
        assert holder is not None
        raise RunLockError(f"another `virtstream up` (pid {holder.up}) runs on {data_dir}")
    reaper = f" (pid {holder.reaper})" if holder is not None and holder.reaper else ""
    say(f"waiting for the killed previous run's reaper{reaper} to stop what that run left")
    started = time.monotonic()
    while not _try_lock(fd):
        holder = _holder(path)
        if _live_up(holder):  # another `up` waited too, and took it first
            assert holder is not None
            raise RunLockError(f"another `virtstream up` (pid {holder.up}) runs on {data_dir}")
        if stopped():
            raise RunLockError("interrupted while waiting for the previous run's reaper")
        if time.monotonic() - started > timeout:
            raise RunLockError(
                f"the previous run's reaper{reaper} has not finished in {timeout:.0f} s "
                f"(it holds {path})"
            )
        time.sleep(0.1)
    say(f"the previous run's reaper is done (waited {time.monotonic() - started:.1f} s)")


def note_reaper(fd: int, reaper_pid: int) -> None:
    """Name the reaper beside `up` in the lock file (it holds the same lock)."""
    me = start_time(os.getpid())
    assert me is not None
    with contextlib.suppress(OSError):
        _write(fd, Holder(os.getpid(), me, reaper_pid))
