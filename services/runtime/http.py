"""A minimal HTTP endpoint for /metrics, /healthz and /readyz.

Services other than the api have no web framework: a 40-line asyncio server keeps their
memory small, and Prometheus needs nothing more. With a `MetricsAccess` that has tokens,
/metrics answers only a request carrying one (401 otherwise), over HTTPS when it has a
certificate (`services/runtime/metrics_access.py`)."""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Callable

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from services.runtime.loop import StartError
from services.runtime.metrics_access import MetricsAccess

MAX_HEADER_LINES = 100
UNAUTHORIZED = (
    b'{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure",'
    b'"message":"Unauthorized","reason":"Unauthorized","code":401}'
)


class HealthServer:
    def __init__(
        self,
        host: str,
        port: int,
        ready: Callable[[], bool],
        access: MetricsAccess | None = None,
    ) -> None:
        self.host, self.port, self.ready = host, port, ready
        self.access = access or MetricsAccess()
        self.server: asyncio.Server | None = None

    async def start(self) -> int:
        try:
            self.server = await asyncio.start_server(
                self._handle, self.host, self.port, ssl=self.access.ssl_context()
            )
        except OSError as e:
            raise StartError(
                f"cannot serve /metrics on {self.host}:{self.port}: {e.strerror or e}"
            ) from None
        self.port = self.server.sockets[0].getsockname()[1]
        return self.port

    async def stop(self) -> None:
        if self.server:
            self.server.close()
            await self.server.wait_closed()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            line = await reader.readline()
            authorization = ""
            for _ in range(MAX_HEADER_LINES):
                header = await reader.readline()
                if header in (b"\r\n", b"\n", b""):
                    break
                name, _, value = header.decode("latin-1").partition(":")
                if name.strip().lower() == "authorization":
                    authorization = value.strip()
            parts = line.decode("latin-1").split()
            path = parts[1].split("?")[0] if len(parts) > 1 else "/"
            if path == "/metrics" and not self.access.allows(authorization):
                status, ctype, body = "401 Unauthorized", "application/json", UNAUTHORIZED
            elif path == "/metrics":
                status, ctype, body = "200 OK", CONTENT_TYPE_LATEST, generate_latest()
            elif path == "/healthz":
                status, ctype, body = "200 OK", "text/plain", b"ok"
            elif path == "/readyz":
                ok = self.ready()
                status = "200 OK" if ok else "503 Service Unavailable"
                ctype, body = "text/plain", b"ok" if ok else b"not ready"
            else:
                status, ctype, body = "404 Not Found", "text/plain", b"not found"
            head = (
                f"HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\n"
                f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
            )
            writer.write(head.encode() + body)
            await writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError, ssl.SSLError):
            pass
        finally:
            writer.close()
