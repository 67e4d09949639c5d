"""The VMI's stream subresources over HTTP: the serial console, VNC and its screenshot,
port forwarding and the guest agent's answers, relayed to the node's console server
(`services/api/streams.py`), never appended to the log."""

from __future__ import annotations

from typing import Any, Literal

import msgspec
from litestar import Request, Response, asgi, get

from core.errors import (
    bad_request,
)
from services.api import (
    streams,
)
from services.api.http_plumbing import api_of
from services.api.service import ApiService

_json = msgspec.json.Encoder()


# The VMI's stream subresources (KubeVirt's console, vnc and vnc/screenshot): relayed to
# the node's console server (`services/api/streams.py`), never appended to the log.
VMI_SUBRESOURCES = "/apis/subresources.kubevirt.io/v1/namespaces/{ns:str}/virtualmachineinstances"


def stream_route(channel: streams.Channel | Literal["portforward"]) -> Any:
    async def stream(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "websocket":  # KubeVirt's answer to a request without an upgrade
            body = _json.encode(msgspec.to_builtins(bad_request("websocket expected").status))
            await send({"type": "http.response.start", "status": 400,
                        "headers": [(b"content-type", b"application/json")]})  # fmt: skip
            await send({"type": "http.response.body", "body": body})
            return
        params = scope["path_params"]
        api: ApiService = scope["app"].state["api"]
        tls = scope["app"].state.get("console_tls")
        ns, name = params["ns"], params["name"]

        def resolve() -> streams.Target:
            if channel == "portforward":  # one TCP connection to PORT of the guest
                port, protocol = params["port"], params.get("protocol", "tcp")
                return streams.forward_target(api.cluster, ns, name, port, protocol, bool(tls))
            return streams.target(api.cluster, ns, name, channel, bool(tls))

        await streams.relay(
            scope,
            receive,
            send,
            resolve,
            tls,
            follow=channel == "console",  # a VNC session's RFB state cannot move along
        )

    return stream


@get(f"{VMI_SUBRESOURCES}/{{name:str}}/vnc/screenshot", include_in_schema=False)
async def vnc_screenshot(request: Request[Any, Any, Any]) -> Response[bytes]:
    ns, name = request.path_params["ns"], request.path_params["name"]
    tls = request.app.state.get("console_tls")
    where = streams.target(api_of(request).cluster, ns, name, "screenshot", bool(tls))
    png = await streams.get(where, tls)
    return Response(png, media_type="image/png")


def agent_route(channel: str) -> Any:
    @get(
        f"{VMI_SUBRESOURCES}/{{name:str}}/{channel}", include_in_schema=False, name=f"vmi-{channel}"
    )
    async def guest_agent(request: Request[Any, Any, Any]) -> Response[bytes]:
        ns, name = request.path_params["ns"], request.path_params["name"]
        tls = request.app.state.get("console_tls")
        where = streams.agent_target(api_of(request).cluster, ns, name, channel, bool(tls))
        return Response(await streams.get(where, tls), media_type="application/json")

    return guest_agent


STREAM_ROUTES = [
    asgi(
        f"{VMI_SUBRESOURCES}/{{name:str}}/console",
        is_mount=False,
        copy_scope=False,
        name="vmi-console",
    )(stream_route("console")),
    asgi(f"{VMI_SUBRESOURCES}/{{name:str}}/vnc", is_mount=False, copy_scope=False, name="vmi-vnc")(
        stream_route("vnc")
    ),
    *(
        asgi(
            f"{VMI_SUBRESOURCES}/{{name:str}}/portforward/{path}",
            is_mount=False,
            copy_scope=False,
            name=f"vmi-portforward-{i}",
        )(stream_route("portforward"))
        for i, path in enumerate(("{port:int}", "{port:int}/{protocol:str}"))
    ),
    vnc_screenshot,
    *(agent_route(channel) for channel in streams.AGENT_CHANNELS),
]
