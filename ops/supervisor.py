"""Supervises `virtstream up`'s services: one subprocess each, logs to files, restarts with
backoff, ordered stop.

Each service runs in its own session (process group), so a terminal's Ctrl-C reaches only
the supervisor, which then stops everything in order. Synchronous on purpose: `up` polls
a handful of processes a few times a second, no event loop needed.

Each service also gets SIGTERM when the supervisor dies, however it dies (the parent-death
signal). The pids (with their command lines) are recorded in a state file as well, so
whatever still outlives a killed supervisor is stopped (`stop_recorded`: by `up`'s reaper,
else by the next start): it would hold the ports and the consumers. With a state file, the
services stopped last (the bus) do not get the parent-death signal: they outlive a killed
supervisor until `stop_recorded` has stopped the others, so those drain against a live
bus and end in a second, rather than wait on reconnects until they are killed.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import msgspec

REPO = Path(__file__).resolve().parents[1]

#: a service that ran at least this long before dying restarts without delay
HEALTHY_AFTER_SECONDS = 30.0
MAX_BACKOFF_SECONDS = 10.0


class Recorded(msgspec.Struct, frozen=True):
    pid: int
    argv: list[str]
    last: bool = False  # stopped once the others have exited (ServiceSpec.stop_last)


def _cmdline(pid: int) -> list[str] | None:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return None
    return [a.decode(errors="replace") for a in raw.split(b"\0")[:-1]]


def stop_recorded(
    state_file: Path, timeout: float = 10.0, *, first_timeout: float | None = None
) -> list[str]:
    """SIGTERM (then SIGKILL after `timeout`) the processes a previous supervisor recorded
    that still run the recorded command (a reused pid is left alone), those recorded as
    `last` once the others have exited (bounded by `first_timeout` when given); returns
    their names."""
    try:
        recorded = msgspec.json.decode(state_file.read_bytes(), type=dict[str, Recorded])
    except (OSError, msgspec.DecodeError, msgspec.ValidationError):
        return []
    alive = {n: r for n, r in recorded.items() if _cmdline(r.pid) == r.argv}
    for last in (False, True):
        tier = [r for r in alive.values() if r.last is last]
        for r in tier:
            with contextlib.suppress(ProcessLookupError):
                os.kill(r.pid, signal.SIGTERM)
        bound = timeout if last or first_timeout is None else first_timeout
        deadline = time.monotonic() + bound
        for r in tier:
            while _cmdline(r.pid) == r.argv and time.monotonic() < deadline:
                time.sleep(0.05)
            if _cmdline(r.pid) == r.argv:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(r.pid, signal.SIGKILL)
    with contextlib.suppress(FileNotFoundError):
        state_file.unlink()
    return sorted(alive)


class ServiceSpec(msgspec.Struct, frozen=True, kw_only=True):
    name: str
    module: str = ""  # run as `python -m <module>`
    args: tuple[str, ...] = ()
    #: a program that is not a Python module (nats-server): its whole argv
    command: tuple[str, ...] = ()
    metrics_url: str = ""  # shown to the user
    env: dict[str, str] = {}
    umask: int = -1  # -1: the supervisor's
    #: stopped after every other service has stopped (the bus: its clients drain against
    #: it, and a handler whose server went first waits on reconnects until it is killed);
    #: with a state file, also when the supervisor is killed (no parent-death signal)
    stop_last: bool = False

    def argv(self) -> list[str]:
        if self.command:
            return list(self.command)
        return [sys.executable, "-m", self.module, *self.args]


def interrupt(proc: subprocess.Popen[bytes], timeout: float) -> None:
    """Stop a process as Ctrl-C would (SIGINT); SIGKILL it if it has not exited in
    `timeout` seconds."""
    proc.send_signal(signal.SIGINT)
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def _dies_with_us(argv: list[str]) -> list[str]:
    """The argv under `setpriv --pdeathsig TERM` (util-linux): the service gets SIGTERM
    when the supervisor dies, however it dies (even SIGKILL), so nothing outlives it.
    setpriv execs the command: its pid and /proc cmdline stay the service's own."""
    setpriv = shutil.which("setpriv")
    return [setpriv, "--pdeathsig", "TERM", "--", *argv] if setpriv else argv


def importable(module: str) -> bool:
    """Whether `python -m module` can run: the module (or its package's __main__) exists."""
    try:
        spec = importlib.util.find_spec(module)
        if spec is None:
            return False
        if spec.submodule_search_locations is not None:  # a package: needs __main__
            return importlib.util.find_spec(f"{module}.__main__") is not None
        return True
    except (ImportError, ValueError):
        return False


class Supervised:
    def __init__(self, spec: ServiceSpec, log_dir: Path, dies_with_us: bool = True) -> None:
        self.spec = spec
        self.dies_with_us = dies_with_us
        # `handler-node-1.log`: a file name a shell takes without quotes
        self.log_path = log_dir / f"{spec.name.replace(' ', '-')}.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self.started_at = 0.0
        self.restarts = 0
        self.failures = 0  # consecutive quick deaths, for the backoff
        self.restart_at: float | None = None

    def start(self) -> None:
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                _dies_with_us(self.spec.argv()) if self.dies_with_us else self.spec.argv(),
                cwd=REPO,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                env={**os.environ, **self.spec.env},
                umask=self.spec.umask,
            )
        self.started_at = time.monotonic()
        self.restart_at = None

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def terminate(self) -> None:
        if self.running:
            assert self.proc is not None
            with contextlib.suppress(ProcessLookupError):
                self.proc.send_signal(signal.SIGTERM)

    def wait(self, timeout: float) -> bool:
        if self.proc is None:
            return True
        try:
            self.proc.wait(timeout)
            return True
        except subprocess.TimeoutExpired:
            return False

    def kill(self) -> None:
        if self.running:
            assert self.proc is not None
            with contextlib.suppress(ProcessLookupError):
                self.proc.kill()
            self.proc.wait()


class Supervisor:
    """Starts services, restarts the ones that die, stops them in reverse order."""

    def __init__(
        self,
        log_dir: Path,
        say: Callable[[str], None] = print,
        state_file: Path | None = None,
    ) -> None:
        self.log_dir = log_dir
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.say = say
        self.services: list[Supervised] = []
        self.stopping = False
        self.state_file = state_file
        #: processes started outside the supervisor (nats-server) recorded alongside
        self.extra: dict[str, Recorded] = {}

    def record(self, name: str | None = None, pid: int = 0, argv: list[str] | None = None) -> None:
        """Write the state file (adding an outside process when given)."""
        if name is not None and argv is not None:
            self.extra[name] = Recorded(pid, [str(a) for a in argv])
        if self.state_file is None:
            return
        state = dict(self.extra)
        for s in self.services:
            if s.proc is not None and s.proc.poll() is None:
                state[s.spec.name] = Recorded(s.proc.pid, s.spec.argv(), s.spec.stop_last)
        tmp = self.state_file.with_suffix(".tmp")
        tmp.write_bytes(msgspec.json.encode(state))
        tmp.replace(self.state_file)

    def add(self, spec: ServiceSpec) -> Supervised | None:
        """Start a service; a module that is not there yet is reported and skipped."""
        if spec.module and not importable(spec.module):
            self.say(f"[yellow]skipped[/] {spec.name}: `{spec.module}` is not importable yet")
            return None
        # the bus outlives a killed supervisor only where stop_recorded will find it
        s = Supervised(spec, self.log_dir, not (spec.stop_last and self.state_file is not None))
        s.start()
        self.services.append(s)
        self.record()
        return s

    def poll(self) -> None:
        """Restart what died (with backoff); call a few times a second."""
        if self.stopping:
            return
        now = time.monotonic()
        for s in self.services:
            if s.running:
                continue
            if s.restart_at is None:
                assert s.proc is not None
                code = s.proc.returncode
                lived = now - s.started_at
                s.failures = 0 if lived >= HEALTHY_AFTER_SECONDS else s.failures + 1
                delay = min(MAX_BACKOFF_SECONDS, 0.5 * 2 ** max(0, s.failures - 1))
                s.restart_at = now + delay
                self.say(
                    f"[red]{s.spec.name} exited[/] with {code} after {lived:.1f}s; "
                    f"restarting in {delay:.1f}s (log {s.log_path})"
                )
            elif now >= s.restart_at:
                s.restarts += 1
                s.start()
                self.record()
                self.say(f"[green]{s.spec.name} restarted[/] (restart #{s.restarts})")

    def stop(self, names: set[str] | None = None, timeout: float = 10.0) -> None:
        """SIGTERM (reverse start order), wait, then SIGKILL what is left; the services
        marked `stop_last` only once the others are gone."""
        self.stopping = True
        chosen = [s for s in reversed(self.services) if names is None or s.spec.name in names]
        for last in (False, True):
            tier = [s for s in chosen if s.spec.stop_last is last]
            for s in tier:
                s.terminate()
            deadline = time.monotonic() + timeout
            for s in tier:
                if not s.wait(max(0.0, deadline - time.monotonic())):
                    self.say(f"[yellow]{s.spec.name} did not stop in {timeout}s: killed[/]")
                    s.kill()

    def forget(self) -> None:
        """Everything recorded has been stopped: drop the state file."""
        self.extra.clear()
        if self.state_file is not None:
            with contextlib.suppress(FileNotFoundError):
                self.state_file.unlink()
