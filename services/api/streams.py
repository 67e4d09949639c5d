"""The VMI's stream subresources: `console` and `vnc` (WebSockets) and `vnc/screenshot`.

virt-api's part as KubeVirt has it: check the VMI (`target`, pure, KubeVirt's answers),
dial the console server of the node's handler (its address and `console_port` from
NodeJoined), and only once that answered accept the client's WebSocket (subprotocol
`plain.kubevirt.io`) and copy binary frames both ways. A refusal before the upgrade is a
plain HTTP answer with a `Status` body, as the API server gives (`virtctl` prints it)."""

from __future__ import annotations

import asyncio
import contextlib
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

SUBPROTOCOL = "plain.kubevirt.io"
VMI_RESOURCE = Resource("virtualmachineinstances", "kubevirt.io", "VirtualMachineInstance")
Channel = Literal["console", "vnc", "screenshot"]
_json = msgspec.json.Encoder()
# plain ASGI (the websocket.http.response extension is outside Litestar's typed events)
Scope = dict[str, Any]
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]
DIAL_SECONDS = 10.0


@dataclass(frozen=True)
class Target:
    """The node console server's URL for one VMI's channel."""

    url: str


def target(cluster: Cluster, ns: str, name: str, channel: Channel) -> Target:
    """Where a VMI's console, VNC or screen is, or KubeVirt's refusal (pure)."""
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
    scheme = "http" if channel == "screenshot" else "ws"
    return Target(f"{scheme}://{node.address or '127.0.0.1'}:{node.console_port}{path}")


def _upstream_error(code: int, body: bytes) -> ApiError:
    message = body.decode(errors="replace").strip() or "the node's console server refused"
    if code == 404:  # the domain left the node (a migration's handover): try again
        return unavailable(message)
    if code == 400:
        return bad_request(message)
    return internal(message)


async def screenshot(t: Target) -> bytes:
    async with httpx.AsyncClient(timeout=30) as http:
        try:
            r = await http.get(t.url)
        except httpx.HTTPError as e:
            raise unavailable(f"the node's console server: {e}") from None
    if r.status_code != 200:
        raise _upstream_error(r.status_code, r.content)
    return r.content


async def _refuse(send: Send, err: ApiError) -> None:
    body = _json.encode(msgspec.to_builtins(err.status))
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    await send({"type": "websocket.http.response.start", "status": err.code, "headers": headers})
    await send({"type": "websocket.http.response.body", "body": body})


def _subprotocol(scope: Scope) -> str | None:
    offered = [p.strip() for p in scope.get("subprotocols") or []]
    return SUBPROTOCOL if SUBPROTOCOL in offered else (offered[0] if offered else None)


async def relay(scope: Scope, receive: Receive, send: Send, resolve: Callable[[], Target]) -> None:
    """Serve one WebSocket: `resolve()` gives the Target or raises ApiError."""
    if (await receive())["type"] != "websocket.connect":
        return
    try:
        t = resolve()
        upstream = await connect(t.url, max_size=None, compression=None, open_timeout=DIAL_SECONDS)
    except ApiError as err:
        await _refuse(send, err)
        return
    except InvalidStatus as e:
        await _refuse(send, _upstream_error(e.response.status_code, bytes(e.response.body or b"")))
        return
    except (OSError, TimeoutError, InvalidHandshake) as e:
        await _refuse(send, unavailable(f"the node's console server: {e}"))
        return
    await send({"type": "websocket.accept", "subprotocol": _subprotocol(scope)})
    await _copy(receive, send, upstream)


async def _copy(receive: Receive, send: Send, upstream: ClientConnection) -> None:
    async def to_node() -> None:
        while True:
            message = await receive()
            if message["type"] == "websocket.disconnect":
                return
            data: bytes = message.get("bytes") or (message.get("text") or "").encode()
            if data:
                await upstream.send(data)

    async def to_client() -> None:
        with contextlib.suppress(ConnectionClosed):
            async for data in upstream:
                frame = data if isinstance(data, bytes) else data.encode()
                await send({"type": "websocket.send", "bytes": frame})

    tasks = [asyncio.create_task(to_node()), asyncio.create_task(to_client())]
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await upstream.close()
        code, reason = upstream.close_code or 1000, upstream.close_reason or ""
        with contextlib.suppress(Exception):  # the client may be gone already
            await send({"type": "websocket.close", "code": code, "reason": reason})
