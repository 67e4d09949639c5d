"""The api's HTTP server: uvicorn with the timeouts a public endpoint needs.

uvicorn closes idle keep-alive connections (`timeout_keep_alive`) but has no deadline for
a request's header: a client that sends half a header holds the connection (and a file
descriptor) open forever. `GuardedHttp` closes a connection whose request header has not
arrived within `HEADER_SECONDS` of the connection, or of the previous response; the body
has its own deadline in the app (`app.BODY_SECONDS`)."""

from __future__ import annotations

import asyncio
from typing import Any

import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol

try:
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol as _Base
except ImportError:  # pragma: no cover - httptools is a dependency; h11 is uvicorn's fallback
    _Base = H11Protocol  # type: ignore[assignment,misc]

HEADER_SECONDS = 10.0
KEEP_ALIVE_SECONDS = 5.0


class GuardedHttp(_Base):
    """uvicorn's HTTP protocol plus a request-header deadline."""

    header_seconds = HEADER_SECONDS

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._header_timer: asyncio.TimerHandle | None = None

    def _arm(self) -> None:
        self._disarm()
        self._header_timer = self.loop.call_later(self.header_seconds, self._header_timeout)

    def _disarm(self) -> None:
        if self._header_timer is not None:
            self._header_timer.cancel()
            self._header_timer = None

    def _header_timeout(self) -> None:
        self._header_timer = None
        if not self.transport.is_closing():
            self.transport.close()

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def on_headers_complete(self) -> None:
        self._disarm()
        super().on_headers_complete()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if not self.transport.is_closing():
            self._arm()  # the next request's header has the same deadline


def config(app: Any, host: str, port: int, **kwargs: Any) -> uvicorn.Config:
    """uvicorn's config for the api: the guarded protocol and a short keep-alive."""
    return uvicorn.Config(
        app,
        host=host,
        port=port,
        http=GuardedHttp,
        timeout_keep_alive=int(KEEP_ALIVE_SECONDS),
        **kwargs,
    )
