"""A minimal keep-alive HTTP/1.1 load generator on raw asyncio streams.

httpx spends more CPU per request than the api does to serve it, and on 2 cores the
client then measures itself. This client does only what a benchmark needs: write a
request, read the status line, headers and a Content-Length body."""

from __future__ import annotations

import asyncio
import json
import ssl
from collections.abc import Callable

from client.credentials import ApiCredentials


def tls_context(creds: ApiCredentials | None) -> ssl.SSLContext | None:
    """TLS as the api's credentials say (its CA), or None for a plain-HTTP api."""
    if creds is None or not creds.server.startswith("https"):
        return None
    verify = creds.verify()
    if isinstance(verify, ssl.SSLContext):
        return verify
    ctx = ssl.create_default_context()
    if not verify:
        ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE
    return ctx


async def open_stream(
    host: str, port: int, creds: ApiCredentials | None = None
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter, bytes]:
    """A connection to the api and the header lines every request on it carries (Host and,
    with credentials, the bearer token)."""
    reader, writer = await asyncio.open_connection(host, port, ssl=tls_context(creds))
    lines = f"Host: {host}:{port}\r\n" + "".join(
        f"{k}: {v}\r\n" for k, v in (creds.headers() if creds else {}).items()
    )
    return reader, writer, lines.encode()


class Connection:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, head: bytes):
        self.reader, self.writer, self.head = reader, writer, head

    @classmethod
    async def open(cls, host: str, port: int, creds: ApiCredentials | None = None) -> Connection:
        return cls(*await open_stream(host, port, creds))

    async def request(
        self,
        method: str,
        path: str,
        body: object | None = None,
        content_type: str = "application/json",
        accept: str = "application/json",
    ) -> tuple[int, bytes]:
        payload = json.dumps(body).encode() if body is not None else b""
        rest = (
            f"Accept: {accept}\r\nContent-Type: {content_type}\r\n"
            f"Content-Length: {len(payload)}\r\n\r\n"
        )
        line = f"{method} {path} HTTP/1.1\r\n".encode()
        self.writer.write(line + self.head + rest.encode() + payload)
        status_line = await self.reader.readline()
        status = int(status_line.split(b" ", 2)[1])
        length = 0
        while (line := await self.reader.readline()) not in (b"\r\n", b""):
            name, _, value = line.partition(b":")
            if name.lower() == b"content-length":
                length = int(value)
        return status, await self.reader.readexactly(length) if length else b""

    def close(self) -> None:
        self.writer.close()


async def run(
    host: str,
    port: int,
    n: int,
    concurrency: int,
    make: Callable[[int], tuple[str, str, object | None]],
    expect: int,
) -> None:
    """Send n requests (make(i) → method, path, body) over `concurrency` connections."""

    async def worker(w: int) -> None:
        conn = await Connection.open(host, port)
        try:
            for i in range(w, n, concurrency):
                method, path, body = make(i)
                status, data = await conn.request(method, path, body)
                if status != expect:
                    raise RuntimeError(f"{method} {path}: {status} {data[:300]!r}")
        finally:
            conn.close()

    await asyncio.gather(*(worker(w) for w in range(concurrency)))
