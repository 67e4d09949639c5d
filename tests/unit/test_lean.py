"""A service's process imports nats, httpx, litestar and structlog without the optional
packages they look for (services/runtime/lean.py), and keeps aiohttp for a WebSocket NATS
URL; the command line's process keeps rich."""

from __future__ import annotations

import subprocess
import sys

PROBE = """
import sys
from services.runtime import lean
lean.skip_unused(sys.argv[1:])
import httpx, litestar, nats, structlog  # they still import
from nats.aio import transport
from services.api import app  # noqa: F401
loaded = [
    n for n in ("aiohttp", "pydantic", "rich", "httpx._main") if sys.modules.get(n) is not None
]
print(f"loaded={','.join(loaded)} ws={transport.aiohttp is not None}")
"""


def probe(*argv: str) -> str:
    out = subprocess.run(
        [sys.executable, "-c", PROBE, *argv], capture_output=True, text=True, check=True
    )
    return out.stdout.strip()


def test_a_service_process_skips_what_it_never_uses() -> None:
    assert probe("--nats-url", "nats://127.0.0.1:4222") == "loaded= ws=False"


def test_a_websocket_nats_url_keeps_the_websocket_transport() -> None:
    assert probe("--nats-url", "wss://nats.example:443") == "loaded=aiohttp ws=True"


def test_the_command_line_skips_them_before_its_first_import() -> None:
    out = subprocess.run(
        [sys.executable, "-c", "import sys; sys.argv[0] = '-m'; import cli.main; "
         "print(sys.modules.get('aiohttp'), sys.modules.get('httpx._main'), "
         "sys.modules.get('rich') is not None)"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    assert out.stdout.split() == ["None", "None", "True"]


def test_the_http_client_loads_no_nats_and_no_structlog() -> None:
    """A script that talks to the api over HTTP pays for neither (its credentials module
    reads the NATS settings from eventstore/connect_options.py, not the connecting code)."""
    out = subprocess.run(
        [sys.executable, "-c", "import sys, client; "
         "print([n for n in ('nats', 'structlog') if n in sys.modules])"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    assert out.stdout.strip() == "[]"
