"""A process of ours skips the optional packages its libraries look for and it never uses:
nats-py's WebSocket transport (aiohttp), httpx's own command line, and in a service
Litestar's pydantic plugins and structlog's rich tracebacks. Each library imports them
inside `try: ... except ImportError`, and a `None` in `sys.modules` is Python's way of
saying "not installed". They are installed for other parts (the kubernetes client, typer),
and importing them was a quarter of the api's start and a third of the command line's
(docs/DECISIONS.md, "What a process imports before it is ready")."""

from __future__ import annotations

import sys
from collections.abc import Collection, Sequence

UNUSED = ("pydantic", "rich", "httpx._main")
WEBSOCKET = "aiohttp"  # nats-py's ws:// and wss:// transport


def skip_unused(argv: Sequence[str] | None = None, *, keep: Collection[str] = ()) -> None:
    """Before the first import of nats, httpx, litestar or structlog; keeps aiohttp
    importable when an argument names a WebSocket NATS URL, and what `keep` names."""
    args = sys.argv if argv is None else argv
    names = [n for n in UNUSED if n not in keep]
    if not any("ws://" in a or "wss://" in a for a in args):
        names.append(WEBSOCKET)
    for name in names:
        sys.modules.setdefault(name, None)  # type: ignore[arg-type]
