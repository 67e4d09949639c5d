"""The node's console server (qemu mode): what virt-handler's console server is to
virt-api. The api reaches it at the node's address and `console_port` (NodeJoined) and
relays its client's WebSocket to it.

- `GET /v1/namespaces/{ns}/virtualmachineinstances/{name}/console`: WebSocket, binary
  frames, the guest's serial console. The domain's serial port is a pty (libvirt's
  `<console type="pty" tty=...>` in the live XML); the server opens that pty and relays
  bytes both ways. QEMU keeps writing the console log file meanwhile.
- `.../vnc`: WebSocket, binary frames, the bytes of a TCP connection to the domain's VNC
  server (libvirt's autoport on loopback, read from the live XML): RFB as is.
- `.../screenshot`: plain GET, `virDomainScreenshot` (PPM from QEMU) converted to PNG.
- `.../portforward/<port>[/tcp]`: WebSocket, binary frames, the bytes of one TCP
  connection to that port of the guest (`port_forward.py`: through a host forward QEMU's
  user-mode network holds only while the connection is made). Any number at once.
- `.../log/compute`, `.../log/guest-console-log`: plain GET, the end of the launcher's log
  or of the serial console's log QEMU writes (`services/launcher/rundir.py`), at most
  `?limitBytes=` (1 MiB) and `?tailLines=` lines: the launcher pod's `kubectl logs`.
- `.../guestosinfo`, `.../userlist`, `.../filesystemlist`: plain GET, what the guest agent
  says (`virDomainGetGuestInfo`, `guest-info`, `guest-fsfreeze-status`) as KubeVirt's JSON
  (`agent_info.py`); the agent's error (not connected, ...) is a 500 with its message.

With TLS files (`virtstream up` gives them) the server accepts only the api: mutual TLS
with the cluster's CA and the api's Common Name (`services/runtime/mtls.py`, as KubeVirt's
virt-handler accepts only virt-api); a connection without that certificate ends in the TLS
handshake, one with another certificate of the CA is answered 403. Without them it serves
plain WebSockets on loopback (`--insecure`).

One client per guest and channel: a new connection closes the previous one with 1001
"close by another connection", as virt-handler does. The domain is looked up by name on
each request, so after a live migration the target node's server finds the guest there
and the source's answers 404."""

from __future__ import annotations

import asyncio
import contextlib
import io
import os
import re
import ssl
import termios
import tty
import xml.etree.ElementTree as ET
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from http import HTTPStatus
from pathlib import Path

import libvirt
import structlog
from websockets.asyncio.server import Server, ServerConnection, serve
from websockets.datastructures import Headers
from websockets.exceptions import ConnectionClosed
from websockets.http11 import Request, Response

from host import pod_network
from services.handler import agent_info, port_forward
from services.launcher import rundir
from services.launcher.domain_xml import pod_address_of, pod_ports_of
from services.runtime.mtls import CLIENT_CN, PeerRefused, TlsFiles, check_peer

log = structlog.get_logger()

PATH = re.compile(
    r"^/v1/namespaces/(?P<ns>[^/]+)/virtualmachineinstances/(?P<name>[^/]+)/"
    r"(?P<channel>console|vnc|screenshot|guestosinfo|userlist|filesystemlist"
    r"|portforward/(?P<port>\d{1,5})(?:/tcp)?|log/(?P<log>compute|guest-console-log))$"
)
LOG_BYTES = 1 << 20  # the most of a log one request reads
AGENT_CHANNELS = ("guestosinfo", "userlist", "filesystemlist")
CHUNK = 64 * 1024


class NoDomain(Exception):
    """The guest is not on this node (not yet started, gone, or migrated away)."""


@dataclass(frozen=True)
class Endpoints:
    """Where a running domain's console and VNC server are, from its live XML."""

    pty: str | None
    vnc_port: int | None


def endpoints_of(xml: str) -> Endpoints:
    """The serial console's pty and the VNC port of a live domain XML (pure)."""
    root = ET.fromstring(xml)
    pty = None
    for el in root.iterfind("./devices/console"):
        if el.get("type") == "pty" and el.get("tty"):
            pty = el.get("tty")
            break
    port = None
    for el in root.iterfind("./devices/graphics"):
        if el.get("type") == "vnc" and (el.get("port") or "-1") != "-1":
            port = int(el.get("port") or 0)
            break
    return Endpoints(pty=pty, vnc_port=port)


def _running(conn: libvirt.virConnect, domain: str) -> libvirt.virDomain:
    """The domain, running: NoDomain when it is not defined or not active."""
    try:
        dom = conn.lookupByName(domain)
    except libvirt.libvirtError as e:
        if e.get_error_code() == libvirt.VIR_ERR_NO_DOMAIN:
            raise NoDomain(domain) from None
        raise
    if not dom.isActive():
        raise NoDomain(domain)
    return dom


def _domain_xml(uri: str, domain: str) -> str:
    conn = libvirt.open(uri)
    try:
        dom = conn.lookupByName(domain)
        if not dom.isActive():
            raise NoDomain(domain)
        return str(dom.XMLDesc(0))
    except libvirt.libvirtError as e:
        if e.get_error_code() == libvirt.VIR_ERR_NO_DOMAIN:
            raise NoDomain(domain) from None
        raise
    finally:
        conn.close()


def agent_json(uri: str, domain: str, channel: str) -> bytes:
    """What the domain's guest agent says for `channel`, as KubeVirt's JSON."""
    import json

    import libvirt_qemu

    conn = libvirt.open(uri)
    try:
        dom = _running(conn, domain)
        if channel == "userlist":
            return json.dumps(
                agent_info.user_list(dom.guestInfo(libvirt.VIR_DOMAIN_GUEST_INFO_USERS, 0))
            ).encode()
        if channel == "filesystemlist":
            params = dom.guestInfo(libvirt.VIR_DOMAIN_GUEST_INFO_FILESYSTEM, 0)
            return json.dumps(agent_info.filesystem_list(params)).encode()
        params = dom.guestInfo(0, 0)  # every kind of information the agent has
        agent = json.loads(
            libvirt_qemu.qemuAgentCommand(dom, '{"execute":"guest-info"}', 10, 0)
        ).get("return", {})
        frozen = json.loads(
            libvirt_qemu.qemuAgentCommand(dom, '{"execute":"guest-fsfreeze-status"}', 10, 0)
        ).get("return", "")
        return json.dumps(agent_info.guest_os_info(params, agent, str(frozen))).encode()
    finally:
        conn.close()


def screenshot_png(uri: str, domain: str) -> bytes:
    """The domain's first screen as PNG (virDomainScreenshot gives QEMU's PPM)."""
    from PIL import Image  # imported here: only screenshots need it

    conn = libvirt.open(uri)
    try:
        dom = _running(conn, domain)
        stream = conn.newStream(0)
        data = bytearray()
        try:
            dom.screenshot(stream, 0, 0)
            stream.recvAll(lambda _s, buf, _o: data.extend(buf), None)
            stream.finish()
        except BaseException:
            with contextlib.suppress(libvirt.libvirtError):
                stream.abort()
            raise
        out = io.BytesIO()
        Image.open(io.BytesIO(bytes(data))).save(out, format="PNG")
        return out.getvalue()
    finally:
        conn.close()


#: the guest's port, connected (a portforward's handshake → its session)
Streams = tuple[asyncio.StreamReader, asyncio.StreamWriter]


def log_tail(path: Path, limit_bytes: int = LOG_BYTES, tail_lines: int | None = None) -> bytes:
    """The last `limit_bytes` of a log (from a line's start when cut), then its last
    `tail_lines` lines; b"" when there is none yet."""
    try:
        with path.open("rb") as f:
            size = f.seek(0, os.SEEK_END)
            f.seek(max(0, size - limit_bytes))
            data = f.read(limit_bytes)
    except FileNotFoundError:
        return b""
    if size > limit_bytes and b"\n" in data:
        data = data.split(b"\n", 1)[1]
    if tail_lines is not None:
        lines = data.splitlines(keepends=True)
        data = b"".join(lines[-tail_lines:]) if tail_lines > 0 else b""
    return data


def _query_int(query: str, name: str) -> int | None:
    for part in query.split("&"):
        k, _, v = part.partition("=")
        if k == name and v.isdigit():
            return int(v)
    return None


def _not_here(domain: str) -> str:
    return f"the domain {domain} is not running on this node"


def _text(status: HTTPStatus, message: str) -> Response:
    body = message.encode()
    headers = Headers([("Content-Type", "text/plain; charset=utf-8"),
                       ("Content-Length", str(len(body)))])  # fmt: skip
    return Response(status.value, status.phrase, headers, body)


class ConsoleServer:
    """The server on `host:port` (0: any free port) for the domains of libvirt `uri`;
    with `tls`, for the api's client certificate alone."""

    def __init__(
        self,
        uri: str,
        host: str = "127.0.0.1",
        port: int = 0,
        tls: TlsFiles | None = None,
        pod_network_dir: str | None = None,
        launchers_dir: Path | None = None,
    ) -> None:
        self.uri = uri
        self.pod_network_dir = pod_network_dir
        self.launchers_dir = launchers_dir  # the logs of this node's launchers
        self.host = host
        self.port = port
        self.ssl: ssl.SSLContext | None = tls.server_context() if tls else None
        self._server: Server | None = None
        self._active: dict[tuple[str, str, str], ServerConnection] = {}
        self._endpoints: dict[ServerConnection, Endpoints] = {}  # handshake → session
        self._forwarded: dict[ServerConnection, Streams] = {}  # handshake → session

    async def start(self) -> int:
        self._server = await serve(
            self._session, self.host, self.port, ssl=self.ssl,
            process_request=self._process_request, max_size=CHUNK * 4, compression=None,
        )  # fmt: skip
        self.port = next(iter(self._server.sockets)).getsockname()[1]
        return self.port

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            with contextlib.suppress(Exception):
                async with asyncio.timeout(5):
                    await self._server.wait_closed()

    async def _process_request(self, conn: ServerConnection, request: Request) -> Response | None:
        if self.ssl is not None:
            try:
                check_peer(conn.transport.get_extra_info("peercert"), CLIENT_CN)
            except PeerRefused as e:
                log.warning("console client refused", reason=str(e))
                return _text(HTTPStatus.FORBIDDEN, str(e))
        m = PATH.match(request.path.split("?", 1)[0])
        if m is None:
            return _text(HTTPStatus.NOT_FOUND, "not found")
        domain = f"{m['ns']}_{m['name']}"
        if m["log"] is not None:
            return await self._log(domain, m["log"], request.path.partition("?")[2])
        if m["port"] is not None:
            return await self._connect_guest(conn, domain, int(m["port"]))
        try:
            if m["channel"] == "screenshot":
                png = await asyncio.to_thread(screenshot_png, self.uri, domain)
                headers = Headers([("Content-Type", "image/png"),
                                   ("Content-Length", str(len(png)))])  # fmt: skip
                return Response(200, "OK", headers, png)
            if m["channel"] in AGENT_CHANNELS:
                body = await asyncio.to_thread(agent_json, self.uri, domain, m["channel"])
                headers = Headers([("Content-Type", "application/json"),
                                   ("Content-Length", str(len(body)))])  # fmt: skip
                return Response(200, "OK", headers, body)
            ends = endpoints_of(await asyncio.to_thread(_domain_xml, self.uri, domain))
        except NoDomain:
            return _text(HTTPStatus.NOT_FOUND, _not_here(domain))
        except Exception as e:  # libvirtd away, an image it cannot read: one line
            log.warning("console request failed", domain=domain, error=repr(e))
            return _text(HTTPStatus.INTERNAL_SERVER_ERROR, str(e))
        if m["channel"] == "console" and ends.pty is None:
            return _text(HTTPStatus.BAD_REQUEST, "No serial consoles are present.")
        if m["channel"] == "vnc" and ends.vnc_port is None:
            return _text(HTTPStatus.BAD_REQUEST, "No graphics devices are present.")
        self._endpoints[conn] = ends
        return None

    async def _log(self, domain: str, container: str, query: str) -> Response:
        """The end of the launcher's log (`compute`) or of the guest's serial console."""
        if self.launchers_dir is None:
            return _text(HTTPStatus.NOT_FOUND, "this node keeps no launcher logs")
        sock = rundir.launcher_socket_path(self.launchers_dir, domain)
        path = rundir.log_path(sock) if container == "compute" else rundir.console_log_path(sock)
        limit = min(_query_int(query, "limitBytes") or LOG_BYTES, LOG_BYTES)
        body = await asyncio.to_thread(log_tail, path, limit, _query_int(query, "tailLines"))
        headers = Headers([("Content-Type", "text/plain; charset=utf-8"),
                           ("Content-Length", str(len(body)))])  # fmt: skip
        return Response(200, "OK", headers, body)

    async def _connect_guest(
        self, conn: ServerConnection, domain: str, port: int
    ) -> Response | None:
        if not 0 < port < 65536:
            return _text(HTTPStatus.BAD_REQUEST, f"invalid port {port}")
        if self.pod_network_dir is not None:
            try:
                xml = await asyncio.to_thread(_domain_xml, self.uri, domain)
            except NoDomain:
                return _text(HTTPStatus.NOT_FOUND, _not_here(domain))
            if address := pod_address_of(xml):
                allowed = pod_ports_of(xml)
                if allowed is not None and port not in allowed:  # the interface's `ports`
                    listed = ", ".join(map(str, allowed))
                    msg = f"port {port} of the guest is not among its interface's ports ({listed})"
                    return _text(HTTPStatus.BAD_REQUEST, msg)
                return await self._connect_pod(conn, address, port)
        try:
            forward = await asyncio.to_thread(port_forward.open_forward, self.uri, domain, port)
        except libvirt.libvirtError as e:
            if e.get_error_code() == libvirt.VIR_ERR_NO_DOMAIN:
                return _text(HTTPStatus.NOT_FOUND, _not_here(domain))
            return _text(HTTPStatus.INTERNAL_SERVER_ERROR, str(e))
        except port_forward.NoNetwork as e:
            return _text(HTTPStatus.BAD_REQUEST, str(e))
        try:
            self._forwarded[conn] = await asyncio.open_connection("127.0.0.1", forward.host_port)
        except OSError as e:
            return _text(HTTPStatus.INTERNAL_SERVER_ERROR, f"port {port} of the guest: {e}")
        finally:
            await asyncio.to_thread(port_forward.close_forward, self.uri, domain, forward)
        return None

    async def _connect_pod(
        self, conn: ServerConnection, address: str, port: int
    ) -> Response | None:
        """A connection to the guest's address on the pod network, made inside its
        namespace: it lives in that namespace's kernel, not in a QEMU, so it survives a
        live migration of the guest (its route follows the guest to the target's bridge)."""
        assert self.pod_network_dir is not None
        try:
            net = await asyncio.to_thread(pod_network.load, self.pod_network_dir)
            sock = await asyncio.to_thread(pod_network.connect_in, net.netns, address, port)
            self._forwarded[conn] = await asyncio.open_connection(sock=sock)
        except OSError as e:
            return _text(HTTPStatus.INTERNAL_SERVER_ERROR, f"port {port} of the guest: {e}")
        return None

    async def _forward(self, ws: ServerConnection) -> None:
        reader, writer = self._forwarded.pop(ws)
        try:
            await _pump(lambda: reader.read(CHUNK), ws, writer.write)
        except (ConnectionClosed, OSError) as e:
            log.info("port forward ended", reason=repr(e))
        finally:
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()
            await ws.close()

    async def _session(self, ws: ServerConnection) -> None:
        if ws in self._forwarded:
            return await self._forward(ws)
        m = PATH.match(ws.request.path.split("?", 1)[0] if ws.request else "")
        ends = self._endpoints.pop(ws, None)
        if m is None or ends is None:
            return
        key = (m["ns"], m["name"], m["channel"])
        previous = self._active.get(key)
        self._active[key] = ws
        if previous is not None:
            await previous.close(1001, "close by another connection")
        try:
            if m["channel"] == "console":
                assert ends.pty is not None
                await _relay_pty(ws, ends.pty)
            else:
                assert ends.vnc_port is not None
                await _relay_tcp(ws, "127.0.0.1", ends.vnc_port)
        except (ConnectionClosed, OSError) as e:
            log.info("console session ended", channel=m["channel"], vmi=m["name"], reason=repr(e))
        finally:
            if self._active.get(key) is ws:
                del self._active[key]
            await ws.close()


async def _pump(
    read: Callable[[], Awaitable[bytes]], ws: ServerConnection, write: Callable[[bytes], None]
) -> None:
    """Relay until either side ends: reads to the WebSocket, messages to `write`."""

    async def outbound() -> None:
        while data := await read():
            await ws.send(data)

    async def inbound() -> None:
        async for message in ws:
            write(message.encode() if isinstance(message, str) else message)

    tasks = [asyncio.create_task(outbound()), asyncio.create_task(inbound())]
    try:
        done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        for t in done:
            if (exc := t.exception()) is not None:
                raise exc
    finally:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


async def _relay_pty(ws: ServerConnection, path: str) -> None:
    fd = os.open(path, os.O_RDWR | os.O_NOCTTY | os.O_NONBLOCK)
    try:
        # raw, no echo: the guest's own tty does the line editing and echoing
        with contextlib.suppress(termios.error):
            tty.setraw(fd)
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[bytes] = asyncio.Queue()

        def readable() -> None:
            try:
                queue.put_nowait(os.read(fd, CHUNK))
            except BlockingIOError:
                return
            except OSError:  # QEMU closed its side: the guest is gone
                loop.remove_reader(fd)
                queue.put_nowait(b"")

        def write(data: bytes) -> None:
            view = memoryview(data)
            while view:
                try:
                    view = view[os.write(fd, view) :]
                except BlockingIOError:  # a full pty buffer: console input is tiny
                    continue

        loop.add_reader(fd, readable)
        try:
            await _pump(queue.get, ws, write)
        finally:
            loop.remove_reader(fd)
    finally:
        os.close(fd)


async def _relay_tcp(ws: ServerConnection, host: str, port: int) -> None:
    reader, writer = await asyncio.open_connection(host, port)
    try:
        await _pump(lambda: reader.read(CHUNK), ws, writer.write)
    finally:
        writer.close()
        with contextlib.suppress(Exception):
            await writer.wait_closed()
