"""Python client for scripts: `Client` (sync) and `AsyncClient` (asyncio), over httpx.

Objects come back typed (events.objects: VirtualMachine, VirtualMachineInstance, ...) via
events.manifest, or as the server's JSON with `raw=True`. Errors raise `ApiError` carrying
the server's Kubernetes `Status` (message, reason, code)."""

from __future__ import annotations

import builtins
import json
import re
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import httpx
import msgspec

from events.manifest import OBJECT_TYPES, api_group, dump, load
from events.objects import Status
from kinds.registry import REGISTRY, Registry
from kinds.spec import KindSpec

DEFAULT_SERVER = "http://127.0.0.1:8080"
JSON = dict[str, Any]


class ApiError(Exception):
    def __init__(self, status: Status) -> None:
        super().__init__(status.message)
        self.status = status

    @property
    def code(self) -> int:
        return self.status.code

    @property
    def reason(self) -> str:
        return self.status.reason


def resource(kind: str, kinds: Registry = REGISTRY) -> KindSpec:
    """A kind by any name a user may type (`vms`, `vmi`, `VirtualMachine`, ...)."""
    return kinds.resource(kind)


def typed(obj: JSON, kinds: Registry = REGISTRY) -> Any:
    """The typed object for a server document (unknown kinds stay dicts)."""
    group, kind = api_group(str(obj.get("apiVersion", ""))), str(obj.get("kind", ""))
    spec = kinds.get(kind) if kind else None
    t = (
        spec.object_type
        if spec is not None and spec.group == group
        else OBJECT_TYPES.get((group, kind))
    )
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


class Client:
    """Synchronous client: `Client(server="http://127.0.0.1:8080")`. `on_warning` gets the
    text of each `Warning` the server answers with (unknown fields, for one)."""

    def __init__(
        self,
        server: str = DEFAULT_SERVER,
        *,
        namespace: str = "default",
        timeout: float = 30.0,
        kinds: Registry = REGISTRY,
        on_warning: Callable[[str], None] | None = None,
    ) -> None:
        hooks = {"response": [_warning_hook(on_warning)]} if on_warning else {}
        self.http = httpx.Client(base_url=server, timeout=timeout, event_hooks=hooks)
        self.r = _Requests(namespace, kinds)

    def close(self) -> None:
        self.http.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def _out(self, body: Any, raw: bool) -> Any:
        return body if raw or not isinstance(body, dict) else typed(body, self.r.kinds)

    # ------------------------------------------------------------- objects
    def create(
        self,
        obj: Any,
        namespace: str | None = None,
        *,
        raw: bool = False,
        field_validation: str | None = None,
    ) -> Any:
        """`field_validation`: Strict, Warn (the server's default) or Ignore."""
        doc = as_dict(obj)
        coll, _, _ = self.r.object_target(doc, namespace)
        params = self.r.write_params(field_validation)
        return self._out(_json(self.http.post(coll, json=doc, params=params)), raw)

    def update(
        self,
        obj: Any,
        namespace: str | None = None,
        *,
        raw: bool = False,
        field_validation: str | None = None,
    ) -> Any:
        doc = as_dict(obj)
        _, item, _ = self.r.object_target(doc, namespace)
        params = self.r.write_params(field_validation)
        return self._out(_json(self.http.put(item, json=doc, params=params)), raw)

    def apply(
        self,
        obj: Any,
        namespace: str | None = None,
        *,
        raw: bool = False,
        field_validation: str | None = None,
    ) -> Any:
        """Create, or update the existing object (on its current resourceVersion); an
        unchanged object keeps its resourceVersion and generation."""
        doc = as_dict(obj)
        _, item, _ = self.r.object_target(doc, namespace)
        current = self.http.get(item)
        if current.status_code == 404:
            return self.create(doc, namespace, raw=raw, field_validation=field_validation)
        rv = _json(current)["metadata"]["resourceVersion"]
        doc = {**doc, "metadata": {**doc.get("metadata", {}), "resourceVersion": rv}}
        return self.update(doc, namespace, raw=raw, field_validation=field_validation)

    def get(
        self,
        kind: str,
        name: str,
        namespace: str | None = None,
        *,
        raw: bool = False,
        at: str | None = None,
    ) -> Any:
        """`at`: a stream sequence or a time (`5m`, `@epoch`, ISO): the object as it was."""
        params = {"at": at} if at else {}
        return self._out(
            _json(self.http.get(self.r.item(kind, name, namespace), params=params)), raw
        )

    def list(
        self,
        kind: str,
        namespace: str | None = None,
        *,
        all_namespaces: bool = False,
        label_selector: str | None = None,
        field_selector: str | None = None,
        raw: bool = False,
        at: str | None = None,
    ) -> list[Any]:
        path = self.r.collection(kind, namespace, all_namespaces)
        params = self.r.list_params(label_selector, field_selector)
        if at:
            params["at"] = at
        body = _json(self.http.get(path, params=params))
        return [self._out(i, raw) for i in body["items"]]

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
        params = {} if grace_period is None else {"gracePeriodSeconds": str(grace_period)}
        return dict(_json(self.http.delete(self.r.item(kind, name, namespace), params=params)))

    def watch(
        self,
        kind: str,
        namespace: str | None = None,
        *,
        all_namespaces: bool = False,
        resource_version: str | int | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        timeout_seconds: float | None = None,
    ) -> Iterator[tuple[str, JSON]]:
        """(type, object) pairs: ADDED/MODIFIED/DELETED, or ERROR with a Status."""
        path = self.r.collection(kind, namespace, all_namespaces)
        params = self.r.list_params(
            label_selector, field_selector, True, resource_version, timeout_seconds
        )
        with self.http.stream("GET", path, params=params, timeout=None) as resp:
            if resp.status_code >= 400:
                resp.read()
                _raise_for(resp)
            for line in resp.iter_lines():
                if line.strip():
                    ev = json.loads(line)
                    yield ev["type"], ev["object"]

    # -------------------------------------------------------- subresources
    def start(self, name: str, namespace: str | None = None, *, paused: bool = False) -> None:
        body = {"paused": True} if paused else {}
        _json(self.http.put(self.r.vm_sub(name, "start", namespace), json=body))

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
            _json(self.http.put(self.r.vm_sub(name, "migrate", namespace), json=body)), raw
        )

    def pause(self, name: str, namespace: str | None = None) -> None:
        _json(self.http.put(self.r.vmi_sub(name, "pause", namespace), json={}))

    def unpause(self, name: str, namespace: str | None = None) -> None:
        _json(self.http.put(self.r.vmi_sub(name, "unpause", namespace), json={}))

    def softreboot(self, name: str, namespace: str | None = None) -> None:
        _json(self.http.put(self.r.vmi_sub(name, "softreboot", namespace), json={}))

    def cordon(self, node: str) -> Any:
        return self._out(_json(self.http.put(self.r.node_sub(node, "cordon"))), False)

    def uncordon(self, node: str) -> Any:
        return self._out(_json(self.http.put(self.r.node_sub(node, "uncordon"))), False)

    def drain(self, node: str) -> Any:
        return self._out(_json(self.http.put(self.r.node_sub(node, "drain"))), False)


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
    ) -> None:
        hooks = {"response": [_async_warning_hook(on_warning)]} if on_warning else {}
        self.http = httpx.AsyncClient(base_url=server, timeout=timeout, event_hooks=hooks)
        self.r = _Requests(namespace, kinds)

    async def aclose(self) -> None:
        await self.http.aclose()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.aclose()

    def _out(self, body: Any, raw: bool) -> Any:
        return body if raw or not isinstance(body, dict) else typed(body, self.r.kinds)

    async def create(
        self,
        obj: Any,
        namespace: str | None = None,
        *,
        raw: bool = False,
        field_validation: str | None = None,
    ) -> Any:
        """`field_validation`: Strict, Warn (the server's default) or Ignore."""
        doc = as_dict(obj)
        coll, _, _ = self.r.object_target(doc, namespace)
        params = self.r.write_params(field_validation)
        return self._out(_json(await self.http.post(coll, json=doc, params=params)), raw)

    async def update(
        self,
        obj: Any,
        namespace: str | None = None,
        *,
        raw: bool = False,
        field_validation: str | None = None,
    ) -> Any:
        doc = as_dict(obj)
        _, item, _ = self.r.object_target(doc, namespace)
        params = self.r.write_params(field_validation)
        return self._out(_json(await self.http.put(item, json=doc, params=params)), raw)

    async def apply(
        self,
        obj: Any,
        namespace: str | None = None,
        *,
        raw: bool = False,
        field_validation: str | None = None,
    ) -> Any:
        doc = as_dict(obj)
        _, item, _ = self.r.object_target(doc, namespace)
        current = await self.http.get(item)
        if current.status_code == 404:
            return await self.create(doc, namespace, raw=raw, field_validation=field_validation)
        rv = _json(current)["metadata"]["resourceVersion"]
        doc = {**doc, "metadata": {**doc.get("metadata", {}), "resourceVersion": rv}}
        return await self.update(doc, namespace, raw=raw, field_validation=field_validation)

    async def get(
        self,
        kind: str,
        name: str,
        namespace: str | None = None,
        *,
        raw: bool = False,
        at: str | None = None,
    ) -> Any:
        params = {"at": at} if at else {}
        path = self.r.item(kind, name, namespace)
        return self._out(_json(await self.http.get(path, params=params)), raw)

    async def list(
        self,
        kind: str,
        namespace: str | None = None,
        *,
        all_namespaces: bool = False,
        label_selector: str | None = None,
        field_selector: str | None = None,
        raw: bool = False,
        at: str | None = None,
    ) -> list[Any]:
        path = self.r.collection(kind, namespace, all_namespaces)
        params = self.r.list_params(label_selector, field_selector)
        if at:
            params["at"] = at
        body = _json(await self.http.get(path, params=params))
        return [self._out(i, raw) for i in body["items"]]

    async def delete(
        self, kind: str, name: str, namespace: str | None = None, *, grace_period: int | None = None
    ) -> JSON:
        params = {} if grace_period is None else {"gracePeriodSeconds": str(grace_period)}
        return dict(
            _json(await self.http.delete(self.r.item(kind, name, namespace), params=params))
        )

    async def watch(
        self,
        kind: str,
        namespace: str | None = None,
        *,
        all_namespaces: bool = False,
        resource_version: str | int | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        timeout_seconds: float | None = None,
    ) -> AsyncIterator[tuple[str, JSON]]:
        path = self.r.collection(kind, namespace, all_namespaces)
        params = self.r.list_params(
            label_selector, field_selector, True, resource_version, timeout_seconds
        )
        async with self.http.stream("GET", path, params=params, timeout=None) as resp:
            if resp.status_code >= 400:
                await resp.aread()
                _raise_for(resp)
            async for line in resp.aiter_lines():
                if line.strip():
                    ev = json.loads(line)
                    yield ev["type"], ev["object"]

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
        return self._out(_json(resp), raw)

    async def pause(self, name: str, namespace: str | None = None) -> None:
        _json(await self.http.put(self.r.vmi_sub(name, "pause", namespace), json={}))

    async def unpause(self, name: str, namespace: str | None = None) -> None:
        _json(await self.http.put(self.r.vmi_sub(name, "unpause", namespace), json={}))

    async def softreboot(self, name: str, namespace: str | None = None) -> None:
        _json(await self.http.put(self.r.vmi_sub(name, "softreboot", namespace), json={}))

    async def cordon(self, node: str) -> Any:
        return self._out(_json(await self.http.put(self.r.node_sub(node, "cordon"))), False)

    async def uncordon(self, node: str) -> Any:
        return self._out(_json(await self.http.put(self.r.node_sub(node, "uncordon"))), False)

    async def drain(self, node: str) -> Any:
        return self._out(_json(await self.http.put(self.r.node_sub(node, "drain"))), False)
