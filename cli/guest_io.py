"""`virtstream console`, `vnc` and `screenshot`: virtctl's guest I/O commands over the api's
VMI stream subresources (`services/api/streams.py`).

- console VMI [--timeout MIN]: the serial console in a raw terminal; Ctrl+] leaves. Waits up
  to --timeout minutes (virtctl's default 5) while the VMI is not running yet.
- vnc VMI --proxy-only [--port N]: a local TCP port (printed as `{"port": N}`, as virtctl
  does) relaying each VNC client to the VMI's VNC server; Ctrl-C stops it.
- screenshot VMI FILE: the VMI's screen as PNG (`vnc/screenshot`).
Failures are one line and exit 1."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import select
import ssl
import sys
import termios
import threading
import time
import tty
from pathlib import Path
from urllib.parse import quote

import httpx
import typer
from rich.console import Console
from websockets.exceptions import ConnectionClosed, InvalidHandshake, InvalidStatus
from websockets.sync.client import ClientConnection
from websockets.sync.client import connect as sync_connect
from websockets.typing import Subprotocol

from cli.settings import settings
from client import credentials

SUBPROTOCOL = Subprotocol("plain.kubevirt.io")
ESCAPE = b"\x1d"  # Ctrl+]
err = Console(stderr=True, soft_wrap=True, highlight=False)


def _fail(message: str) -> typer.Exit:
    err.print(f"error: {message}", markup=False)
    return typer.Exit(1)


def _path(namespace: str, name: str, channel: str) -> str:
    return (
        f"/apis/subresources.kubevirt.io/v1/namespaces/{quote(namespace)}"
        f"/virtualmachineinstances/{quote(name)}/{channel}"
    )


def stream_url(namespace: str, name: str, channel: str) -> str:
    base = credentials.for_api(settings.server).server.rstrip("/")
    base = "ws" + base[4:] if base.startswith("http") else base
    return base + _path(namespace, name, channel)


def _ws_auth() -> tuple[dict[str, str], ssl.SSLContext | None]:
    """The api's credentials for a WebSocket: its token, and the CA when it serves TLS."""
    creds = credentials.for_api(settings.server)
    verify = creds.verify()
    if not creds.server.startswith("https"):
        return creds.headers(), None
    return creds.headers(), verify if isinstance(verify, ssl.SSLContext) else None


def _refusal(e: InvalidStatus) -> tuple[int, str]:
    body = bytes(e.response.body or b"")
    try:
        message = str(json.loads(body)["message"])
    except (ValueError, KeyError, TypeError):
        message = body.decode(errors="replace").strip() or e.response.reason_phrase
    return e.response.status_code, message


def open_stream(namespace: str, name: str, channel: str, wait_seconds: float) -> ClientConnection:
    """The VMI's stream; while it is not running (400/503) retry until `wait_seconds`."""
    deadline = time.monotonic() + wait_seconds
    headers, tls = _ws_auth()
    while True:
        try:
            return sync_connect(
                stream_url(namespace, name, channel),
                subprotocols=[SUBPROTOCOL],
                max_size=None,
                compression=None,
                open_timeout=15,
                proxy=None,
                additional_headers=headers,
                ssl=tls,
            )
        except InvalidStatus as e:
            code, message = _refusal(e)
            if code in (400, 503) and "present" not in message and time.monotonic() < deadline:
                time.sleep(1)
                continue
            raise _fail(f"Can't connect to websocket ({code}): {message}") from None
        except (OSError, InvalidHandshake, TimeoutError) as e:
            raise _fail(
                f"cannot reach the api at {settings.server} ({e}): is `virtstream up` running?"
            ) from None


def console(
    name: str = typer.Argument(..., metavar="VMI", help="VMI (or VM) name"),
    namespace: str | None = typer.Option(None, "--namespace", "-n", help="Namespace"),
    timeout: int = typer.Option(5, help="Minutes to wait for the VMI to be running"),
) -> None:
    """Connect to a VMI's serial console (Ctrl+] to leave)."""
    ns = namespace or settings.namespace
    with open_stream(ns, name, "console", timeout * 60.0) as ws:
        _attach(ws, name)


def _attach(ws: ClientConnection, name: str) -> None:
    """The terminal to the open console `ws`, raw, until Ctrl+] or the stream's end."""
    err.print(f"Successfully connected to {name} console. The escape sequence is ^]", markup=False)
    closed = threading.Event()
    why: list[str] = []
    ended: list[str] = []

    def guest_to_stdout() -> None:
        try:
            for message in ws:
                data = message if isinstance(message, bytes) else message.encode()
                os.write(sys.stdout.fileno(), data)
        except ConnectionClosed:
            pass
        finally:
            if ws.close_code not in (None, 1000):
                why.append(f"{ws.close_code} {ws.close_reason}".strip())
            elif ws.close_reason:  # the guest stopped: the api says why (a migration is followed)
                ended.append(ws.close_reason)
            closed.set()

    reader = threading.Thread(target=guest_to_stdout, daemon=True)
    reader.start()
    stdin = sys.stdin.fileno()
    saved = termios.tcgetattr(stdin) if os.isatty(stdin) else None
    left = False
    try:
        if saved is not None:
            tty.setraw(stdin)
        while not closed.is_set():
            ready, _, _ = select.select([stdin], [], [], 0.2)
            if not ready:
                continue
            data = os.read(stdin, 1024)
            if not data:  # stdin at its end: stay until the guest side ends
                closed.wait()
                break
            if ESCAPE in data:
                head = data.split(ESCAPE, 1)[0]
                if head:
                    ws.send(head)
                left = True
                break
            ws.send(data)
    except ConnectionClosed:
        pass
    finally:
        if saved is not None:
            termios.tcsetattr(stdin, termios.TCSADRAIN, saved)
        with contextlib.suppress(Exception):
            ws.close()
    if not left and why:
        raise _fail(f"the console connection closed: {why[0]}")
    err.print("", markup=False)
    if not left and ended:
        err.print(f"the console closed: {ended[0]}", markup=False)


def screenshot(
    name: str = typer.Argument(..., metavar="VMI", help="VMI (or VM) name"),
    out: Path = typer.Argument(..., metavar="FILE", help="where the PNG goes"),
    namespace: str | None = typer.Option(None, "--namespace", "-n", help="Namespace"),
) -> None:
    """Save a VMI's screen as a PNG file."""
    ns = namespace or settings.namespace
    creds = credentials.for_api(settings.server)
    url = creds.server.rstrip("/") + _path(ns, name, "vnc/screenshot")
    try:
        r = httpx.get(url, timeout=60, headers=creds.headers(), verify=creds.verify())
    except httpx.HTTPError as e:
        raise _fail(f"cannot reach the api at {settings.server} ({e})") from None
    if r.status_code != 200:
        try:
            message = r.json()["message"]
        except (ValueError, KeyError, TypeError):
            message = r.text.strip()
        raise _fail(f"screenshot failed ({r.status_code}): {message}")
    try:
        out.write_bytes(r.content)
    except OSError as e:
        raise _fail(f"cannot write {out}: {e.strerror}") from None
    err.print(f"{out}: {len(r.content)} bytes", markup=False)


def vnc(
    name: str = typer.Argument(..., metavar="VMI", help="VMI (or VM) name"),
    namespace: str | None = typer.Option(None, "--namespace", "-n", help="Namespace"),
    proxy_only: bool = typer.Option(
        False, "--proxy-only", help="only print the local port a VNC client can use"
    ),
    port: int = typer.Option(0, help="local port (0: any free one)"),
) -> None:
    """Relay a local port to a VMI's VNC server."""
    if not proxy_only:
        raise _fail("no VNC viewer is started here: use --proxy-only and point one at the port")
    ns = namespace or settings.namespace
    # one check up front, so a VMI that is not running fails now, in one line
    with open_stream(ns, name, "vnc", 0):
        pass
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(_vnc_proxy(ns, name, port))


async def _vnc_proxy(ns: str, name: str, port: int) -> None:
    from websockets.asyncio.client import connect

    headers, tls = _ws_auth()

    async def client(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            ws = await connect(
                stream_url(ns, name, "vnc"), subprotocols=[SUBPROTOCOL], max_size=None,
                compression=None, proxy=None, additional_headers=headers, ssl=tls,
            )  # fmt: skip
        except (OSError, InvalidHandshake) as e:
            err.print(f"error: cannot open {name}'s VNC stream: {e}", markup=False)
            writer.close()
            return

        async def up() -> None:
            while data := await reader.read(65536):
                await ws.send(data)

        async def down() -> None:
            async for message in ws:
                writer.write(message if isinstance(message, bytes) else message.encode())
                await writer.drain()

        tasks = [asyncio.create_task(up()), asyncio.create_task(down())]
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await ws.close()
        writer.close()

    server = await asyncio.start_server(client, "127.0.0.1", port)
    bound = server.sockets[0].getsockname()[1]
    print(json.dumps({"port": bound}), flush=True)
    async with server:
        await server.serve_forever()


def register(app: typer.Typer) -> None:
    app.command()(console)
    app.command()(vnc)
    app.command()(screenshot)
