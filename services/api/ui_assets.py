"""The web console's files at `/ui/`: static assets shipped in the package
(`services/api/ui/`), so an installed virtstream serves them and nothing is fetched from
elsewhere when it runs.

A path naming a file serves it; any other path without a file extension (the console's
own pages: `/ui/vms/<ns>/<name>`, `/ui/nodes/<name>`) serves `index.html`, whose
modules route in the browser. The files are public (the page holds no data: it asks the
api for everything with the token it is given), read once into memory, answered with an
ETag and `Cache-Control: no-cache` (revalidated, so a new install is seen at once; the
vendored libraries for an hour), and a
Content-Security-Policy that lets the page load only its own scripts and talk only to
this api. `index.html` says whether the api relays a Prometheus (`<meta
name="virtstream-metrics">`, as a console server hands its page its settings), so the page
offers the Metrics charts without asking a Prometheus that is not there."""

from __future__ import annotations

import hashlib
import mimetypes
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from litestar import Request, Response, get
from litestar.params import FromPath

from core.errors import unknown_resource
from services.api import prometheus_proxy

ROOT = Path(__file__).resolve().parent / "ui"
PREFIX = "/ui"
TYPES = {  # Litestar adds `; charset=utf-8` to text types
    ".js": "text/javascript",
    ".mjs": "text/javascript",
    ".css": "text/css",
    ".html": "text/html",
    ".svg": "image/svg+xml",
    ".txt": "text/plain",
}
# xterm.js and noVNC set element styles from script; images are screenshots (blob:)
CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; "
    "img-src 'self' blob: data:; connect-src 'self'; font-src 'self'; "
    "frame-ancestors 'none'; base-uri 'none'; form-action 'self'"
)
VENDOR_MAX_AGE = 3600
INDEX = "index.html"
METRICS_META = b'<meta name="virtstream-metrics" content="">'
METRICS_ON = b'<meta name="virtstream-metrics" content="/prometheus/api/v1">'
HEADERS = {
    "Cache-Control": "no-cache",
    "Content-Security-Policy": CSP,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
}


@dataclass(frozen=True)
class Asset:
    body: bytes
    media_type: str
    etag: str


def _load(path: Path) -> Asset:
    body = path.read_bytes()
    media = TYPES.get(path.suffix) or mimetypes.guess_type(path.name)[0]
    if media is None and not path.suffix:  # LICENSE, AUTHORS
        media = "text/plain"
    return Asset(body, media or "application/octet-stream", f'"{hashlib.sha1(body).hexdigest()}"')


class Assets:
    """The files under `root`, read on first use and kept."""

    def __init__(self, root: Path = ROOT) -> None:
        self.root = root
        self._cache: dict[str, Asset] = {}

    def find(self, relative: str, metrics: bool = False) -> Asset | None:
        """The file at `relative` (a URL path below /ui/); else the console's page for a
        path without an extension (`vms/default/x`); else None. `metrics`: the page says
        that the api relays a Prometheus."""
        parts = PurePosixPath(relative.lstrip("/")).parts
        if any(p in ("..", ".") or p.startswith(".") for p in parts):
            return None
        name = "/".join(parts)
        if name == INDEX or not parts or "." not in parts[-1]:
            if name and name != INDEX and (found := self._get(name)) is not None:
                return found  # a file without an extension (LICENSE)
            return self.page(metrics)
        return self._get(name)

    def page(self, metrics: bool) -> Asset | None:
        """index.html, with the Metrics page's address when there is one."""
        page = self._get(INDEX)
        if page is None or not metrics:
            return page
        key = f"{INDEX}+metrics"
        if key not in self._cache:
            body = page.body.replace(METRICS_META, METRICS_ON)
            self._cache[key] = Asset(body, page.media_type, f'"{hashlib.sha1(body).hexdigest()}"')
        return self._cache[key]

    def _get(self, name: str) -> Asset | None:
        if name not in self._cache:
            path = self.root / name
            if not path.is_file():
                return None
            self._cache[name] = _load(path)
        return self._cache[name]


ASSETS = Assets()


def _metrics(request: Request[Any, Any, Any]) -> bool:
    return request.app.state.get(prometheus_proxy.STATE_KEY) is not None


def _answer(request: Request[Any, Any, Any], asset: Asset, vendored: bool) -> Response[bytes]:
    headers = {**HEADERS, "ETag": asset.etag}
    if vendored:  # the libraries change only with an install: not revalidated on each load
        headers["Cache-Control"] = f"max-age={VENDOR_MAX_AGE}"
    if request.headers.get("if-none-match") == asset.etag:
        return Response(b"", status_code=304, headers=headers)
    return Response(asset.body, media_type=asset.media_type, headers=headers)


@get(PREFIX, include_in_schema=False)
async def ui_index(request: Request[Any, Any, Any]) -> Response[bytes]:
    """`/ui` and `/ui/` (the router strips a trailing slash)."""
    asset = ASSETS.find("", _metrics(request))
    if asset is None:
        raise unknown_resource()
    return _answer(request, asset, False)


@get(f"{PREFIX}/{{path:path}}", include_in_schema=False)
async def ui_file(request: Request[Any, Any, Any], path: FromPath[str]) -> Response[bytes]:
    asset = ASSETS.find(path, _metrics(request))
    if asset is None:
        raise unknown_resource()
    return _answer(request, asset, path.lstrip("/").startswith("vendor/"))


ROUTES = [ui_index, ui_file]
