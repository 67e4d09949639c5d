"""Hostile and careless input against the real api on a real nats-server: nothing a request
holds may be stored when a rule forbids it, reach the bus, or take the api down."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import pytest
from nats.aio.client import Client as NATS

from events import subjects
from events.meta import Kind
from eventstore.connection import connect_service
from eventstore.jetstream import JetStreamStore
from eventstore.settings import StreamSettings
from ops.nats_server import NatsServer
from services.api import server
from tests.integration.test_api_support import RunningApi, running_api

NS = "/apis/kubevirt.io/v1/namespaces"
VMS = f"{NS}/default/virtualmachines"
SUB = "/apis/subresources.kubevirt.io/v1/namespaces/default/virtualmachines"


def vm(name: str = "vm1", **domain: Any) -> dict[str, Any]:
    return {
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachine",
        "metadata": {"name": name},
        "spec": {
            "runStrategy": "Halted",
            "template": {"spec": {"domain": domain or {"memory": {"guest": "64Mi"}}}},
        },
    }


@contextlib.asynccontextmanager
async def bus_watch(nc: NATS) -> AsyncIterator[list[str]]:
    """Every subject published on the event namespace while inside."""
    seen: list[str] = []

    async def got(msg: Any) -> None:
        seen.append(msg.subject)

    sub = await nc.subscribe(subjects.ALL, cb=got)
    try:
        yield seen
    finally:
        await nc.flush()
        await sub.unsubscribe()


# ------------------------------------------------------------------ names and namespaces
BAD = [".", "*", ">", "~", " ", "\t"]


@pytest.mark.parametrize("bad", BAD, ids=["dot", "star", "gt", "tilde", "space", "tab"])
async def test_a_forbidden_character_is_neither_stored_nor_sent(
    bad: str, http: httpx.AsyncClient, api: RunningApi, nc: NATS
) -> None:
    async with bus_watch(nc) as seen:
        # in a namespace (a label: every one of them is forbidden), by path and by body
        r = await http.post(f"{NS}/{quote(f'a{bad}b', safe='')}/virtualmachines", json=vm())
        assert r.status_code == 422, r.text
        assert r.json()["details"]["causes"][0]["field"] == "metadata.namespace"
        if bad != ".":  # a dot is allowed in a name (a subdomain)
            r = await http.post(VMS, json=vm(f"a{bad}b"))
            assert r.status_code == 422, r.text
            body = r.json()
            assert body["kind"] == "Status" and body["reason"] == "Invalid"
            assert body["message"].startswith('VirtualMachine.kubevirt.io "a')
            assert "metadata.name: Invalid value" in body["message"]
    assert seen == []
    assert await api.store.stream_last_seq() == api.base_seq


async def test_the_api_servers_messages(http: httpx.AsyncClient) -> None:
    r = await http.post(VMS, json=vm("UPPER"))
    assert r.status_code == 422
    assert r.json()["message"] == (
        'VirtualMachine.kubevirt.io "UPPER" is invalid: metadata.name: Invalid value: "UPPER": '
        "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, "
        "'-' or '.', and must start and end with an alphanumeric character (e.g. "
        "'example.com', regex used for validation is "
        "'[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
    )
    r = await http.post(f"{NS}/%3E/virtualmachines", json=vm())
    assert r.status_code == 422
    assert (
        'metadata.namespace: Invalid value: ">": a lowercase RFC 1123 label' in r.json()["message"]
    )
    for namespace in ("é", "UPPER", "_", "a.b", "n" * 400):
        r = await http.post(f"{NS}/{namespace}/virtualmachines", json=vm())
        assert r.status_code == 422, namespace


async def test_a_name_whose_launcher_socket_cannot_exist_is_refused(
    http: httpx.AsyncClient,
) -> None:
    r = await http.post(VMS, json=vm("v" * 64))
    assert r.status_code == 422
    assert "must be no more than 48 characters in namespace" in r.json()["message"]
    assert (await http.post(VMS, json=vm("v" * 48))).status_code == 201
    # a dotted name is a valid subdomain: stored, its dot encoded on the bus
    assert (await http.post(VMS, json=vm("a.b"))).status_code == 201


# ------------------------------------------------------------------ quantities and counts
@pytest.mark.parametrize(
    "domain",
    [
        {"memory": {"guest": "-1Gi"}},
        {"memory": {"guest": "0"}},
        {"memory": {"guest": "1e100"}},
        {"memory": {"guest": "999999999999Ei"}},
        {"resources": {"requests": {"memory": "-1Gi"}}},
        {"memory": {"guest": "64Mi"}, "cpu": {"cores": -1}},
        {"memory": {"guest": "64Mi"}, "cpu": {"sockets": 0}},
        {"memory": {"guest": "64Mi"}, "cpu": {"cores": 2**63}},
        {"memory": {"guest": "64Mi"}, "resources": {"requests": {"cpu": "-1"}}},
        {"memory": {"guest": "3Mi", "hugepages": {"pageSize": "2Mi"}}},
    ],
)
async def test_quantities_and_counts_are_refused_and_append_nothing(
    domain: dict[str, Any], http: httpx.AsyncClient, api: RunningApi
) -> None:
    r = await http.post(VMS, json=vm(**domain))
    assert r.status_code == 422, r.text
    assert r.json()["message"].startswith(
        'admission webhook "virtualmachine-validator.kubevirt.io" denied the request: '
    )
    assert await api.store.stream_last_seq() == api.base_seq


async def test_no_memory_refuses_a_vmi_and_not_a_vms_template(
    http: httpx.AsyncClient, api: RunningApi
) -> None:
    """KubeVirt's mandatory-fields rule is the VMI webhook's alone (vmi-create-admitter.go)."""
    domain = {"resources": {"requests": {"memory": "0"}}}
    vmi = {"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance",
           "metadata": {"name": "no-memory"}, "spec": {"domain": domain}}  # fmt: skip
    r = await http.post(VMS.replace("virtualmachines", "virtualmachineinstances"), json=vmi)
    assert r.status_code == 422, r.text
    assert "no memory requested, at least one of 'spec.domain.memory.guest'" in r.text
    assert await api.store.stream_last_seq() == api.base_seq
    r = await http.post(VMS, json=vm("no-memory", **domain))
    assert r.status_code == 201, r.text


async def test_negative_grace_periods_are_refused(http: httpx.AsyncClient, api: RunningApi) -> None:
    doc = vm()
    doc["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] = -5
    r = await http.post(VMS, json=doc)
    assert r.status_code == 422
    assert "terminationGracePeriodSeconds '-5': must be greater than or equal to 0." in r.text
    assert await api.store.stream_last_seq() == api.base_seq


# ------------------------------------------------------------------ request hygiene
async def test_malformed_and_wrongly_typed_bodies_are_400(
    http: httpx.AsyncClient, api: RunningApi
) -> None:
    for body in (b'{"metadata": 5}', b'{"metadata": {"name": 5}}', b"{nope", b"[1]", b'"x"'):
        r = await http.post(VMS, content=body, headers={"Content-Type": "application/json"})
        assert r.status_code == 400, (body, r.text)
        assert r.json()["kind"] == "Status"
    deep = b'{"a":' * 1000 + b"1" + b"}" * 1000
    r = await http.post(VMS, content=deep, headers={"Content-Type": "application/json"})
    assert r.status_code == 400 and "nested deeper than" in r.json()["message"]
    shallow_enough = vm()
    shallow_enough["metadata"]["annotations"] = {"x.io/a": json.dumps([[[[1]]]])}
    assert (await http.post(VMS, json=shallow_enough)).status_code == 201
    assert await api.store.stream_last_seq() == api.base_seq + 1


async def test_media_types(http: httpx.AsyncClient) -> None:
    for ctype in ("image/png", "application/xml"):
        r = await http.post(VMS, content=json.dumps(vm()), headers={"Content-Type": ctype})
        assert r.status_code == 415
        assert r.json()["reason"] == "UnsupportedMediaType"
        assert r.json()["message"].startswith(
            "the body of the request was in an unknown format - accepted media types include:"
        )
    yml = "apiVersion: kubevirt.io/v1\nkind: VirtualMachine\nmetadata: {name: y}\n"
    yml += "spec: {runStrategy: Halted, template: {spec: {domain: {memory: {guest: 64Mi}}}}}\n"
    r = await http.post(VMS, content=yml, headers={"Content-Type": "application/yaml"})
    assert r.status_code == 201
    r = await http.post(VMS, content=json.dumps(vm("s")).encode(), headers={"Content-Type": ""})
    assert r.status_code == 201


async def test_an_update_cannot_move_or_rename_an_object(http: httpx.AsyncClient) -> None:
    created = (await http.post(VMS, json=vm())).json()
    moved = {**created, "metadata": {**created["metadata"], "namespace": "other"}}
    r = await http.put(f"{VMS}/vm1", json=moved)
    assert r.status_code == 400
    assert r.json()["message"] == (
        "the namespace of the provided object does not match the namespace sent on the request"
    )
    renamed = {**created, "metadata": {**created["metadata"], "name": "vm2"}}
    r = await http.put(f"{VMS}/vm1", json=renamed)
    assert r.status_code == 400
    assert "does not match the name on the URL" in r.json()["message"]
    other_uid = {**created, "metadata": {**created["metadata"], "uid": "0" * 8}}
    assert (await http.put(f"{VMS}/vm1", json=other_uid)).status_code == 409


async def test_watch_timeouts_are_bounded(http: httpx.AsyncClient) -> None:
    r = await http.get(f"{VMS}?watch=true&timeoutSeconds=1e9999")
    assert r.status_code == 400
    r = await http.get(f"{VMS}?watch=true&timeoutSeconds=-1")
    assert r.status_code == 400
    async with asyncio.timeout(5):
        r = await http.get(f"{VMS}?watch=true&timeoutSeconds=0.3")
    assert r.status_code == 200


async def test_a_longer_watch_timeout_is_clamped(
    http: httpx.AsyncClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    from services.api import watch_stream

    monkeypatch.setattr(watch_stream, "WATCH_MAX_SECONDS", 0.3)  # stands in for the hour
    async with asyncio.timeout(5):
        r = await http.get(f"{VMS}?watch=true&timeoutSeconds=99999")
    assert r.status_code == 200


async def test_a_half_sent_header_is_closed(
    api: RunningApi, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(server.GuardedHttp, "header_seconds", 0.5)
    host, port = api.url.removeprefix("http://").split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    writer.write(b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: ")
    await writer.drain()
    async with asyncio.timeout(5):
        assert await reader.read() == b""  # closed by the server
    writer.close()


# ------------------------------------------------------------------ poison and idempotency
async def test_a_poisoned_aggregate_stays_operable(
    http: httpx.AsyncClient, api: RunningApi, nc: NATS
) -> None:
    doc = vm()
    doc["spec"]["runStrategy"] = "Manual"
    assert (await http.post(VMS, json=doc)).status_code == 201
    js = nc.jetstream()
    subject = f"{subjects.PREFIX}.{Kind.VM}.default.vm1.VMStartRequested._"
    await js.publish(subject, b"\xff not an event", stream=api.store.stream)
    await js.publish(subject, b'{"type": "VMStartRequested", "meta": 5}', stream=api.store.stream)
    r = await http.put(f"{SUB}/vm1/start", json={})
    assert r.status_code == 202, r.text
    assert (await http.get("/readyz")).status_code == 200
    assert (await http.delete(f"{VMS}/vm1")).status_code == 200


async def test_an_idempotency_key_answers_a_retry_with_the_first_result(
    http: httpx.AsyncClient, api: RunningApi
) -> None:
    headers = {"Idempotency-Key": "create-vm1-attempt"}
    first = await http.post(VMS, json=vm(), headers=headers)
    again = await http.post(VMS, json=vm(), headers=headers)
    assert first.status_code == again.status_code == 201
    assert first.json()["metadata"]["uid"] == again.json()["metadata"]["uid"]
    assert await api.store.stream_last_seq() == api.base_seq + 1
    other = await http.post(VMS, json=vm("vm2"), headers=headers)
    assert other.status_code == 422
    assert (await http.post(VMS, json=vm())).status_code == 409  # without the key


# ------------------------------------------------------------------ a server restart
async def test_the_api_recovers_from_a_nats_server_restart(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("services.api.service.APPEND_SECONDS", 2.0)
    nats_server = NatsServer(tmp_path / "nats")
    await nats_server.start()
    nc = await connect_service(nats_server.url, "virt-api")
    store = JetStreamStore(nc, StreamSettings(name="VIRT_R", dlq_name="VIRT_R_DLQ"))
    await store.ensure()
    try:
        async with (
            running_api(store) as api,
            httpx.AsyncClient(base_url=api.url, timeout=30, headers=api.headers) as h,
        ):
            assert (await h.get("/readyz")).status_code == 200
            assert (await h.post(VMS, json=vm("before"))).status_code == 201
            await nats_server.stop()
            assert (await h.get("/readyz")).status_code == 503
            down = await h.post(VMS, json=vm("during"))
            assert down.status_code == 503, down.text
            await nats_server.start()
            for _ in range(100):
                if (await h.get("/readyz")).status_code == 200:
                    break
                await asyncio.sleep(0.2)
            assert (await h.get("/readyz")).status_code == 200
            assert (await h.post(VMS, json=vm("after"))).status_code == 201
            names = [o["metadata"]["name"] for o in (await h.get(VMS)).json()["items"]]
            assert names == ["after", "before"]  # the 503 was not stored
    finally:
        await nc.close()
        await nats_server.stop()


async def test_unknown_fields_with_any_characters_are_warned_in_a_valid_header(
    http: httpx.AsyncClient,
) -> None:
    body = vm("oddfields")
    body["spec"]["new\nline"] = 1
    body["spec"]["日本"] = 2
    body["spec"].update({f"f{i}": i for i in range(40)})
    r = await http.post(VMS, json=body)
    assert r.status_code == 201, r.text
    warning = r.headers["warning"]
    assert warning.isascii() and "\n" not in warning
    assert "\\u000a" in warning and "\\u65e5\\u672c" in warning
    assert "more unknown fields" in warning
