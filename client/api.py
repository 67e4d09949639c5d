"""Python client for scripts: `Client` (sync) and `AsyncClient` (asyncio), over httpx.

Objects come back typed (events.objects: VirtualMachine, VirtualMachineInstance, ...) via
events.manifest, or as the server's JSON with `raw=True`. Errors raise `ApiError` carrying
the server's Kubernetes `Status` (message, reason, code)."""

from __future__ import annotations

import builtins
import json
import re
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any, NamedTuple, TypedDict

import httpx
import msgspec
from typing_extensions import Unpack

from client import apply as client_apply
from client.credentials import ApiCredentials, for_api
from core.errors import ApiError
from events.manifest import api_group, dump, load
from events.objects import Status
from kinds.registry import REGISTRY, Registry
from kinds.spec import KindSpec

DEFAULT_SERVER = "https://127.0.0.1:8080"
JSON = dict[str, Any]


class WriteOptions(TypedDict, total=False):
    raw: bool  # the server's JSON instead of a typed object
    field_validation: str | None  # Strict, Warn (the server's default) or Ignore


class ApplyOptions(WriteOptions, total=False):
    server_side: bool  # server-side apply instead of kubectl's client-side three-way merge
    field_manager: str | None  # who owns what is applied (server-side: "virtstream")
    force: bool  # server-side: take the fields other managers own


class ReadOptions(TypedDict, total=False):
    raw: bool
    at: str | None  # a stream sequence or a time (`5m`, `@epoch`, ISO): as it was then


class ListOptions(ReadOptions, total=False):
    all_namespaces: bool
    label_selector: str | None
    field_selector: str | None


class WatchOptions(TypedDict, total=False):
    all_namespaces: bool
    resource_version: str | int | None
    label_selector: str | None
    field_selector: str | None
    timeout_seconds: float | None


class Req(NamedTuple):
    """One call, built once for both clients: they differ only in how they send it."""

    method: str
    path: str
    params: dict[str, str]
    body: Any = None
    content_type: str = ""  # a PATCH's: merge patch, apply patch


CLIENT_SIDE_MANAGER = "virtstream-client-side-apply"  # kubectl's is kubectl-client-side-apply
SERVER_SIDE_MANAGER = "virtstream"  # kubectl's is kubectl
AT_TIME_HEADER = "virtstream-at-time"  # the time a time-travel answer shows


def resource(kind: str, kinds: Registry = REGISTRY) -> KindSpec:
    """A kind by any name a user may type (`vms`, `vmi`, `VirtualMachine`, ...)."""
    return kinds.resource(kind)


def typed(obj: JSON, kinds: Registry = REGISTRY) -> Any:
    """The typed object for a server document (unknown kinds stay dicts)."""
    t = kinds.types.get((api_group(str(obj.get("apiVersion", ""))), str(obj.get("kind", ""))))
    return load(obj, t) if t is not None else obj


def as_dict(obj: Any) -> JSON:
    return obj if isinstance(obj, dict) else dump(obj)


def _raise_for(resp: httpx.Response) -> None:
    if resp.status_code < 400:
        return
    try:
        status = msgspec.convert(resp.json(), Status)
    except Exception:
        status = Status(message=resp.text or resp.reason_phrase, code=resp.status_code)
    if not status.code:
        status.code = resp.status_code
    raise ApiError(status)


# RFC 7234 warn-value as the API server writes it: `299 - "text"` (text with \" escapes)
_WARNING = re.compile(r'\d{3} \S+ "((?:[^"\\]|\\.)*)"')


def warnings_of(resp: httpx.Response) -> list[str]:
    """The texts of the response's `Warning` headers (unknown fields, deprecations)."""
    return [
        re.sub(r"\\(.)", r"\1", m.group(1))
        for value in resp.headers.get_list("warning")
        for m in _WARNING.finditer(value)
    ]


def _json(resp: httpx.Response) -> Any:
    _raise_for(resp)
    return resp.json() if resp.content else None


def _warning_hook(on_warning: Callable[[str], None]) -> Callable[[httpx.Response], None]:
    def hook(resp: httpx.Response) -> None:
        for text in warnings_of(resp):
            on_warning(text)

    return hook


def _async_warning_hook(on_warning: Callable[[str], None]) -> Any:
    sync = _warning_hook(on_warning)

    async def hook(resp: httpx.Response) -> None:
        sync(resp)

    return hook


class Seen:
    """Read-your-writes across api replicas: the highest `Virtstream-Sequence` any answer
    carried, sent back as `Virtstream-Min-Sequence` so that no replica answers from an
    older view than one this client has seen."""

    def __init__(self) -> None:
        self.sequence = 0

    def ask(self, request: httpx.Request) -> None:
        if self.sequence:
            request.headers["Virtstream-Min-Sequence"] = str(self.sequence)

    def record(self, response: httpx.Response) -> None:
        text = response.headers.get("virtstream-sequence", "")
        if text.isdigit():
            self.sequence = max(self.sequence, int(text))

    async def ask_async(self, request: httpx.Request) -> None:
        self.ask(request)

    async def record_async(self, response: httpx.Response) -> None:
        self.record(response)


class _Requests:
    """Builds (method, path, params, body) for every call; the clients only send them."""

    def __init__(self, namespace: str, kinds: Registry = REGISTRY) -> None:
        self.namespace = namespace
        self.kinds = kinds

    def ns(self, namespace: str | None) -> str:
        return namespace or self.namespace

    def resource(self, kind: str) -> KindSpec:
        return self.kinds.resource(kind)

    def collection(self, kind: str, namespace: str | None, all_namespaces: bool) -> str:
        return self.resource(kind).collection_path(None if all_namespaces else self.ns(namespace))

    def item(self, kind: str, name: str, namespace: str | None) -> str:
        return f"{self.resource(kind).collection_path(self.ns(namespace))}/{name}"

    def sub(self, kind: str, name: str, action: str, namespace: str | None = None) -> str:
        return self.resource(kind).subresource_path(name, action, self.ns(namespace))

    def vm_sub(self, name: str, action: str, namespace: str | None) -> str:
        return self.sub("VirtualMachine", name, action, namespace)

    def vmi_sub(self, name: str, action: str, namespace: str | None) -> str:
        return self.sub("VirtualMachineInstance", name, action, namespace)

    def node_sub(self, name: str, action: str) -> str:
        return self.sub("Node", name, action)

    def list_params(
        self,
        label_selector: str | None,
        field_selector: str | None,
        watch: bool = False,
        resource_version: str | int | None = None,
        timeout_seconds: float | None = None,
    ) -> dict[str, str]:
        params: dict[str, str] = {}
        if label_selector:
            params["labelSelector"] = label_selector
        if field_selector:
            params["fieldSelector"] = field_selector
        if watch:
            params["watch"] = "true"
        if resource_version is not None:
            params["resourceVersion"] = str(resource_version)
        if timeout_seconds:
            params["timeoutSeconds"] = str(timeout_seconds)
        return params

    @staticmethod
    def write_params(field_validation: str | None) -> dict[str, str]:
        return {"fieldValidation": field_validation} if field_validation else {}

    def object_target(self, obj: JSON, namespace: str | None) -> tuple[str, str, str]:
        """(collection path, item path, name) for a document."""
        info = self.resource(str(obj.get("kind", "")))
        meta = obj.get("metadata") or {}
        ns = meta.get("namespace") or self.ns(namespace)
        coll = info.collection_path(ns if info.namespaced else None)
        return coll, f"{coll}/{meta.get('name', '')}", str(meta.get("name", ""))

    def create(
        self, doc: JSON, namespace: str | None, opts: WriteOptions, manager: str = ""
    ) -> Req:
        coll, _, _ = self.object_target(doc, namespace)
        params = self.write_params(opts.get("field_validation"))
        if manager:
            params["fieldManager"] = manager
        return Req("POST", coll, params, doc)

    def update(self, doc: JSON, namespace: str | None, opts: WriteOptions) -> Req:
        _, item, _ = self.object_target(doc, namespace)
        return Req("PUT", item, self.write_params(opts.get("field_validation")), doc)

    def applied(self, doc: JSON, namespace: str | None) -> JSON:
        """The configuration as client-side apply sends it (namespace, last-applied)."""
        info = self.resource(str(doc.get("kind", "")))
        return client_apply.modified(doc, self.ns(namespace) if info.namespaced else None)

    def merge_patch(self, item: str, patch: JSON, opts: ApplyOptions) -> Req:
        params = self.write_params(opts.get("field_validation"))
        params["fieldManager"] = opts.get("field_manager") or CLIENT_SIDE_MANAGER
        return Req("PATCH", item, params, patch, "application/merge-patch+json")

    def server_side_apply(self, doc: JSON, namespace: str | None, opts: ApplyOptions) -> Req:
        _, item, _ = self.object_target(doc, namespace)
        params = self.write_params(opts.get("field_validation"))
        params["fieldManager"] = opts.get("field_manager") or SERVER_SIDE_MANAGER
        if opts.get("force"):
            params["force"] = "true"
        return Req("PATCH", item, params, doc, "application/apply-patch+yaml")

    def get(self, kind: str, name: str, namespace: str | None, opts: ReadOptions) -> Req:
        at = opts.get("at")
        return Req("GET", self.item(kind, name, namespace), {"at": at} if at else {})

    def list(self, kind: str, namespace: str | None, opts: ListOptions) -> Req:
        path = self.collection(kind, namespace, opts.get("all_namespaces", False))
        params = self.list_params(opts.get("label_selector"), opts.get("field_selector"))
        if at := opts.get("at"):
            params["at"] = at
        return Req("GET", path, params)

    def delete(self, kind: str, name: str, namespace: str | None, grace: int | None) -> Req:
        params = {} if grace is None else {"gracePeriodSeconds": str(grace)}
        return Req("DELETE", self.item(kind, name, namespace), params)

    def watch(self, kind: str, namespace: str | None, opts: WatchOptions) -> Req:
        path = self.collection(kind, namespace, opts.get("all_namespaces", False))
        params = self.list_params(
            opts.get("label_selector"),
            opts.get("field_selector"),
            True,
            opts.get("resource_version"),
            opts.get("timeout_seconds"),
        )
        return Req("GET", path, params)


def _apply_patch(
    r: _Requests, config: JSON, item: str, current: JSON, on_warning: Callable[[str], None] | None
) -> JSON:
    """kubectl's three-way merge patch of a live object (empty: nothing to send)."""
    last = client_apply.original(current)
    if last is None and on_warning is not None:
        meta = current.get("metadata") or {}
        plural = r.resource(str(config.get("kind", ""))).plural
        on_warning(client_apply.MISSING.format(resource=f"{plural}/{meta.get('name', '')}"))
    return client_apply.three_way(last, config, current)


def _body(req: Req) -> dict[str, Any]:
    """httpx's arguments for a request's body."""
    if not req.content_type:
        return {"json": req.body}
    return {"content": msgspec.json.encode(req.body), "headers": {"Content-Type": req.content_type}}


def _events(lines: Iterator[str]) -> Iterator[tuple[str, JSON]]:
    for line in lines:
        if line.strip():
            ev = json.loads(line)
            yield ev["type"], ev["object"]


class Client:
    """Synchronous client: `Client(server="https://127.0.0.1:8080")`. `on_warning` gets the
    text of each `Warning` the server answers with (unknown fields, for one). Credentials
    (token, CA) are found as `client/credentials.py` says, or given as `credentials`."""

    def __init__(
        self,
        server: str = DEFAULT_SERVER,
        *,
        namespace: str = "default",
        timeout: float = 30.0,
        kinds: Registry = REGISTRY,
        on_warning: Callable[[str], None] | None = None,
        credentials: ApiCredentials | None = None,
    ) -> None:
        self.seen = Seen()
        self.on_warning = on_warning
        hooks: dict[str, list[Callable[..., Any]]] = {
            "request": [self.seen.ask],
            "response": [self.seen.record, *([_warning_hook(on_warning)] if on_warning else [])],
        }
        creds = credentials or for_api(server)
        self.http = httpx.Client(**creds.httpx_options(), timeout=timeout, event_hooks=hooks)
        self.r = _Requests(namespace, kinds)

    def close(self) -> None:
        self.http.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def _out(self, body: Any, opts: WriteOptions | ReadOptions) -> Any:
        raw = opts.get("raw", False)
        return body if raw or not isinstance(body, dict) else typed(body, self.r.kinds)

    def _send(self, req: Req) -> Any:
        return _json(self.http.request(req.method, req.path, params=req.params, **_body(req)))

    # ------------------------------------------------------------- objects
    def create(self, obj: Any, namespace: str | None = None, **opts: Unpack[WriteOptions]) -> Any:
        return self._out(self._send(self.r.create(as_dict(obj), namespace, opts)), opts)

    def update(self, obj: Any, namespace: str | None = None, **opts: Unpack[WriteOptions]) -> Any:
        return self._out(self._send(self.r.update(as_dict(obj), namespace, opts)), opts)

    def apply(self, obj: Any, namespace: str | None = None, **opts: Unpack[ApplyOptions]) -> Any:
        """`kubectl apply`: create the object with the last-applied annotation, or send
        the three-way merge patch (`client/apply.py`; nothing when it is empty, so an
        unchanged object keeps its resourceVersion). `server_side=True`: server-side apply
        (`field_manager`, `force`)."""
        doc = as_dict(obj)
        if opts.get("server_side"):
            return self._out(self._send(self.r.server_side_apply(doc, namespace, opts)), opts)
        config = self.r.applied(doc, namespace)
        item = self.r.object_target(config, namespace)[1]
        got = self.http.get(item)
        if got.status_code == 404:
            req = self.r.create(config, namespace, opts, CLIENT_SIDE_MANAGER)
            return self._out(self._send(req), opts)
        current = _json(got)
        patch = _apply_patch(self.r, config, item, current, self.on_warning)
        if not patch:
            return self._out(current, opts)
        return self._out(self._send(self.r.merge_patch(item, patch, opts)), opts)

    def get(
        self, kind: str, name: str, namespace: str | None = None, **opts: Unpack[ReadOptions]
    ) -> Any:
        return self._out(self._send(self.r.get(kind, name, namespace, opts)), opts)

    def upload_token(self, claim: str, namespace: str | None = None) -> str:
        """CDI's UploadTokenRequest for `claim`: the token its upload proxy takes."""
        ns = self.r.ns(namespace)
        body = {
            "apiVersion": "upload.cdi.kubevirt.io/v1beta1",
            "kind": "UploadTokenRequest",
            "metadata": {"name": "token-for-virtctl", "namespace": ns},
            "spec": {"pvcName": claim},
        }
        path = f"/apis/upload.cdi.kubevirt.io/v1beta1/namespaces/{ns}/uploadtokenrequests"
        answer = _json(self.http.post(path, json=body))
        return str(((answer or {}).get("status") or {}).get("token") or "")

    def list(
        self, kind: str, namespace: str | None = None, **opts: Unpack[ListOptions]
    ) -> list[Any]:
        body = self._send(self.r.list(kind, namespace, opts))
        return [self._out(i, opts) for i in body["items"]]

    def read_at(
        self, kind: str, name: str | None, namespace: str | None, **opts: Unpack[ListOptions]
    ) -> tuple[builtins.list[JSON], float | None]:
        """Time travel (`opts["at"]`): the raw objects as they were then (the one named, or
        the list) and the time the api shows them at (`virtstream-at-time`: a sequence's is
        its event's), for ages as they were then."""
        req = (
            self.r.get(kind, name, namespace, opts) if name else self.r.list(kind, namespace, opts)
        )
        resp = self.http.request(req.method, req.path, params=req.params)
        body = _json(resp)
        when = resp.headers.get(AT_TIME_HEADER)
        return ([body] if name else list(body["items"])), float(when) if when else None

    def list_with_version(
        self,
        kind: str,
        namespace: str | None = None,
        *,
        all_namespaces: bool = False,
        label_selector: str | None = None,
        field_selector: str | None = None,
    ) -> tuple[builtins.list[JSON], str]:
        """The raw items and the list's resourceVersion: a watch from it sends only what
        changed after the list (kubectl's list-then-watch)."""
        path = self.r.collection(kind, namespace, all_namespaces)
        params = self.r.list_params(label_selector, field_selector)
        body = _json(self.http.get(path, params=params))
        return list(body["items"]), str((body.get("metadata") or {}).get("resourceVersion", ""))

    def delete(
        self, kind: str, name: str, namespace: str | None = None, *, grace_period: int | None = None
    ) -> JSON:
        return dict(self._send(self.r.delete(kind, name, namespace, grace_period)))

    def watch(
        self, kind: str, namespace: str | None = None, **opts: Unpack[WatchOptions]
    ) -> Iterator[tuple[str, JSON]]:
        """(type, object) pairs: ADDED/MODIFIED/DELETED, or ERROR with a Status."""
        req = self.r.watch(kind, namespace, opts)
        with self.http.stream("GET", req.path, params=req.params, timeout=None) as resp:
            if resp.status_code >= 400:
                resp.read()
                _raise_for(resp)
            yield from _events(resp.iter_lines())

    # -------------------------------------------------------- subresources
    def start(self, name: str, namespace: str | None = None, *, paused: bool = False) -> None:
        body = {"paused": True} if paused else {}
        _json(self.http.put(self.r.vm_sub(name, "start", namespace), json=body))

    def scale(self, kind: str, name: str, replicas: int, namespace: str | None = None) -> Any:
        """Set the replicas of a kind with a `scale` subresource (a merge patch of its
        autoscaling/v1 Scale, as `kubectl scale` sends it); the Scale answered."""
        body = msgspec.json.encode({"spec": {"replicas": replicas}})
        headers = {"Content-Type": "application/merge-patch+json"}
        path = self.r.sub(kind, name, "scale", namespace)
        return _json(self.http.patch(path, content=body, headers=headers))

    def stop(
        self, name: str, namespace: str | None = None, *, grace_period: int | None = None
    ) -> None:
        body = {} if grace_period is None else {"gracePeriod": grace_period}
        _json(self.http.put(self.r.vm_sub(name, "stop", namespace), json=body))

    def restart(self, name: str, namespace: str | None = None) -> None:
        _json(self.http.put(self.r.vm_sub(name, "restart", namespace), json={}))

    def migrate(
        self,
        name: str,
        namespace: str | None = None,
        *,
        added_node_selector: dict[str, str] | None = None,
        raw: bool = False,
    ) -> Any:
        body = {"addedNodeSelector": added_node_selector} if added_node_selector else {}
        return self._out(
            _json(self.http.put(self.r.vm_sub(name, "migrate", namespace), json=body)), {"raw": raw}
        )

    def pause(self, name: str, namespace: str | None = None) -> None:
        _json(self.http.put(self.r.vmi_sub(name, "pause", namespace), json={}))

    def unpause(self, name: str, namespace: str | None = None) -> None:
        _json(self.http.put(self.r.vmi_sub(name, "unpause", namespace), json={}))

    def softreboot(self, name: str, namespace: str | None = None) -> None:
        _json(self.http.put(self.r.vmi_sub(name, "softreboot", namespace), json={}))

    def add_volume(self, name: str, options: dict[str, Any], namespace: str | None = None) -> None:
        """The VMI's addvolume (KubeVirt's AddVolumeOptions: name, disk, volumeSource)."""
        _json(self.http.put(self.r.vmi_sub(name, "addvolume", namespace), json=options))

    def guest_agent(self, name: str, what: str, namespace: str | None = None) -> Any:
        """The VMI's guestosinfo, userlist or filesystemlist (KubeVirt's JSON)."""
        return _json(self.http.get(self.r.vmi_sub(name, what, namespace)))

    def remove_volume(self, name: str, volume: str, namespace: str | None = None) -> None:
        body = {"name": volume}
        _json(self.http.put(self.r.vmi_sub(name, "removevolume", namespace), json=body))

    def cordon(self, node: str) -> Any:
        return self._out(_json(self.http.put(self.r.node_sub(node, "cordon"))), {})

    def uncordon(self, node: str) -> Any:
        return self._out(_json(self.http.put(self.r.node_sub(node, "uncordon"))), {})

    def drain(self, node: str) -> Any:
        return self._out(_json(self.http.put(self.r.node_sub(node, "drain"))), {})


class AsyncClient:
    """The same calls for asyncio code: `async with AsyncClient(server) as c: await c.get(...)`."""

    def __init__(
        self,
        server: str = DEFAULT_SERVER,
        *,
        namespace: str = "default",
        timeout: float = 30.0,
        kinds: Registry = REGISTRY,
        on_warning: Callable[[str], None] | None = None,
        credentials: ApiCredentials | None = None,
    ) -> None:
        self.seen = Seen()
        self.on_warning = on_warning
        hooks: dict[str, list[Callable[..., Any]]] = {
            "request": [self.seen.ask_async],
            "response": [
                self.seen.record_async,
                *([_async_warning_hook(on_warning)] if on_warning else []),
            ],
        }
        creds = credentials or for_api(server)
        self.http = httpx.AsyncClient(**creds.httpx_options(), timeout=timeout, event_hooks=hooks)
        self.r = _Requests(namespace, kinds)

    async def aclose(self) -> None:
        await self.http.aclose()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.aclose()

    def _out(self, body: Any, opts: WriteOptions | ReadOptions) -> Any:
        raw = opts.get("raw", False)
        return body if raw or not isinstance(body, dict) else typed(body, self.r.kinds)

    async def _send(self, req: Req) -> Any:
        return _json(await self.http.request(req.method, req.path, params=req.params, **_body(req)))

    async def create(
        self, obj: Any, namespace: str | None = None, **opts: Unpack[WriteOptions]
    ) -> Any:
        return self._out(await self._send(self.r.create(as_dict(obj), namespace, opts)), opts)

    async def update(
        self, obj: Any, namespace: str | None = None, **opts: Unpack[WriteOptions]
    ) -> Any:
        return self._out(await self._send(self.r.update(as_dict(obj), namespace, opts)), opts)

    async def apply(
        self, obj: Any, namespace: str | None = None, **opts: Unpack[ApplyOptions]
    ) -> Any:
        """`Client.apply`'s."""
        doc = as_dict(obj)
        if opts.get("server_side"):
            req = self.r.server_side_apply(doc, namespace, opts)
            return self._out(await self._send(req), opts)
        config = self.r.applied(doc, namespace)
        item = self.r.object_target(config, namespace)[1]
        got = await self.http.get(item)
        if got.status_code == 404:
            req = self.r.create(config, namespace, opts, CLIENT_SIDE_MANAGER)
            return self._out(await self._send(req), opts)
        current = _json(got)
        patch = _apply_patch(self.r, config, item, current, self.on_warning)
        if not patch:
            return self._out(current, opts)
        return self._out(await self._send(self.r.merge_patch(item, patch, opts)), opts)

    async def get(
        self, kind: str, name: str, namespace: str | None = None, **opts: Unpack[ReadOptions]
    ) -> Any:
        return self._out(await self._send(self.r.get(kind, name, namespace, opts)), opts)

    async def list(
        self, kind: str, namespace: str | None = None, **opts: Unpack[ListOptions]
    ) -> list[Any]:
        body = await self._send(self.r.list(kind, namespace, opts))
        return [self._out(i, opts) for i in body["items"]]

    async def delete(
        self, kind: str, name: str, namespace: str | None = None, *, grace_period: int | None = None
    ) -> JSON:
        return dict(await self._send(self.r.delete(kind, name, namespace, grace_period)))

    async def watch(
        self, kind: str, namespace: str | None = None, **opts: Unpack[WatchOptions]
    ) -> AsyncIterator[tuple[str, JSON]]:
        req = self.r.watch(kind, namespace, opts)
        async with self.http.stream("GET", req.path, params=req.params, timeout=None) as resp:
            if resp.status_code >= 400:
                await resp.aread()
                _raise_for(resp)
            async for line in resp.aiter_lines():
                for event in _events(iter((line,))):
                    yield event

    async def start(self, name: str, namespace: str | None = None, *, paused: bool = False) -> None:
        body = {"paused": True} if paused else {}
        _json(await self.http.put(self.r.vm_sub(name, "start", namespace), json=body))

    async def stop(
        self, name: str, namespace: str | None = None, *, grace_period: int | None = None
    ) -> None:
        body = {} if grace_period is None else {"gracePeriod": grace_period}
        _json(await self.http.put(self.r.vm_sub(name, "stop", namespace), json=body))

    async def restart(self, name: str, namespace: str | None = None) -> None:
        _json(await self.http.put(self.r.vm_sub(name, "restart", namespace), json={}))

    async def migrate(
        self,
        name: str,
        namespace: str | None = None,
        *,
        added_node_selector: dict[str, str] | None = None,
        raw: bool = False,
    ) -> Any:
        body = {"addedNodeSelector": added_node_selector} if added_node_selector else {}
        resp = await self.http.put(self.r.vm_sub(name, "migrate", namespace), json=body)
        return self._out(_json(resp), {"raw": raw})

    async def pause(self, name: str, namespace: str | None = None) -> None:
        _json(await self.http.put(self.r.vmi_sub(name, "pause", namespace), json={}))

    async def unpause(self, name: str, namespace: str | None = None) -> None:
        _json(await self.http.put(self.r.vmi_sub(name, "unpause", namespace), json={}))

    async def softreboot(self, name: str, namespace: str | None = None) -> None:
        _json(await self.http.put(self.r.vmi_sub(name, "softreboot", namespace), json={}))

    async def cordon(self, node: str) -> Any:
        return self._out(_json(await self.http.put(self.r.node_sub(node, "cordon"))), {})

    async def uncordon(self, node: str) -> Any:
        return self._out(_json(await self.http.put(self.r.node_sub(node, "uncordon"))), {})

    async def drain(self, node: str) -> Any:
        return self._out(_json(await self.http.put(self.r.node_sub(node, "drain"))), {})
