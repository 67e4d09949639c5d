"""`virtstream port-forward` and `virtstream ssh`: virtctl's ways into a guest's network,
over the VMI's `portforward` subresource (a WebSocket per TCP connection, through the api
with the user's credentials, to the VMI's node and on to the guest's port).

- port-forward vmi/NAME LOCAL:GUEST [--address ADDR]: a local listener; each connection
  gets its own WebSocket. `PORT` alone is the same port on both sides; LOCAL 0 picks a free
  one (printed).
- port-forward --stdio vmi/NAME PORT: one connection on stdin/stdout (what ssh's
  ProxyCommand runs).
- ssh [USER@]vmi/NAME [-c COMMAND]: the local OpenSSH client through port-forward --stdio,
  as `virtctl ssh --local-ssh` runs it; its known hosts in ~/.ssh/kubevirt_known_hosts.
Failures are one line and exit 1."""

from __future__ import annotations

import asyncio
import contextlib
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import typer
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidHandshake, InvalidStatus

from cli.guest_io import SUBPROTOCOL, _fail, _refusal, _ws_auth, err, stream_url
from cli.settings import settings

CHUNK = 64 * 1024
KINDS = {"vmi": "vmi", "vmis": "vmi", "virtualmachineinstance": "vmi", "vm": "vm", "vms": "vm",
         "virtualmachine": "vm"}  # fmt: skip


def parse_target(target: str) -> tuple[str, str, str]:
    """`[USER@]KIND/NAME` → (user, kind, name); a VM's port-forward reaches its VMI, which
    has the VM's name (pure)."""
    user, _, rest = target.rpartition("@")
    kind, sep, name = rest.partition("/")
    if not sep or not name or kind.lower() not in KINDS:
        raise ValueError(f"target must be vmi/NAME or vm/NAME, not {rest!r}")
    return user, KINDS[kind.lower()], name


def parse_ports(spec: str) -> tuple[int, int]:
    """`LOCAL:GUEST` or `PORT` → (local, guest) (pure)."""
    local, sep, guest = spec.partition(":")
    try:
        pair = (int(local), int(guest if sep else local))
    except ValueError:
        raise ValueError(f"invalid port {spec!r}: LOCAL:GUEST or PORT") from None
    if not (0 <= pair[0] < 65536 and 0 < pair[1] < 65536):
        raise ValueError(f"invalid port {spec!r}")
    return pair


async def _open(ns: str, name: str, port: int) -> ClientConnection:
    headers, tls = _ws_auth()
    try:
        return await connect(
            stream_url(ns, name, f"portforward/{port}/tcp"), subprotocols=[SUBPROTOCOL],
            max_size=None, compression=None, open_timeout=15, proxy=None,
            additional_headers=headers, ssl=tls,
        )  # fmt: skip
    except InvalidStatus as e:
        code, message = _refusal(e)
        raise _fail(f"Can't connect to websocket ({code}): {message}") from None
    except (OSError, InvalidHandshake, TimeoutError) as e:
        raise _fail(f"cannot reach the api at {settings.server} ({e})") from None


async def _splice(ws: ClientConnection, reader: asyncio.StreamReader, write: Write) -> None:
    """Copy until either side ends: the reader's bytes to the WebSocket, its frames out."""

    async def up() -> None:
        while data := await reader.read(CHUNK):
            await ws.send(data)

    async def down() -> None:
        with contextlib.suppress(ConnectionClosed):
            async for message in ws:
                await write(message if isinstance(message, bytes) else message.encode())

    tasks = [asyncio.create_task(up()), asyncio.create_task(down())]
    await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    for t in tasks:
        t.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    await ws.close()


class Write:
    """An async write of bytes (a socket's writer, or stdout)."""

    def __init__(self, writer: asyncio.StreamWriter | None = None) -> None:
        self.writer = writer

    async def __call__(self, data: bytes) -> None:
        if self.writer is None:
            await asyncio.to_thread(_write_all, sys.stdout.fileno(), data)
        else:
            self.writer.write(data)
            await self.writer.drain()


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


async def _stdio(ns: str, name: str, port: int) -> None:
    ws = await _open(ns, name, port)
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    await _splice(ws, reader, Write())


async def _listen(ns: str, name: str, address: str, local: int, guest: int) -> None:
    # one connection up front, so a VMI that cannot be reached fails now, in one line
    await (await _open(ns, name, guest)).close()

    async def client(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            ws = await _open(ns, name, guest)
        except typer.Exit:
            writer.close()
            return
        try:
            await _splice(ws, reader, Write(writer))
        finally:
            writer.close()

    server = await asyncio.start_server(client, address, local)
    bound = server.sockets[0].getsockname()[1]
    err.print(f"Forwarding from {address}:{bound} -> {guest}", markup=False)
    async with server:
        await server.serve_forever()


def port_forward(
    target: str = typer.Argument(..., metavar="TYPE/NAME", help="vmi/NAME or vm/NAME"),
    ports: list[str] = typer.Argument(..., metavar="PORT...", help="LOCAL:GUEST or PORT"),
    namespace: str | None = typer.Option(None, "--namespace", "-n", help="Namespace"),
    stdio: bool = typer.Option(False, "--stdio", help="one connection on stdin and stdout"),
    address: str = typer.Option("127.0.0.1", "--address", help="the local address to bind"),
) -> None:
    """Forward local ports (or stdin/stdout) to ports of a VMI's guest."""
    try:
        _, _, name = parse_target(target)
        pairs = [parse_ports(p) for p in ports]
    except ValueError as e:
        raise _fail(str(e)) from None
    ns = namespace or settings.namespace
    if stdio:
        if len(pairs) != 1:
            raise _fail("--stdio forwards exactly one port")
        asyncio.run(_stdio(ns, name, pairs[0][1]))
        return

    async def all_ports() -> None:
        await asyncio.gather(*(_listen(ns, name, address, lo, g) for lo, g in pairs))

    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(all_ports())


def ssh(
    target: str = typer.Argument(..., metavar="[USER@]TYPE/NAME", help="vmi/NAME or vm/NAME"),
    namespace: str | None = typer.Option(None, "--namespace", "-n", help="Namespace"),
    username: str = typer.Option("", "--username", "-l", help="the user in the guest"),
    identity_file: Path | None = typer.Option(None, "--identity-file", "-i", help="private key"),
    port: int = typer.Option(22, "--port", "-p", help="the guest's SSH port"),
    command: str = typer.Option("", "--command", "-c", help="run this instead of a shell"),
    known_hosts: Path = typer.Option(
        Path.home() / ".ssh" / "kubevirt_known_hosts", "--known-hosts", help="known hosts file"
    ),
    local_ssh_opts: list[str] = typer.Option(
        [],
        "--local-ssh-opts",
        "-t",
        metavar="OPTION",
        help='one whole option for ssh, quoted: -t "-o StrictHostKeyChecking=accept-new" '
        "(repeatable)",
    ),
) -> None:
    """SSH into a VMI's guest with the local ssh client, through its portforward."""
    try:
        user, kind, name = parse_target(target)
    except ValueError as e:
        raise _fail(str(e)) from None
    binary = shutil.which("ssh")
    if binary is None:
        raise _fail("no ssh client found (install OpenSSH's client)")
    ns = namespace or settings.namespace
    proxy = shlex.join([
        sys.executable, "-m", "cli.main", "--server", settings.server,
        "port-forward", "--stdio", "-n", ns, f"vmi/{name}", str(port),
    ])  # fmt: skip
    known_hosts.parent.mkdir(parents=True, exist_ok=True)
    args = [binary, "-o", f"ProxyCommand={proxy}", "-o", f"UserKnownHostsFile={known_hosts}"]
    if identity_file is not None:
        args += ["-i", str(identity_file)]
    args += [arg for opt in local_ssh_opts for arg in shlex.split(opt)]
    args += ["-l", username or user or "root", f"{kind}/{name}.{ns}"]
    if command:
        args.append(command)
    raise typer.Exit(subprocess.call(args))


def register(app: typer.Typer) -> None:
    app.command("port-forward")(port_forward)
    app.command()(ssh)
