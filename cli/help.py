"""Help text in click's (and kubectl's) plain shape. typer 0.29 writes each parameter's
Python type beside it (`NAME <str>`, `--nodes <int range>`), braces around required
arguments and hidden arguments in the usage line; `use_plain_help()` makes the help say
`NAME` and `--nodes NODES` instead, and leaves hidden arguments out."""

from __future__ import annotations

from typing import Any

import typer.core


def _argument_type(self: typer.core.TyperArgument, ctx: Any) -> str | None:
    return None


def _argument_usage(self: typer.core.TyperArgument, ctx: Any) -> list[str]:
    if self.hidden:
        return []
    name = self.metavar or (self.name or "").upper()
    if not self.required and not name.startswith("["):
        name = f"[{name}]"
    return [name + ("..." if self.nargs != 1 else "")]


def _option_type(self: typer.core.TyperOption, ctx: Any) -> str | None:
    if self.metavar is not None:
        return self.metavar
    return (self.name or "value").upper() + ("..." if self.nargs != 1 else "")


def use_plain_help() -> None:
    typer.core.TyperArgument.display_type_rich = _argument_type  # type: ignore[method-assign, assignment]
    typer.core.TyperArgument.get_usage_pieces = _argument_usage  # type: ignore[method-assign]
    typer.core.TyperOption.display_type_rich = _option_type  # type: ignore[method-assign]
