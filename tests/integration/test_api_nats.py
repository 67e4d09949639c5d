"""The api's intents over NATS request-reply against a real nats-server: discovery, the
same answers (and refusals) as over HTTP, nothing appended on a refusal, keyed retries
applied once, several api processes in one queue group."""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
import nats.errors
import pytest
from nats.aio.client import Client as NATS
from nats.aio.msg import Msg

from eventstore.jetstream import JetStreamStore
from readside.runner import ProjectionRunner
from services.api.nats_endpoints import (
    CODE_HEADER,
    ERROR_CODE_HEADER,
    ERROR_HEADER,
    SEQ_HEADER,
    IntentService,
    serve_intents,
    subject,
)
from services.api.service import ApiService
from tests.integration.test_api_support import RunningApi

VMS = "/apis/kubevirt.io/v1/namespaces/default/virtualmachines"


def vm(name: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachine",
        "metadata": {"name": name},
        "spec": {
            "runStrategy": "Halted",
            "template": {"spec": {"domain": {"memory": {"guest": "64Mi"}}}},
            **spec,
        },
    }


@pytest.fixture
async def intents(store: JetStreamStore, nc: NATS) -> AsyncIterator[IntentService]:
    runner = ProjectionRunner(store)
    await runner.start()
    service = ApiService(runner, store)
    await service.bootstrap()  # the system namespaces, as the api creates them at its start
    svc = await serve_intents(nc, service)
    yield svc
    await svc.stop()
    await runner.stop()


async def ask(nc: NATS, subj: str, body: Any = None, **headers: str) -> Msg:
    data = b"" if body is None else json.dumps(body).encode()
    return await nc.request(subj, data, timeout=10, headers=headers or None)


def code(msg: Msg) -> int:
    return int((msg.headers or {})[CODE_HEADER])


async def test_discovery_lists_the_verbs(nc: NATS, intents: IntentService) -> None:
    ping = await ask(nc, "$SRV.PING.virt-api")
    assert json.loads(ping.data)["name"] == "virt-api"
    info = json.loads((await ask(nc, "$SRV.INFO.virt-api")).data)
    subjects = {e["subject"] for e in info["endpoints"]}
    for verb in ("create", "get", "update", "delete", "start", "stop", "migrate", "pause"):
        assert f"virt-api.v1.*.*.*.{verb}" in subjects
    assert all(e["queue_group"] == "virt-api" for e in info["endpoints"])


async def test_create_start_get_over_nats(
    nc: NATS, store: JetStreamStore, intents: IntentService
) -> None:
    created = await ask(
        nc, subject("default", "virtualmachines", "vm1", "create"), vm("vm1"),
        **{"X-Correlation-Id": "c-123"},
    )  # fmt: skip
    h = created.headers or {}
    assert code(created) == 201, created.data
    assert h["X-Correlation-Id"] == "c-123"
    seq = int(h[SEQ_HEADER])
    assert seq == await store.stream_last_seq()
    obj = json.loads(created.data)
    assert obj["metadata"]["name"] == "vm1" and obj["metadata"]["uid"]

    started = await ask(nc, subject("default", "virtualmachines", "vm1", "start"), {})
    assert code(started) == 202 and started.data == b""
    assert int((started.headers or {})[SEQ_HEADER]) > seq
    stored = await store.get(int((started.headers or {})[SEQ_HEADER]))
    assert stored is not None
    assert stored.event.meta.correlation_id == started.headers["X-Correlation-Id"]  # type: ignore[index]

    got = await ask(nc, subject("default", "vms", "vm1", "get"))
    assert code(got) == 200
    assert json.loads(got.data)["spec"]["runStrategy"] == "Always"


async def test_refusals_match_http_and_append_nothing(
    nc: NATS, store: JetStreamStore, intents: IntentService, http: httpx.AsyncClient
) -> None:
    before = await store.stream_last_seq()
    cases: list[tuple[str, Any, str, Any]] = [
        # (NATS subject, body, HTTP path, body)
        (
            subject("default", "virtualmachines", "bad", "create"),
            {**vm("bad"), "spec": {"runStrategy": "Sometimes"}},
            VMS,
            {**vm("bad"), "spec": {"runStrategy": "Sometimes"}},
        ),
        (
            subject("default", "virtualmachines", "Bad_Name", "create"),
            vm("Bad_Name"),
            VMS,
            vm("Bad_Name"),
        ),
        (
            subject("default", "virtualmachines", "ghost", "start"),
            {},
            "/apis/subresources.kubevirt.io/v1/namespaces/default/virtualmachines/ghost/start",
            {},
        ),
        (subject("default", "virtualmachines", "x", "create"), [1], VMS, [1]),
        # a namespace that was never created: the API server's NamespaceLifecycle
        (
            subject("nowhere", "virtualmachines", "vm1", "create"),
            vm("vm1"),
            "/apis/kubevirt.io/v1/namespaces/nowhere/virtualmachines",
            vm("vm1"),
        ),
    ]
    for subj, body, path, http_body in cases:
        over_nats = await ask(nc, subj, body)
        method = "PUT" if path.endswith("/start") else "POST"
        over_http = await http.request(method, path, json=http_body)
        h = over_nats.headers or {}
        assert code(over_nats) == over_http.status_code, (subj, over_nats.data)
        assert json.loads(over_nats.data) == over_http.json()
        assert h[ERROR_HEADER] == over_http.json()["message"]
        assert h[ERROR_CODE_HEADER] == str(over_http.status_code)
    # a token the name rules refuse, for every verb; an unknown kind or verb
    refused = await ask(nc, "virt-api.v1.default.virtualmachines.UPPER.get")
    assert code(refused) == 422
    assert code(await ask(nc, "virt-api.v1.default.widgets.w.get")) == 404
    assert code(await ask(nc, "virt-api.v1.default.virtualmachines.w.pause")) == 404
    assert await store.stream_last_seq() == before
    missing = await ask(nc, subject("nowhere", "virtualmachines", "vm1", "create"), vm("vm1"))
    status = json.loads(missing.data)
    assert (status["reason"], status["message"]) == ("NotFound", 'namespaces "nowhere" not found')


async def test_a_keyed_retry_appends_once(
    nc: NATS, store: JetStreamStore, intents: IntentService
) -> None:
    subj = subject("default", "virtualmachines", "once", "create")
    first = await ask(nc, subj, vm("once"), **{"Idempotency-Key": "k-1"})
    assert code(first) == 201
    after = await store.stream_last_seq()
    for _ in range(3):
        again = await ask(nc, subj, vm("once"), **{"Idempotency-Key": "k-1"})
        assert code(again) == 201
        assert (
            json.loads(again.data)["metadata"]["uid"] == json.loads(first.data)["metadata"]["uid"]
        )
        assert (again.headers or {})[SEQ_HEADER] == (first.headers or {})[SEQ_HEADER]
    assert await store.stream_last_seq() == after
    # the same key with another request is refused
    other = await ask(nc, subj, vm("once", runStrategy="Always"), **{"Idempotency-Key": "k-1"})
    assert code(other) == 422
    # without a key, a second create is refused as already existing
    assert code(await ask(nc, subj, vm("once"))) == 409
    assert await store.stream_last_seq() == after


async def test_two_processes_share_the_queue_group(
    nc: NATS, store: JetStreamStore, intents: IntentService, api: RunningApi
) -> None:
    second = await serve_intents(nc, ApiService(api.runner, store))
    try:
        info = await nc.request("$SRV.PING.virt-api", b"", timeout=2)
        assert json.loads(info.data)["name"] == "virt-api"
        for i in range(6):  # each request is answered once, by one of them
            r = await ask(nc, subject("default", "vms", f"q{i}", "create"), vm(f"q{i}"))
            assert code(r) == 201, r.data
        stats = [s.stats() for s in (intents.service, second.service)]
        per = [sum(e.num_requests for e in s.endpoints) for s in stats]
        assert sum(per) == 6
        # both answer discovery: two members of the one service
        inbox = nc.new_inbox()
        sub = await nc.subscribe(inbox)
        await nc.publish("$SRV.PING.virt-api", b"", reply=inbox)
        ids: set[str] = set()
        with contextlib.suppress(TimeoutError, nats.errors.TimeoutError):
            while len(ids) < 3:
                ids.add(json.loads((await sub.next_msg(timeout=1.0)).data)["id"])
        await sub.unsubscribe()
        assert len(ids) == 2
    finally:
        await second.stop()
