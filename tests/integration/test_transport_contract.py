"""HTTP and NATS are two transports of one set of commands: the same script of writes
(create, update, patch, server-side apply, delete with DeleteOptions, deletecollection,
subresource calls,
dry runs, and the refusals of each) is sent over HTTP in one namespace and over the NATS
endpoints in another, against the same api on a real nats-server, and both must answer
with the same code, body and warnings and store the same events (ids, uids, times and
sequences aside)."""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import httpx
import msgspec
import pytest
from nats.aio.client import Client as NATS

from eventstore.jetstream import JetStreamStore
from kinds.registry import REGISTRY
from services.api.guard import Guard
from services.api.nats_endpoints import CODE_HEADER, IntentService, serve_intents, subject
from services.api.service import ApiService
from tests.integration.test_api_support import RunningApi, create_namespace

AGENT = "contract-client/1.0"  # names the field manager of every write without fieldManager


@dataclass(frozen=True)
class Step:
    """One write, as a client means it (each transport spells it its own way)."""

    verb: str  # create | update | patch | delete | a subresource
    plural: str
    name: str
    body: Any = None  # a JSON value, or bytes sent as they are
    content_type: str = "application/json"
    params: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Answer:
    code: int
    body: Any  # the decoded JSON, None when empty
    warning: str


Send = Callable[[Step], Awaitable[Answer]]


def _data(step: Step) -> bytes:
    if step.body is None:
        return b""
    return step.body if isinstance(step.body, bytes) else json.dumps(step.body).encode()


def _decoded(data: bytes) -> Any:
    return json.loads(data) if data else None


def over_http(http: httpx.AsyncClient, ns: str) -> Send:
    methods = {
        "create": "POST",
        "update": "PUT",
        "patch": "PATCH",
        "delete": "DELETE",
        "deletecollection": "DELETE",
    }

    async def send(step: Step) -> Answer:
        spec = REGISTRY.get(step.plural)
        assert spec is not None
        if step.verb in ("create", "deletecollection"):
            path = spec.collection_path(ns)
        elif step.verb in methods:
            path = f"{spec.collection_path(ns)}/{step.name}"
        else:
            path = spec.subresource_path(step.name, step.verb, ns)
        r = await http.request(
            methods.get(step.verb, "PUT"),
            path,
            params=step.params,
            content=_data(step),
            headers={"Content-Type": step.content_type, "X-Correlation-Id": step.verb},
        )
        return Answer(r.status_code, _decoded(r.content), r.headers.get("warning", ""))

    return send


def over_nats(nc: NATS, ns: str, token: str) -> Send:
    async def send(step: Step) -> Answer:
        headers = {
            "Content-Type": step.content_type,
            "X-Correlation-Id": step.verb,
            "User-Agent": AGENT,
            "Authorization": f"Bearer {token}",
            **step.params,
        }
        subj = subject(ns, step.plural, step.name, step.verb)
        msg = await nc.request(subj, _data(step), timeout=15, headers=headers)
        h = msg.headers or {}
        return Answer(int(h[CODE_HEADER]), _decoded(msg.data), h.get("Warning", ""))

    return send


# ------------------------------------------------------------------ the script
VMS = "virtualmachines"
VMIS = "virtualmachineinstances"
VMIRS = "virtualmachineinstancereplicasets"


def vm(name: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachine",
        "metadata": {"name": name, "labels": {"app": "contract"}},
        "spec": {
            "runStrategy": "Halted",
            "template": {"spec": {"domain": {"memory": {"guest": "64Mi"}}}},
            **spec,
        },
    }


def vmi(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachineInstance",
        "metadata": {"name": name},
        "spec": {"domain": {"memory": {"guest": "64Mi"}}},
    }


def replicaset(name: str) -> dict[str, Any]:
    labels = {"app": name}
    return {
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachineInstanceReplicaSet",
        "metadata": {"name": name},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {"domain": {"memory": {"guest": "64Mi"}}},
            },
        },
    }


APPLY = "application/apply-patch+yaml"
MERGE = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"


async def script(send: Send) -> list[Answer]:
    """Every command, and a refusal of each, in an order where each one's outcome is
    known; the delete preconditions use what this transport's own create answered."""
    out: list[Answer] = []

    async def step(s: Step) -> Answer:
        out.append(await send(s))
        return out[-1]

    created = await step(Step("create", VMS, "", vm("vm1")))
    assert created.code == 201, created
    uid = created.body["metadata"]["uid"]
    await step(Step("create", VMS, "", vm("vm1")))  # 409 AlreadyExists
    await step(Step("create", VMS, "", vm("bad", runStrategy="Sometimes")))  # 422
    await step(Step("create", VMS, "", {**vm("odd"), "frobnicate": 1}))  # a warning
    await step(
        Step(
            "create", VMS, "", {**vm("odd2"), "frobnicate": 1}, params={"fieldValidation": "Strict"}
        )
    )
    await step(Step("create", VMS, "", vm("dry"), params={"dryRun": "All"}))
    await step(Step("create", VMS, "", vm("dry"), params={"dryRun": "Some"}))  # 422
    await step(Step("create", VMS, "", b"{not json"))  # 400
    await step(Step("create", VMS, "", b"a: [", content_type="application/yaml"))  # 400
    await step(Step("create", VMS, "", vm("txt"), content_type="text/plain"))  # 415
    # updates: a change (the client's field manager takes it), none, a stale version
    await step(Step("update", VMS, "vm1", vm("vm1", runStrategy="Manual")))
    await step(Step("update", VMS, "vm1", vm("vm1", runStrategy="Manual")))
    stale = vm("vm1")
    stale["metadata"]["resourceVersion"] = "1"
    await step(Step("update", VMS, "vm1", stale))  # 409
    await step(Step("update", VMS, "vm1", vm("other")))  # 400: another name
    await step(Step("update", VMS, "ghost", vm("ghost")))  # 404
    # patches, server-side apply
    await step(Step("patch", VMS, "vm1", {"metadata": {"labels": {"tier": "web"}}}, MERGE))
    await step(
        Step(
            "patch",
            VMS,
            "vm1",
            [{"op": "add", "path": "/metadata/annotations", "value": {"a": "1"}}],
            JSON_PATCH,
        )
    )
    await step(
        Step(
            "patch",
            VMS,
            "vm1",
            [{"op": "test", "path": "/spec/runStrategy", "value": "Always"}],
            JSON_PATCH,
        )
    )  # 422
    await step(Step("patch", VMS, "vm1", {"spec": {"x": 1}}, "application/xml"))  # 415
    await step(
        Step("patch", VMS, "vm1", {"spec": {"frobnicate": 1}}, MERGE, {"fieldValidation": "Strict"})
    )  # 400
    config = b"apiVersion: kubevirt.io/v1\nkind: VirtualMachine\nmetadata:\n  name: vm1\n"
    config += b"  labels:\n    tier: db\n"
    await step(Step("patch", VMS, "vm1", config, APPLY))  # 422: no field manager
    await step(Step("patch", VMS, "vm1", config, APPLY, {"fieldManager": "ops"}))  # 409
    await step(Step("patch", VMS, "vm1", config, APPLY, {"fieldManager": "ops", "force": "true"}))
    await step(
        Step("patch", VMS, "vm1", {"spec": {"runStrategy": "Always"}}, MERGE, {"dryRun": "All"})
    )
    # subresources
    await step(Step("start", VMS, "vm1", {}))
    await step(Step("start", VMS, "vm1", {}))  # 409: already asked to run
    await step(Step("stop", VMS, "vm1", {"gracePeriod": 0}))
    await step(Step("start", VMS, "ghost", {}))  # 404
    await step(Step("migrate", VMS, "vm1", {}))  # 409: not running
    await step(Step("create", VMIS, "", vmi("vmi1")))
    await step(Step("pause", VMIS, "vmi1"))  # 409: not running
    await step(Step("create", VMIRS, "", replicaset("rs1")))
    await step(Step("scale", VMIRS, "rs1", {"spec": {"replicas": 3}}))
    await step(Step("scale", VMIRS, "rs1", {"spec": {"replicas": -1}}))  # 422
    # deletes with DeleteOptions
    await step(Step("delete", VMS, "vm1", {"preconditions": {"uid": "not-" + uid}}))  # 409
    await step(Step("delete", VMS, "vm1", {"propagationPolicy": "Abandon"}))  # 422
    await step(Step("delete", VMS, "vm1", {}, params={"dryRun": "All"}))
    await step(Step("delete", VMS, "vm1", {"preconditions": {"uid": uid}, "gracePeriodSeconds": 0}))
    await step(Step("delete", VMIS, "vmi1", {}, params={"gracePeriodSeconds": "5"}))
    await step(Step("delete", VMS, "ghost", {}))  # 404
    # deletecollection: what the selector matches, each deleted as its own write
    await step(Step("create", VMS, "", vm("many-a")))
    await step(Step("create", VMS, "", vm("many-b")))
    await step(Step("deletecollection", VMS, "", {}, params={"labelSelector": "app in (x"}))
    await step(Step("deletecollection", VMS, "", {}, params={"labelSelector": "app=contract"}))
    return out


# --------------------------------------------------------------- normalizing
UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
TIME = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ")


def normalized(value: Any, ns: str, uids: dict[str, str]) -> Any:
    """Uids numbered by first appearance, times, versions and the namespace named alike,
    event ids, times and sequences dropped: what two runs of one script share."""
    if isinstance(value, dict):
        out = {}
        for k, v in value.items():
            if k in ("eventId", "occurredAt"):
                continue
            if k == "resourceVersion" and isinstance(v, str):
                v = "<rv>"
            out[k] = normalized(v, ns, uids)
        return out
    if isinstance(value, list):
        return [normalized(v, ns, uids) for v in value]
    if isinstance(value, str):
        if value == ns:
            return "<ns>"
        value = UUID.sub(lambda m: uids.setdefault(m.group(0), f"<uid{len(uids)}>"), value)
        return TIME.sub("<time>", value)
    return value


async def stored(store: JetStreamStore, ns: str) -> list[Any]:
    uids: dict[str, str] = {}
    events = []
    async for s in store.replay(["virt.>"]):
        if s.event.meta.aggregate.namespace == ns:
            events.append(normalized(msgspec.to_builtins(s.event), ns, uids))
    return events


@pytest.fixture
async def intents(api: RunningApi, nc: NATS) -> AsyncIterator[IntentService]:
    assert api.authenticator is not None
    guard = Guard.of(api.authenticator, REGISTRY)
    svc = await serve_intents(nc, ApiService(api.runner, api.store), guard)
    yield svc
    await svc.stop()


async def test_every_command_is_the_same_over_http_and_nats(
    api: RunningApi, nc: NATS, intents: IntentService, store: JetStreamStore
) -> None:
    for ns in ("over-http", "over-nats"):
        await create_namespace(api, ns)
    async with httpx.AsyncClient(
        base_url=api.url, timeout=15, headers={**api.headers, "User-Agent": AGENT}
    ) as http:
        by_http = await script(over_http(http, "over-http"))
    by_nats = await script(over_nats(nc, "over-nats", api.token))

    uids_h: dict[str, str] = {}
    uids_n: dict[str, str] = {}
    for i, (h, n) in enumerate(zip(by_http, by_nats, strict=True)):
        seen_h = (h.code, normalized(h.body, "over-http", uids_h), h.warning)
        seen_n = (n.code, normalized(n.body, "over-nats", uids_n), n.warning)
        assert seen_h == seen_n, f"step {i}"
    codes = [a.code for a in by_http]
    assert {200, 201, 202, 400, 404, 409, 415, 422} <= set(codes), codes

    events_h = await stored(store, "over-http")
    events_n = await stored(store, "over-nats")
    assert events_h == events_n
    # what the script asked for is there: the client's field manager on its update, the
    # precondition-checked delete, and nothing from any refusal or dry run
    types = [e["type"] for e in events_h]
    assert types.count("VMCreated") == 4 and "VMDeleted" in types
    deleted = {e["meta"]["aggregate"]["name"] for e in events_h if e["type"] == "VMDeleted"}
    assert {"many-a", "many-b"} <= deleted  # the deletecollection's, one write each
    updated = next(e for e in events_h if e["type"] == "VMUpdated")
    managers = {f["manager"] for f in updated["manifest"]["metadata"]["managedFields"]}
    assert "contract-client" in managers
    assert all(e["meta"]["actor"] == {"service": "virt-api", "user": "admin"} for e in events_h)
