"""The api's HTTP server: uvicorn with the timeouts a public endpoint needs.

uvicorn closes idle keep-alive connections (`timeout_keep_alive`) but has no deadline for
a request's header: a client that sends half a header holds the connection (and a file
descriptor) open forever. `GuardedHttp` closes a connection whose request header has not
arrived within `HEADER_SECONDS` of the connection, or of the previous response; the body
has its own deadline in the app (`http_plumbing.BODY_SECONDS`)."""

from __future__ import annotations

import asyncio
import ssl
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol

try:
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol as _Base
except ImportError:  # pragma: no cover - httptools is a dependency; h11 is uvicorn's fallback
    _Base = H11Protocol  # type: ignore[assignment,misc]

HEADER_SECONDS = 10.0
KEEP_ALIVE_SECONDS = 5.0
SHUTDOWN_SECONDS = 3.0


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
        # uvicorn does not pass the TLS peer to the app: the verified client certificate
        # goes into the scope's `tls` extension for the auth guard (services/api/guard.py)
        peercert = self.transport.get_extra_info("peercert")
        if peercert:
            extensions = self.scope.setdefault("extensions", {})
            extensions["tls"] = {"peercert": peercert}
        super().on_headers_complete()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if not self.transport.is_closing():
            self._arm()  # the next request's header has the same deadline


@dataclass(frozen=True)
class Tls:
    """The api's TLS: its certificate and key, and the CA that signs client certificates
    (a client may present one to authenticate; none is required)."""

    cert: Path
    key: Path
    client_ca: Path | None = None

    def uvicorn_options(self) -> dict[str, Any]:
        out: dict[str, Any] = {"ssl_certfile": str(self.cert), "ssl_keyfile": str(self.key)}
        if self.client_ca is not None:
            out |= {"ssl_ca_certs": str(self.client_ca), "ssl_cert_reqs": ssl.CERT_OPTIONAL}
        return out


def config(
    app: Any, host: str, port: int, *, tls: Tls | None = None, **kwargs: Any
) -> uvicorn.Config:
    """uvicorn's config for the api: the guarded protocol and a short keep-alive."""
    return uvicorn.Config(
        app,
        host=host,
        port=port,
        http=GuardedHttp,
        timeout_keep_alive=int(KEEP_ALIVE_SECONDS),
        # a stop waits this long for open connections (a watch, a client's idle TLS
        # keep-alive) before closing them: without it a connected client held a stop until
        # the supervisor killed the api
        timeout_graceful_shutdown=int(SHUTDOWN_SECONDS),
        **(tls.uvicorn_options() if tls else {}),
        **kwargs,
    )
