"""What virt-api answers of itself under its subresource group: `version` (what `virtctl
version` prints as the server's) and `healthz` (its connection to the cluster's API),
as KubeVirt's `pkg/virt-api/api.go` and `pkg/healthz/healthz.go` serve them."""

from __future__ import annotations

from typing import Any

import msgspec
from litestar import Request, Response, get

from services.api import discovery

BASE = "/apis/subresources.kubevirt.io/v1"
#: the KubeVirt release whose API and behaviour are served
KUBEVIRT_VERSION = "v1.6.0"
# KubeVirt's `version.Info`: its release, built by virtstream
VERSION: dict[str, str] = {
    "gitVersion": f"{KUBEVIRT_VERSION}-virtstream",
    "gitCommit": "",
    "gitTreeState": "clean",
    "buildDate": discovery.VERSION["buildDate"],
    "goVersion": discovery.VERSION["goVersion"],
    "compiler": discovery.VERSION["compiler"],
    "platform": discovery.VERSION["platform"],
}
_json = msgspec.json.Encoder()


@get(f"{BASE}/version", include_in_schema=False)
async def version() -> Response[bytes]:
    return Response(_json.encode(VERSION), media_type="application/json")


@get(f"{BASE}/healthz", include_in_schema=False)
async def healthz(request: Request[Any, Any, Any]) -> Response[bytes]:
    """200 with the API's version while the api answers from a current projection; 500
    with why not (KubeVirt's `connectivity: failed`)."""
    ok = await request.app.state["api"].ready()
    apiserver: dict[str, Any] = (
        {"connectivity": "ok", "version": discovery.VERSION}
        if ok
        else {"connectivity": "failed", "error": "the event log is not reachable or not folded"}
    )
    body = {"apiserver": apiserver, "config-resource-version": ""}
    return Response(
        _json.encode(body), status_code=200 if ok else 500, media_type="application/json"
    )


ROUTES = [version, healthz]
