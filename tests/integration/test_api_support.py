"""Runs the api in-process on a real uvicorn (free loopback port) against the test's stream,
with authentication on: `RunningApi.token` is a cluster-admin's bearer token."""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import ssl
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import httpx
import uvicorn

from eventstore.jetstream import JetStreamStore
from kinds.registry import REGISTRY, Registry
from ops.pki import Pki
from readside.runner import ProjectionRunner
from services.api.app import create_app
from services.api.auth import AuthConfig, Authenticator
from services.api.guard import Guard
from services.api.server import Tls
from services.api.server import config as server_config
from services.api.service import ApiService


@dataclass
class RunningApi:
    url: str
    runner: ProjectionRunner
    store: JetStreamStore
    token: str = ""  # a cluster-admin's (system:masters) bearer token
    authenticator: Authenticator | None = None
    pki: Pki | None = None
    # the stream's last sequence once the api created the system namespaces: a test's own
    # events come after it
    base_seq: int = 0

    @property
    def verify(self) -> ssl.SSLContext | bool:
        return ssl.create_default_context(cafile=self.pki.ca) if self.pki else True

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"} if self.token else {}


def admin_auth(token: str, extra: dict[str, Any] | None = None) -> AuthConfig:
    """An auth file's content: `token` for admin (system:masters), plus `extra`'s tokens
    and bindings."""
    doc: dict[str, Any] = {
        "tokens": [{"token": token, "user": "admin", "groups": ["system:masters"]}],
    }
    for key, value in (extra or {}).items():
        doc[key] = [*doc.get(key, []), *value]
    return AuthConfig.parse(doc)


async def create_namespace(api: RunningApi, name: str) -> None:
    """A namespace, created by the cluster admin: objects are created only into one that
    exists (`default` and the other system namespaces exist from the start)."""
    body = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}
    async with httpx.AsyncClient(
        base_url=api.url, headers=api.headers, verify=api.verify, timeout=10
    ) as http:
        r = await http.post("/api/v1/namespaces", json=body)
    assert r.status_code == 201, r.text


@contextlib.asynccontextmanager
async def running_api(
    store: JetStreamStore,
    *,
    read_only: bool = False,
    auth: bool = True,
    extra: dict[str, Any] | None = None,
    pki: Pki | None = None,
    kinds: Registry = REGISTRY,
) -> AsyncIterator[RunningApi]:
    """`extra`: more of the auth file (`tokens`, `roleBindings`, `clusterRoleBindings`);
    `pki`: serve HTTPS with its server certificate (kubectl sends a token over TLS only);
    `kinds`: the kinds it serves."""
    runner = ProjectionRunner(store, kinds=kinds)
    await runner.start()
    service = ApiService(runner, None if read_only else store, kinds)
    if not read_only:
        await service.bootstrap()
    base_seq = await store.stream_last_seq()
    token = secrets.token_hex(16) if auth else ""
    authenticator = Authenticator(config=admin_auth(token, extra)) if auth else None
    guard = Guard.of(authenticator, service.kinds) if authenticator else None
    app = create_app(service, guard)
    tls = Tls(pki.server_cert, pki.server_key, pki.ca) if pki else None
    config = server_config(
        app, host="127.0.0.1", port=0, tls=tls, log_level="warning", lifespan="off"
    )
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve())
    for _ in range(500):
        if server.started:
            break
        await asyncio.sleep(0.01)
    port = server.servers[0].sockets[0].getsockname()[1]
    try:
        scheme = "https" if pki else "http"
        url = f"{scheme}://127.0.0.1:{port}"
        yield RunningApi(url, runner, store, token, authenticator, pki, base_seq)
    finally:
        server.should_exit = True
        server.force_exit = True
        with contextlib.suppress(asyncio.CancelledError, TimeoutError):
            await asyncio.wait_for(task, 5)
        await runner.stop()
