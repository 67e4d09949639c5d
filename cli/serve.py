"""`virtstream serve ROLE [OPTIONS]`: one role of the control plane as its own process, the
way a host of a real install runs it (ops/systemd/): it finds the others only through
NATS (`--nats-url`, several servers comma-separated, with `--nats-creds` and
`--nats-tls-*` for an install that needs them). The options after the role are the
role's own (`virtstream serve controller --help`)."""

from __future__ import annotations

import importlib
import ssl
from collections.abc import Callable
from typing import cast

import typer

#: role → the module whose `main(argv)` runs it
ROLES = {
    "api": "services.api.__main__",
    "controller": "services.controller.__main__",
    "handler": "services.handler.__main__",
    "upkeep": "services.upkeep.__main__",
    "shadow": "services.shadow.__main__",
}


def serve(
    ctx: typer.Context,
    role: str = typer.Argument(..., metavar="ROLE", help=f"One of: {', '.join(ROLES)}"),
) -> None:
    """Run one role (api, controller, handler, upkeep, shadow) until SIGTERM; options after
    ROLE are its."""
    if role in ("-h", "--help"):
        typer.echo(__doc__)
        raise typer.Exit(0)
    if role not in ROLES:
        typer.echo(f"error: no role {role!r}; one of: {', '.join(ROLES)}", err=True)
        raise typer.Exit(2)
    main = cast(Callable[[list[str]], None], importlib.import_module(ROLES[role]).main)
    try:
        main(list(ctx.args))  # an unreachable NATS or a port taken: one line, exit 1
    except (OSError, ssl.SSLError) as e:  # a creds or TLS file missing or refused
        typer.echo(f"error: {role}: {e}", err=True)
        raise typer.Exit(1) from None


SETTINGS = {"allow_extra_args": True, "ignore_unknown_options": True, "help_option_names": []}
