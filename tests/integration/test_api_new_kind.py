"""A new generic kind is one module (`tests/gadgets.py`: its object type and its registry entry)
plus that entry in a registry: nothing in events/, projections/ or the api names it, and
the api creates, gets, lists, updates, watches and deletes it against a real nats-server,
its events on its own subjects, its table from its printer columns."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
import pytest

from cli.tables import header_and_rows
from client.api import typed
from events.catalog import ResourceCreated, ResourceDeleted, ResourceUpdated
from events.meta import Aggregate
from eventstore.jetstream import JetStreamStore
from kinds.registry import REGISTRY
from readside.runner import ProjectionRunner
from tests import gadgets
from tests.integration.test_api_support import RunningApi, running_api

KINDS = REGISTRY.with_(gadgets.SPEC)
BASE = f"/apis/{gadgets.GROUP}/{gadgets.VERSION}"
GADGETS = f"{BASE}/namespaces/default/gadgets"
TABLE = "application/json;as=Table;v=v1;g=meta.k8s.io"


def gadget(name: str, color: str) -> dict[str, Any]:
    return {
        "apiVersion": f"{gadgets.GROUP}/{gadgets.VERSION}",
        "kind": "Gadget",
        "metadata": {"name": name},
        "spec": {"color": color},
    }


async def read_events(http: httpx.AsyncClient, url: str, n: int) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    async with http.stream("GET", url) as resp:
        assert resp.status_code == 200
        async for line in resp.aiter_lines():
            if line.strip():
                out.append(json.loads(line))
            if len(out) >= n:
                break
    return out


@pytest.fixture
async def api(store: JetStreamStore) -> Any:
    async with running_api(store, kinds=KINDS) as running:
        yield running


@pytest.fixture
async def http(api: RunningApi) -> Any:
    async with httpx.AsyncClient(
        base_url=api.url, timeout=10, headers=api.headers, verify=api.verify
    ) as client:
        yield client


def test_the_kind_is_only_its_module_and_entry() -> None:
    assert REGISTRY.get("gadgets") is None and KINDS.get("gd") is gadgets.SPEC
    assert KINDS.event_kinds[-1] == "gadget"  # a subject token no enum declares


async def test_create_get_list_update_watch_delete(
    api: RunningApi, http: httpx.AsyncClient, store: JetStreamStore
) -> None:
    created = await http.post(GADGETS, json=gadget("g1", "red"))
    assert created.status_code == 201, created.text
    body = created.json()
    assert body["kind"] == "Gadget" and body["spec"] == {"color": "red"}
    assert body["metadata"]["uid"] and body["metadata"]["namespace"] == "default"
    rv = body["metadata"]["resourceVersion"]

    got = await http.get(f"{GADGETS}/g1")
    assert got.status_code == 200 and got.json()["spec"]["color"] == "red"
    assert isinstance(typed(got.json(), KINDS), gadgets.Gadget)
    listed = (await http.get(GADGETS)).json()
    assert listed["kind"] == "GadgetList" and [i["metadata"]["name"] for i in listed["items"]] == [
        "g1"
    ]
    everywhere = (await http.get(f"{BASE}/gadgets")).json()
    assert everywhere["items"] == listed["items"]
    missing = await http.get(f"{GADGETS}/g2")
    assert missing.status_code == 404
    assert missing.json()["message"] == f'gadgets.{gadgets.GROUP} "g2" not found'
    duplicate = await http.post(GADGETS, json=gadget("g1", "blue"))
    assert duplicate.status_code == 409

    # kubectl's Table and virtstream get's rows, both from the printer columns
    table = (await http.get(GADGETS, headers={"Accept": TABLE})).json()
    assert [c["name"] for c in table["columnDefinitions"]] == ["Name", "Color", "Age"]
    assert table["rows"][0]["cells"][:2] == ["g1", "red"]
    rows = header_and_rows("gd", listed["items"], kinds=KINDS, now=0.0)
    assert rows[0] == ["NAME", "COLOR", "AGE"] and rows[1][:2] == ["g1", "red"]

    watching = asyncio.create_task(
        read_events(http, f"{GADGETS}?watch=true&resourceVersion={rv}", 3)
    )
    await asyncio.sleep(0.1)
    updated = await http.put(f"{GADGETS}/g1", json={**body, "spec": {"color": "blue"}})
    assert updated.status_code == 200, updated.text
    assert (await http.post(GADGETS, json=gadget("g2", "green"))).status_code == 201
    assert (await http.delete(f"{GADGETS}/g1")).status_code == 200
    events = await asyncio.wait_for(watching, 10)
    assert [(e["type"], e["object"]["metadata"]["name"]) for e in events] == [
        ("MODIFIED", "g1"),
        ("ADDED", "g2"),
        ("DELETED", "g1"),
    ]
    assert events[0]["object"]["spec"] == {"color": "blue"}
    assert (await http.get(f"{GADGETS}/g1")).status_code == 404

    # the log holds them as the generic events, on the kind's own subjects
    stored = await store.load(Aggregate("gadget", "default", "g1"))
    assert [type(s.event) for s in stored] == [ResourceCreated, ResourceUpdated, ResourceDeleted]
    assert stored[0].subject == "virt.gadget.default.g1.ResourceCreated._"

    # a fresh fold of the stream (another api, a restart) rebuilds the kind's views
    replica = ProjectionRunner(store, kinds=KINDS)
    await replica.start()
    try:
        assert await replica.wait_for(api.runner.last_seq)
        assert list(replica.cluster.table("gadget")) == ["default/g2"]
    finally:
        await replica.stop()
