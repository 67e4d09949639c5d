"""Prometheus' query API behind the api's own authentication: `/prometheus/api/v1/...`.

`virtstream up --metrics` runs Prometheus on loopback and gives the api its URL
(`--prometheus-url`); the web console's charts then talk to the api only, with the token
they already hold, and Prometheus stays unreachable from a browser. Only reads are
relayed (`query`, `query_range`, `status/buildinfo`), as GET with the query string as
given. RBAC reads them as the non-resource paths `/prometheus/api/v1/*`, which KubeVirt's
view role (bound cluster-wide) may get (`services/api/rbac.py`). Without a Prometheus the
paths answer 404 with a Status that says how to get one. Prometheus answers its own user
only (`up` makes one, ops/prometheus_auth.py): the api relays as that user, with the
password read from its file at start."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
from litestar import Request, Response, get

from core.errors import unavailable, unknown_resource

PREFIX = "/prometheus/api/v1"
PATHS = ("query", "query_range", "status/buildinfo")
STATE_KEY = "prometheus"
QUERY_SECONDS = 15.0


@dataclass(frozen=True)
class Upstream:
    """The Prometheus relayed to, and the basic-auth user the api asks it as."""

    url: str
    user: str = ""
    password: str = ""

    @classmethod
    def of(cls, url: str, user: str = "", password_file: Path | None = None) -> Upstream | None:
        if not url:
            return None
        password = password_file.read_text().strip() if password_file else ""
        return cls(url, user, password)

    def auth(self) -> tuple[str, str] | None:
        return (self.user, self.password) if self.user else None


def _not_running() -> Exception:
    err = unknown_resource()
    err.status.message = "no Prometheus is configured: `virtstream up --metrics` runs one"
    return err


async def _relay(request: Request[Any, Any, Any], path: str) -> Response[bytes]:
    upstream: Upstream | None = request.app.state.get(STATE_KEY)
    if upstream is None:
        raise _not_running()
    base = upstream.url
    url = f"{base.rstrip('/')}/api/v1/{path}"
    query = request.scope.get("query_string", b"").decode("latin-1")
    async with httpx.AsyncClient(timeout=QUERY_SECONDS, auth=upstream.auth()) as http:
        try:
            r = await http.get(f"{url}?{query}" if query else url)
        except httpx.HTTPError as e:
            raise unavailable(f"Prometheus at {base}: {e}") from None
    media = r.headers.get("content-type", "application/json")
    return Response(r.content, status_code=r.status_code, media_type=media)


def _route(path: str) -> Any:
    async def relay(request: Request[Any, Any, Any]) -> Response[bytes]:
        return await _relay(request, path)

    return get(f"{PREFIX}/{path}", include_in_schema=False, name=f"prometheus:{path}")(relay)


ROUTES = [_route(p) for p in PATHS]
