"""A minimal keep-alive HTTP/1.1 load generator on raw asyncio streams.

httpx spends more CPU per request than the api does to serve it, and on 2 cores the
client then measures itself. This client does only what a benchmark needs: write a
request, read the status line, headers and a Content-Length body."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable


class Connection:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, host: str):
        self.reader, self.writer, self.host = reader, writer, host

    @classmethod
    async def open(cls, host: str, port: int) -> Connection:
        reader, writer = await asyncio.open_connection(host, port)
        return cls(reader, writer, f"{host}:{port}")

    async def request(
        self,
        method: str,
        path: str,
        body: object | None = None,
        content_type: str = "application/json",
        accept: str = "application/json",
    ) -> tuple[int, bytes]:
        payload = json.dumps(body).encode() if body is not None else b""
        head = (
            f"{method} {path} HTTP/1.1\r\nHost: {self.host}\r\nAccept: {accept}\r\n"
            f"Content-Type: {content_type}\r\nContent-Length: {len(payload)}\r\n\r\n"
        )
        self.writer.write(head.encode() + payload)
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
