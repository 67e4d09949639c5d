"""The `virtstream` command line."""

from __future__ import annotations

import typer

from cli.up import up

app = typer.Typer(
    help="virtstream: KubeVirt's control plane as event-sourced choreography over NATS JetStream",
    no_args_is_help=True,
)


@app.callback()
def main() -> None:
    """Global options live here as the commands grow."""


app.command()(up)

if __name__ == "__main__":
    app()
