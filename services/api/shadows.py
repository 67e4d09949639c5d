"""The shadows' latest divergences, over HTTPS, for the web console:

    GET /apis/debug.virtstream.io/v1alpha1/shadows           (kind `ShadowList`)
    GET /apis/debug.virtstream.io/v1alpha1/shadows/{name}    (kind `Shadow`)

What each shadow (services/shadow/, `up --shadow`) wrote last to the bucket
(eventstore/shadows.py): the decider it runs, what it compared, and its latest
divergences with both decisions. RBAC: the resource `shadows` of this group, which no
built-in role but cluster-admin grants (a divergence names objects of every namespace)."""

from __future__ import annotations

from typing import Any

import msgspec
from litestar import Request, Response, get

from core.errors import Resource, not_found
from eventstore import shadows
from eventstore.port import EventLog
from services.api.history import API_VERSION, GROUP, PREFIX

RESOURCE = Resource("shadows", GROUP, "Shadow")
_json = msgspec.json.Encoder()


async def _document(store: EventLog, name: str) -> dict[str, Any] | None:
    found = await shadows.latest(store, name)
    if not found:
        return None
    return {
        "apiVersion": API_VERSION,
        "kind": "Shadow",
        "metadata": {"name": name},
        "status": msgspec.json.decode(found),
    }


def _respond(doc: dict[str, Any]) -> Response[bytes]:
    return Response(_json.encode(doc), media_type="application/json")


@get(f"{PREFIX}/shadows", include_in_schema=False)
async def shadow_list(request: Request[Any, Any, Any]) -> Response[bytes]:
    store = request.app.state["api"].runner.store
    items = [doc for n in await shadows.names(store) if (doc := await _document(store, n))]
    return _respond({"apiVersion": API_VERSION, "kind": "ShadowList", "items": items})


@get(f"{PREFIX}/shadows/{{name:str}}", include_in_schema=False)
async def shadow(request: Request[Any, Any, Any]) -> Response[bytes]:
    name = request.path_params["name"]
    doc = await _document(request.app.state["api"].runner.store, name)
    if doc is None:
        raise not_found(RESOURCE, name)
    return _respond(doc)


ROUTES = [shadow_list, shadow]
