"""`virtstream up`: the whole cluster on this machine."""

from __future__ import annotations

import signal
import time
from pathlib import Path

import typer
from rich.console import Console

from ops.nats_server import NatsServer

console = Console()


def up(
    data_dir: Path = typer.Option(Path(".virtstream"), help="Where the event store lives"),
    nats_url: str = typer.Option("", help="Use this NATS server instead of the embedded one"),
    nats_port: int = typer.Option(4222, help="Embedded nats-server client port"),
    demo: bool = typer.Option(False, help="Run the demo workload once the cluster is up"),
) -> None:
    """Run the embedded nats-server (and, as they land, the services) until Ctrl-C."""
    server = None
    if not nats_url:
        server = NatsServer(data_dir / "nats", port=nats_port)
        server.start_sync()
        nats_url = server.url
    console.print(f"[green]NATS[/] {nats_url}  (JetStream store {data_dir / 'nats'})")
    if server:
        console.print(f"[green]NATS monitoring[/] {server.monitoring_url}")
    if demo:
        console.print("demo: the services are not there yet; the event store is up")
    stop = False

    def _stop(*_: object) -> None:
        nonlocal stop
        stop = True

    signal.signal(signal.SIGINT, _stop)
    signal.signal(signal.SIGTERM, _stop)
    try:
        while not stop and not demo:
            time.sleep(0.2)
    finally:
        if server:
            server.stop_sync()
        console.print("stopped")
