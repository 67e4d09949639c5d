"""The data dir's run lock (ops/run_lock.py) on real files and processes: a free data dir is
taken at once; one held by a live `up` is refused in one line; one held only by a killed
run's reaper is waited for, with a line saying so, and taken once the reaper ends."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import msgspec
import pytest

from host.procs import start_time
from ops import run_lock

# Holds the data dir's lock as a reaper does (the same open file as a dead `up`'s), until
# its stdin closes.
REAPER = """
import fcntl, os, sys
fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT)
fcntl.flock(fd, fcntl.LOCK_EX)
os.ftruncate(fd, 0)
os.write(fd, sys.argv[2].encode())
print("held", flush=True)
sys.stdin.read()
"""


def hold_as_reaper(data_dir: Path, holder: run_lock.Holder) -> subprocess.Popen[str]:
    proc = subprocess.Popen(
        [sys.executable, "-c", REAPER, str(data_dir / run_lock.LOCK_FILE),
         msgspec.json.encode(holder).decode()],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert proc.stdout is not None and proc.stdout.readline() == "held\n"
    return proc


def dead_up() -> run_lock.Holder:
    """A holder whose `up` has exited (a killed run)."""
    up = subprocess.Popen(["sleep", "30"])
    started = start_time(up.pid)
    up.kill()
    up.wait()
    assert started is not None
    return run_lock.Holder(up=up.pid, up_started=started, reaper=4242)


def test_a_free_data_dir_is_taken_at_once_and_names_its_holder(tmp_path: Path) -> None:
    said: list[str] = []
    fd = run_lock.take(tmp_path, said.append)
    try:
        assert said == []
        run_lock.note_reaper(fd, 4242)
        holder = msgspec.json.decode((tmp_path / run_lock.LOCK_FILE).read_bytes(),
                                     type=run_lock.Holder)  # fmt: skip
        assert holder == run_lock.Holder(os.getpid(), start_time(os.getpid()) or 0, 4242)
    finally:
        os.close(fd)
    os.close(run_lock.take(tmp_path, said.append))  # released with its file: free again


def test_a_live_up_is_refused_in_one_line(tmp_path: Path) -> None:
    fd = run_lock.take(tmp_path, print)
    try:
        with pytest.raises(run_lock.RunLockError) as refused:
            run_lock.take(tmp_path, print)
        assert str(refused.value) == (
            f"another `virtstream up` (pid {os.getpid()}) runs on {tmp_path}"
        )
    finally:
        os.close(fd)


def test_a_killed_runs_reaper_is_waited_for_then_the_lock_is_ours(tmp_path: Path) -> None:
    reaper = hold_as_reaper(tmp_path, dead_up())
    said: list[str] = []
    try:
        started = time.monotonic()
        # the reaper finishes 0.5 s later
        done = subprocess.Popen(["sh", "-c", f"sleep 0.5; kill {reaper.pid}"])
        fd = run_lock.take(tmp_path, said.append)
        os.close(fd)
        done.wait()
    finally:
        reaper.kill()
        reaper.wait()
    assert time.monotonic() - started >= 0.4
    assert said[0] == (
        "waiting for the killed previous run's reaper (pid 4242) to stop what that run left"
    )
    assert said[1].startswith("the previous run's reaper is done (waited ")


def test_a_reaper_that_does_not_finish_is_given_up_on(tmp_path: Path) -> None:
    reaper = hold_as_reaper(tmp_path, dead_up())
    try:
        with pytest.raises(run_lock.RunLockError) as refused:
            run_lock.take(tmp_path, lambda _: None, timeout=1.0)
        assert "the previous run's reaper (pid 4242) has not finished in 1 s" in str(refused.value)
        with pytest.raises(run_lock.RunLockError, match="interrupted"):
            run_lock.take(tmp_path, lambda _: None, stopped=lambda: True)
    finally:
        reaper.kill()
        reaper.wait()
