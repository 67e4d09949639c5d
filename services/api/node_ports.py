"""NodePort Services, served: a TCP listener on the api's host for every node port a
Service holds, each connection relayed to the target port of one guest its selector
matches (a ready one, in turn), the way `portforward` reaches a guest: over a WebSocket
to the console server of the guest's node (mutual TLS), which dials the guest's address on
the pod network (or its QEMU's user-mode network).

kube-proxy answers a node port on every node; here every node is on this host, so the one
listener stands for them all. It serves what the guest serves (its own ssh asks for its own
keys): no credentials are asked here, as a NodePort on a cluster asks none. The listeners
follow the Services through a watch of the api's projection (no polling), and each holds at
most `MAX_CONNECTIONS` at once. In test mode (the libvirt test driver) the guests have no
network: a connection is closed at once."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import itertools
import ssl
from dataclasses import dataclass, field
from typing import Any

import structlog
from websockets.asyncio.client import ClientConnection
from websockets.exceptions import ConnectionClosed

from core.errors import ApiError
from projections import services
from readside.runner import ProjectionRunner
from readside.watch import Selector, Watcher
from services.api import streams

log = structlog.get_logger()
JSON = dict[str, Any]
MAX_CONNECTIONS = 64  # per node port
CHUNK = 64 * 1024


@dataclass
class _Listener:
    service: str  # "ns/name"
    server: asyncio.Server
    open: set[asyncio.Task[None]] = field(default_factory=set)


class NodePorts:
    """The node ports' listeners, kept as the Services say."""

    def __init__(
        self, runner: ProjectionRunner, host: str, tls: ssl.SSLContext | None = None
    ) -> None:
        self.runner = runner
        self.host = host
        self.tls = tls
        self.listeners: dict[int, _Listener] = {}
        self._turn = itertools.count()
        self._task: asyncio.Task[None] | None = None
        self._watcher: Watcher | None = None

    async def start(self) -> None:
        self._task = asyncio.create_task(self._follow())

    async def stop(self) -> None:
        if self._task is not None:  # first: a closed watch is watched again
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        if self._watcher is not None:
            self.runner.unwatch(self._watcher)
        for port in list(self.listeners):
            await self._close(port)

    # ------------------------------------------------------------- listeners
    async def _follow(self) -> None:
        """Every Service's node ports, then each change (a watcher that fell behind is
        closed by the runner: watch again, from the current objects)."""
        while True:
            self._watcher = self.runner.watch(Selector(services.KIND), None)
            async for event in self._watcher:
                obj = event["object"]
                meta = obj.get("metadata") or {}
                k = f"{meta.get('namespace')}/{meta.get('name')}"
                ports = (
                    set()
                    if event["type"] == "DELETED"
                    else {p["nodePort"] for p in services.node_ports(obj.get("spec") or {})}
                )
                await self._reconcile(k, ports)
            for port in list(self.listeners):  # watch again: start from what exists
                await self._close(port)

    async def _reconcile(self, k: str, ports: set[int]) -> None:
        for port, listener in list(self.listeners.items()):
            if listener.service == k and port not in ports:
                await self._close(port)
        for port in ports - set(self.listeners):
            try:
                server = await asyncio.start_server(
                    functools.partial(self._accept, port), self.host, port
                )
            except OSError as e:  # in use on this host by something else
                log.warning("node port not served", service=k, port=port, reason=str(e))
                continue
            self.listeners[port] = _Listener(k, server)
            log.info("node port served", service=k, port=port)

    async def _close(self, port: int) -> None:
        listener = self.listeners.pop(port, None)
        if listener is None:
            return
        listener.server.close()
        for task in list(listener.open):
            task.cancel()
        await asyncio.gather(*listener.open, return_exceptions=True)

    # ----------------------------------------------------------- connections
    async def _accept(
        self, port: int, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        listener = self.listeners.get(port)
        if listener is None or len(listener.open) >= MAX_CONNECTIONS:
            writer.close()
            return
        task = asyncio.current_task()
        assert task is not None
        listener.open.add(task)
        try:
            upstream = await self._dial(listener.service, port)
            if upstream is not None:
                await _splice(upstream, reader, writer)
        finally:
            listener.open.discard(task)
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    def target(self, service: str, node_port: int) -> streams.Target | None:
        """Where a connection to `node_port` goes: the target port of a ready guest the
        Service selects (each in turn), through its node's console server."""
        cluster = self.runner.cluster
        svc = services.services(cluster).get(service)
        if svc is None:
            return None
        spec = svc.spec
        port = next((p for p in services.node_ports(spec) if p["nodePort"] == node_port), None)
        if port is None or (port.get("protocol") or "TCP") != "TCP":
            return None
        target = services.target_port(port)
        ns = svc.namespace
        ready = [v for v in services.selected(cluster, ns, spec.get("selector") or {})
                 if services.ready(v)]  # fmt: skip
        if not ready or not isinstance(target, int):
            return None
        vmi = ready[next(self._turn) % len(ready)]
        try:
            return streams.forward_target(cluster, ns, vmi.name, target, "tcp", bool(self.tls))
        except ApiError:
            return None

    async def _dial(self, service: str, node_port: int) -> ClientConnection | None:
        where = self.target(service, node_port)
        if where is None:
            log.info("node port: no endpoint", service=service, port=node_port)
            return None
        try:
            return await streams.dial(lambda: where, self.tls)
        except ApiError as e:
            log.info("node port: the guest is not reachable", service=service,
                     port=node_port, reason=e.status.message)  # fmt: skip
            return None


async def _splice(
    ws: ClientConnection, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
) -> None:
    """Copy until either side ends."""

    async def up() -> None:
        while data := await reader.read(CHUNK):
            await ws.send(data)

    async def down() -> None:
        with contextlib.suppress(ConnectionClosed):
            async for message in ws:
                writer.write(message if isinstance(message, bytes) else message.encode())
                await writer.drain()

    tasks = [asyncio.create_task(up()), asyncio.create_task(down())]
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await ws.close()
