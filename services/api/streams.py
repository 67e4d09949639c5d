"""The VMI's stream subresources: `console` and `vnc` (WebSockets), `vnc/screenshot`, and the
guest agent's `guestosinfo`, `userlist` and `filesystemlist` (plain GETs).

virt-api's part as KubeVirt has it: check the VMI (`target`, pure, KubeVirt's answers),
dial the console server of the node's handler (its address and `console_port` from
NodeJoined), and only once that answered accept the client's WebSocket (subprotocol
`plain.kubevirt.io`) and copy binary frames both ways. A refusal before the upgrade is a
plain HTTP answer with a `Status` body, as the API server gives (`virtctl` prints it).

With the api's client certificate for the nodes (`virtstream up` gives it) the dial is
mutual TLS (`services/runtime/mtls.py`): the node's server must present the handlers'
certificate of the cluster's CA, and it serves only the api's."""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Literal

import httpx
import msgspec
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidHandshake, InvalidStatus

from core.errors import (
    ApiError,
    Resource,
    bad_request,
    conflict,
    internal,
    not_found,
    unavailable,
)
from projections.cluster import Cluster, key
from services.runtime.mtls import SERVER_CN, PeerRefused, check_peer

SUBPROTOCOL = "plain.kubevirt.io"
VMI_RESOURCE = Resource("virtualmachineinstances", "kubevirt.io", "VirtualMachineInstance")
Channel = Literal["console", "vnc", "screenshot"]
_json = msgspec.json.Encoder()
# plain ASGI (the websocket.http.response extension is outside Litestar's typed events)
Scope = dict[str, Any]
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]
DIAL_SECONDS = 10.0
#: How long a console waits for its guest to reappear (a live migration's handover: the
#: source's QEMU is gone, the fold does not name the target yet).
FOLLOW_SECONDS = 60.0
FOLLOW_INTERVAL = 0.25


@dataclass(frozen=True)
class Target:
    """The node console server's URL for one VMI's channel."""

    url: str


def target(cluster: Cluster, ns: str, name: str, channel: Channel, secure: bool = False) -> Target:
    """Where a VMI's console, VNC or screen is (`secure`: over TLS), or KubeVirt's refusal
    (pure)."""
    vmi = cluster.vmis.get(key(ns, name))
    if vmi is None:
        raise not_found(VMI_RESOURCE, name)
    devices = (vmi.manifest.get("spec") or {}).get("domain", {}).get("devices") or {}
    if channel == "console" and devices.get("autoattachSerialConsole") is False:
        raise bad_request("No serial consoles are present.")
    if channel != "console" and devices.get("autoattachGraphicsDevice") is False:
        raise bad_request("No graphics devices are present.")
    if vmi.phase == "Failed":
        raise conflict(VMI_RESOURCE, name, "VMI is in failed status")
    if vmi.phase != "Running" or not vmi.node:
        raise bad_request("VMI is not running")
    node = cluster.nodes.get(vmi.node)
    if node is None or not node.console_port:
        # the test driver's guests have no console: answered as for a VMI without one
        what = "serial consoles" if channel == "console" else "graphics devices"
        raise bad_request(f"No {what} are present.")
    path = f"/v1/namespaces/{ns}/virtualmachineinstances/{name}/{channel}"
    scheme = ("https" if secure else "http") if channel == "screenshot" else "ws"
    if secure and scheme == "ws":
        scheme = "wss"
    return Target(f"{scheme}://{node.address or '127.0.0.1'}:{node.console_port}{path}")


def _upstream_error(code: int, body: bytes) -> ApiError:
    message = body.decode(errors="replace").strip() or "the node's console server refused"
    if code == 404:  # the domain left the node (a migration's handover): try again
        return unavailable(message)
    if code == 400:
        return bad_request(message)
    return internal(message)


def forward_target(
    cluster: Cluster, ns: str, name: str, port: int, protocol: str = "tcp", secure: bool = False
) -> Target:
    """Where the VMI's `portforward` to `port` is served (its node's console server), or
    virt-api's refusal (pure): 409 while paused, 400 unless it runs."""
    vmi = cluster.vmis.get(key(ns, name))
    if vmi is None:
        raise not_found(VMI_RESOURCE, name)
    if protocol != "tcp":
        raise bad_request(f"unsupported protocol {protocol}: only tcp is forwarded")
    if not 0 < port < 65536:
        raise bad_request(f"invalid port {port}")
    if vmi.paused:
        raise conflict(VMI_RESOURCE, name, "VMI is paused")
    node = cluster.nodes.get(vmi.node) if vmi.node else None
    if vmi.phase != "Running" or node is None:
        raise bad_request(
            "Unable to connect to VirtualMachineInstance because phase is "
            f"{vmi.phase} instead of Running"
        )
    if not node.console_port:  # the test driver's guests have no network
        raise bad_request("no network interfaces are present")
    path = f"/v1/namespaces/{ns}/virtualmachineinstances/{name}/portforward/{port}/tcp"
    scheme = "wss" if secure else "ws"
    return Target(f"{scheme}://{node.address or '127.0.0.1'}:{node.console_port}{path}")


AGENT_CHANNELS = ("guestosinfo", "userlist", "filesystemlist")
NO_AGENT = "VMI does not have guest agent connected"


def agent_target(
    cluster: Cluster, ns: str, name: str, channel: str, secure: bool = False
) -> Target:
    """Where the VMI's guest agent answers `channel` (`secure`: over TLS), or virt-api's
    refusal (pure): 409 while the VMI does not run or its agent is not connected (no
    AgentConnected)."""
    vmi = cluster.vmis.get(key(ns, name))
    if vmi is None:
        raise not_found(VMI_RESOURCE, name)
    if vmi.phase != "Running" or not vmi.node:
        raise conflict(VMI_RESOURCE, name, "VMI is not running")
    if not vmi.agent_connected:
        raise conflict(VMI_RESOURCE, name, NO_AGENT)
    node = cluster.nodes.get(vmi.node)
    if node is None or not node.console_port:
        raise conflict(VMI_RESOURCE, name, NO_AGENT)
    path = f"/v1/namespaces/{ns}/virtualmachineinstances/{name}/{channel}"
    scheme = "https" if secure else "http"
    return Target(f"{scheme}://{node.address or '127.0.0.1'}:{node.console_port}{path}")


async def get(t: Target, tls: ssl.SSLContext | None = None) -> bytes:
    """A plain GET of the node's console server (the screen, the guest agent's answers)
    with the api's client certificate: the body, or ApiError."""
    async with httpx.AsyncClient(timeout=30, verify=tls or True) as http:
        try:
            async with http.stream("GET", t.url) as r:
                if tls is not None:
                    stream = r.extensions["network_stream"]
                    check_peer(stream.get_extra_info("ssl_object").getpeercert(), SERVER_CN)
                content = await r.aread()
        except httpx.HTTPError as e:
            raise unavailable(f"the node's console server: {e}") from None
        except PeerRefused as e:
            raise unavailable(f"the node's console server: {e}") from None
    if r.status_code != 200:
        raise _upstream_error(r.status_code, content)
    return content


async def _refuse(send: Send, err: ApiError) -> None:
    body = _json.encode(msgspec.to_builtins(err.status))
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    await send({"type": "websocket.http.response.start", "status": err.code, "headers": headers})
    await send({"type": "websocket.http.response.body", "body": body})


#: A browser cannot read the answer to a refused upgrade (its WebSocket only says it
#: closed): one that asks (it sends `Origin`) is told in the close instead, with the code
#: 4000 + the HTTP status and the Status's message as the reason (at most 123 bytes).
REFUSED_CLOSE = 4000
CLOSE_REASON_BYTES = 123


async def _close_refused(send: Send, scope: Scope, err: ApiError) -> None:
    reason = err.status.message.encode()[:CLOSE_REASON_BYTES].decode(errors="ignore")
    await send({"type": "websocket.accept", "subprotocol": _subprotocol(scope)})
    await send({"type": "websocket.close", "code": REFUSED_CLOSE + err.code, "reason": reason})


def _from_browser(scope: Scope) -> bool:
    return any(name == b"origin" for name, _ in scope.get("headers") or ())


def _subprotocol(scope: Scope) -> str | None:
    offered = [p.strip() for p in scope.get("subprotocols") or []]
    return SUBPROTOCOL if SUBPROTOCOL in offered else (offered[0] if offered else None)


async def _dial(resolve: Callable[[], Target], tls: ssl.SSLContext | None) -> ClientConnection:
    """The node's stream for the VMI, or ApiError (KubeVirt's refusal, or 503)."""
    t = resolve()
    try:
        upstream = await connect(
            t.url, max_size=None, compression=None, open_timeout=DIAL_SECONDS, ssl=tls
        )
    except InvalidStatus as e:
        raise _upstream_error(e.response.status_code, bytes(e.response.body or b"")) from None
    except (OSError, TimeoutError, InvalidHandshake, ssl.SSLError) as e:
        raise unavailable(f"the node's console server: {e}") from None
    if tls is not None:
        try:
            check_peer(upstream.transport.get_extra_info("peercert"), SERVER_CN)
        except PeerRefused as e:
            await upstream.close()
            raise unavailable(f"the node's console server: {e}") from None
    return upstream


dial = _dial  # a relay of another transport's (node ports: services/api/node_ports.py)


async def relay(
    scope: Scope,
    receive: Receive,
    send: Send,
    resolve: Callable[[], Target],
    tls: ssl.SSLContext | None = None,
    *,
    follow: bool = False,
) -> None:
    """Serve one WebSocket: `resolve()` gives the Target or raises ApiError; `tls` is the
    api's client context for the nodes' console servers. With `follow` (the serial
    console) the client's WebSocket outlives the node's: when the guest's side ends while
    the VMI still runs (a live migration's handover), the stream is dialled again where the
    VMI is now, and the client stays attached."""
    if (await receive())["type"] != "websocket.connect":
        return
    try:
        upstream = await _dial(resolve, tls)
    except ApiError as err:
        await (_close_refused(send, scope, err) if _from_browser(scope) else _refuse(send, err))
        return
    await send({"type": "websocket.accept", "subprotocol": _subprotocol(scope)})
    await _copy(receive, send, upstream, resolve if follow else None, tls)


async def follow_guest(
    resolve: Callable[[], Target],
    tls: ssl.SSLContext | None = None,
    seconds: float = FOLLOW_SECONDS,
) -> ClientConnection | tuple[int, str]:
    """The stream dialled again while the VMI runs but its domain is between nodes (the
    source's server answers 404 → 503 until the fold names the target); else the close
    code and reason for the client: 1000 and KubeVirt's answer once the VMI is not running
    (stopped, failed, deleted), 1011 when it did not come back within `seconds`."""
    deadline = asyncio.get_running_loop().time() + seconds
    while True:
        try:
            return await _dial(resolve, tls)
        except ApiError as err:
            if err.code != 503:
                return 1000, err.status.message
            why = err.status.message
        if asyncio.get_running_loop().time() >= deadline:
            return 1011, f"the guest's console did not come back within {seconds:.0f}s: {why}"
        await asyncio.sleep(FOLLOW_INTERVAL)


async def _copy(
    receive: Receive,
    send: Send,
    upstream: ClientConnection,
    resolve: Callable[[], Target] | None,
    tls: ssl.SSLContext | None,
) -> None:
    current = [upstream]
    attached = asyncio.Event()
    attached.set()

    async def to_node() -> None:
        while True:
            message = await receive()
            if message["type"] == "websocket.disconnect":
                return
            data: bytes = message.get("bytes") or (message.get("text") or "").encode()
            if not data:
                continue
            await attached.wait()  # keystrokes typed during a handover go to the target
            with contextlib.suppress(ConnectionClosed):
                await current[0].send(data)

    async def to_client(node: ClientConnection) -> None:
        with contextlib.suppress(ConnectionClosed):
            async for data in node:
                frame = data if isinstance(data, bytes) else data.encode()
                await send({"type": "websocket.send", "bytes": frame})

    client = asyncio.create_task(to_node())
    code, reason = 1000, ""
    try:
        while True:
            node = current[0]
            pump = asyncio.create_task(to_client(node))
            done, _ = await asyncio.wait({client, pump}, return_when=asyncio.FIRST_COMPLETED)
            if client in done:
                pump.cancel()
                await asyncio.gather(pump, return_exceptions=True)
                await node.close()
                return  # the client left
            await node.close()
            code, reason = node.close_code or 1000, node.close_reason or ""
            if resolve is None or code != 1000:
                break  # not followed, or ended on purpose (another connection took it)
            attached.clear()
            following = await follow_guest(resolve, tls)
            if isinstance(following, tuple):
                code, reason = following
                break
            current[0] = following
            attached.set()
    finally:
        client.cancel()
        await asyncio.gather(client, return_exceptions=True)
        await current[0].close()
    with contextlib.suppress(Exception):  # the client may be gone already
        await send({"type": "websocket.close", "code": code, "reason": reason[:120]})
