"""Subresource preconditions (KubeVirt's 409s), races, and watches, with the VMI's state
driven by appending execution events directly (as the controller and handler would)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx

from events.catalog import (
    DomainPaused,
    DomainStarted,
    DomainStopped,
    Event,
    LauncherStarted,
    NodeJoined,
    PodScheduled,
    Resources,
    StopReason,
    VMICreated,
)
from events.meta import Kind
from tests.factories import meta
from tests.integration.test_api_crud import VMS, vm
from tests.integration.test_api_support import RunningApi

SUB = "/apis/subresources.kubevirt.io/v1/namespaces/default"
VMIS = "/apis/kubevirt.io/v1/namespaces/default/virtualmachineinstances"
MIGS = "/apis/kubevirt.io/v1/namespaces/default/virtualmachineinstancemigrations"


async def put(
    http: httpx.AsyncClient, path: str, body: dict[str, Any] | None = None
) -> httpx.Response:
    return await http.put(f"{SUB}/{path}", json=body or {})


async def append(api: RunningApi, *events: Event) -> None:
    seq = 0
    for ev in events:
        seq = (await api.store.append(ev)).seq
    assert await api.runner.wait_for(seq, 5)


async def run_vmi(api: RunningApi, name: str, owner_uid: str = "", paused: bool = False) -> None:
    """A VMI of `name` on node-1, Running (and maybe paused)."""
    manifest = {
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachineInstance",
        "metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}"},
        "spec": {"domain": {"memory": {"guest": "64Mi"}}},
    }
    m = lambda: meta(Kind.VMI, name, node="node-1")  # noqa: E731
    events: list[Event] = [
        VMICreated(meta=m(), manifest=manifest, owner_vm_uid=owner_uid),
        PodScheduled(
            meta=m(),
            node="node-1",
            pod_name=f"virt-launcher-{name}",
            pod_uid="p1",
            manifest=manifest,
        ),
        LauncherStarted(meta=m(), node="node-1", pod_uid="p1", pid=1),
        DomainStarted(meta=m(), node="node-1", domain=f"default_{name}"),
    ]
    if paused:
        events.append(DomainPaused(meta=m()))
    await append(api, *events)


def message(r: httpx.Response) -> str:
    return str(r.json()["message"])


async def create_vm(http: httpx.AsyncClient, name: str, strategy: str) -> dict[str, Any]:
    r = await http.post(VMS, json=vm(name, strategy))
    assert r.status_code == 201, r.text
    return dict(r.json())


async def test_start_preconditions(api: RunningApi, http: httpx.AsyncClient) -> None:
    await create_vm(http, "always", "Always")
    r = await put(http, "virtualmachines/always/start")
    assert r.status_code == 409
    assert message(r) == (
        'Operation cannot be fulfilled on virtualmachine.kubevirt.io "always": '
        "Always does not support manual start requests"
    )
    await create_vm(http, "manual", "Manual")
    assert (await put(http, "virtualmachines/manual/start")).status_code == 202
    r = await put(http, "virtualmachines/manual/start")
    assert r.status_code == 409 and message(r).endswith("stop/start already underway")
    owned = await create_vm(http, "running", "Manual")
    await run_vmi(api, "running", owned["metadata"]["uid"])
    r = await put(http, "virtualmachines/running/start")
    assert r.status_code == 409 and message(r).endswith("VM is already running")
    assert (await put(http, "virtualmachines/ghost/start")).status_code == 404


async def test_start_on_halted_switches_to_always(http: httpx.AsyncClient) -> None:
    await create_vm(http, "halted", "Halted")
    assert (await put(http, "virtualmachines/halted/start")).status_code == 202
    got = (await http.get(f"{VMS}/halted")).json()
    assert got["spec"]["runStrategy"] == "Always"


async def test_stop_and_restart_preconditions(api: RunningApi, http: httpx.AsyncClient) -> None:
    await create_vm(http, "idle", "Manual")
    r = await put(http, "virtualmachines/idle/stop")
    assert r.status_code == 409 and message(r).endswith(": VM is not running")
    r = await put(http, "virtualmachines/idle/restart")
    assert r.status_code == 409 and message(r).endswith("VM is not running: Halted")
    await create_vm(http, "halted", "Halted")
    r = await put(http, "virtualmachines/halted/restart")
    assert r.status_code == 409
    assert message(r).endswith("RunStategy Halted does not support manual restart requests")
    always = await create_vm(http, "always", "Always")
    await run_vmi(api, "always", always["metadata"]["uid"])
    assert (await put(http, "virtualmachines/always/stop", {"gracePeriod": 5})).status_code == 202
    got = (await http.get(f"{VMS}/always")).json()
    assert got["spec"]["runStrategy"] == "Halted"
    assert got["status"]["stateChangeRequests"][0]["action"] == "Stop"
    r = await put(http, "virtualmachines/always/stop")
    assert r.status_code == 409
    assert message(r).endswith(
        "Halted only supports manual stop requests with a shorter graceperiod"
    )


async def test_vmi_pause_unpause_softreboot(api: RunningApi, http: httpx.AsyncClient) -> None:
    r = await put(http, "virtualmachineinstances/ghost/pause")
    assert r.status_code == 404
    await run_vmi(api, "v1")
    r = await put(http, "virtualmachineinstances/v1/unpause")
    assert r.status_code == 409 and message(r).endswith("VMI is not paused")
    assert (await put(http, "virtualmachineinstances/v1/softreboot")).status_code == 200
    assert (await put(http, "virtualmachineinstances/v1/pause")).status_code == 200
    await append(api, DomainPaused(meta=meta(Kind.VMI, "v1", node="node-1")))
    r = await put(http, "virtualmachineinstances/v1/pause")
    assert r.status_code == 409 and message(r) == (
        'Operation cannot be fulfilled on virtualmachineinstance.kubevirt.io "v1": '
        "VMI is already paused"
    )
    r = await put(http, "virtualmachineinstances/v1/softreboot")
    assert r.status_code == 409 and message(r).endswith("VMI is paused")
    assert (await put(http, "virtualmachineinstances/v1/unpause")).status_code == 200
    # the pause request is routed to the VMI's node
    events = await api.store.load(meta(Kind.VMI, "v1").aggregate)
    routed = [s.subject for s in events if s.subject.split(".")[4].endswith("Requested")]
    assert routed and all(s.endswith(".node-1") for s in routed)
    await append(
        api, DomainStopped(meta=meta(Kind.VMI, "v1", node="node-1"), reason=StopReason.SHUTDOWN)
    )
    r = await put(http, "virtualmachineinstances/v1/pause")
    assert r.status_code == 409 and message(r).endswith("VM is not running")


async def test_migrate_and_migration_admission(api: RunningApi, http: httpx.AsyncClient) -> None:
    owned = await create_vm(http, "mig", "Manual")
    r = await put(http, "virtualmachines/mig/migrate")
    assert r.status_code == 409 and message(r).endswith("VM is not running")
    await run_vmi(api, "mig", owned["metadata"]["uid"])
    r = await put(http, "virtualmachines/mig/migrate", {"addedNodeSelector": {"zone": "b"}})
    assert r.status_code == 202, r.text
    created = r.json()
    assert created["metadata"]["name"].startswith("kubevirt-migrate-vm-")
    assert len(created["metadata"]["name"]) == len("kubevirt-migrate-vm-") + 5
    assert created["spec"]["addedNodeSelector"] == {"zone": "b"}
    r = await put(http, "virtualmachines/mig/migrate")
    assert r.status_code == 422
    assert message(r).endswith(
        f"in-flight migration detected. Active migration job ({created['metadata']['name']}) "
        "is currently already in progress for VMI mig."
    )
    # cancel = delete the migration
    r = await http.delete(f"{MIGS}/{created['metadata']['name']}")
    assert r.status_code == 200, r.text
    assert r.json()["status"]["migrationState"]["abortRequested"] is True
    await run_vmi(api, "done")
    await append(
        api, DomainStopped(meta=meta(Kind.VMI, "done", node="node-1"), reason=StopReason.SHUTDOWN)
    )
    doc = {
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachineInstanceMigration",
        "metadata": {"name": "m2"},
        "spec": {"vmiName": "done"},
    }
    r = await http.post(MIGS, json=doc)
    assert r.status_code == 422 and message(r).endswith("Cannot migrate VMI in finalized state.")


async def test_racing_requests_one_wins(api: RunningApi, http: httpx.AsyncClient) -> None:
    await create_vm(http, "race", "Manual")
    codes = sorted(
        r.status_code
        for r in await asyncio.gather(
            put(http, "virtualmachines/race/start"), put(http, "virtualmachines/race/start")
        )
    )
    assert codes == [202, 409]
    owned = await create_vm(http, "race2", "Manual")
    await run_vmi(api, "race2", owned["metadata"]["uid"])
    results = await asyncio.gather(
        put(http, "virtualmachines/race2/stop"), put(http, "virtualmachines/race2/stop")
    )
    assert sorted(r.status_code for r in results) == [202, 409]
    loser = next(r for r in results if r.status_code == 409)
    assert message(loser).endswith("stop/start already underway")


async def test_nodes(api: RunningApi, http: httpx.AsyncClient) -> None:
    r = await http.put("/apis/subresources.virtstream.io/v1/nodes/node-1/cordon")
    assert r.status_code == 404
    joined = NodeJoined(
        meta=meta(Kind.NODE, "node-1", "_"),
        node="node-1",
        capacity=Resources(cpu_millis=4000, memory_bytes=8 << 30),
    )
    await append(api, joined)
    listing = (await http.get("/api/v1/nodes")).json()
    assert listing["kind"] == "NodeList" and listing["items"][0]["metadata"]["name"] == "node-1"
    r = await http.put("/apis/subresources.virtstream.io/v1/nodes/node-1/cordon")
    assert r.status_code == 202 and r.json()["spec"]["unschedulable"] is True
    r = await http.put("/apis/subresources.virtstream.io/v1/nodes/node-1/cordon")
    assert r.status_code == 200
    r = await http.put("/apis/subresources.virtstream.io/v1/nodes/node-1/drain")
    assert r.status_code == 202 and r.json()["status"]["draining"] is True
    r = await http.put("/apis/subresources.virtstream.io/v1/nodes/node-1/uncordon")
    assert r.status_code == 202 and "unschedulable" not in r.json()["spec"]


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


async def test_watch_in_order_and_resume(api: RunningApi, http: httpx.AsyncClient) -> None:
    created = await create_vm(http, "w1", "Manual")
    rv0 = int(created["metadata"]["resourceVersion"])
    watching = asyncio.create_task(read_events(http, f"{VMS}?watch=true&resourceVersion={rv0}", 3))
    await asyncio.sleep(0.1)
    assert (await put(http, "virtualmachines/w1/start")).status_code == 202
    await create_vm(http, "w2", "Manual")
    assert (await http.delete(f"{VMS}/w2")).status_code == 200
    events = await asyncio.wait_for(watching, 10)
    assert [(e["type"], e["object"]["metadata"]["name"]) for e in events] == [
        ("MODIFIED", "w1"),
        ("ADDED", "w2"),
        ("DELETED", "w2"),
    ]
    rvs = [int(e["object"]["metadata"]["resourceVersion"]) for e in events]
    assert rvs == sorted(rvs) and rvs[0] > rv0
    # resume after the first: the other two again, nothing before
    resumed = await read_events(http, f"{VMS}?watch=true&resourceVersion={rvs[0]}", 2)
    assert [e["type"] for e in resumed] == ["ADDED", "DELETED"]
    # no resourceVersion: the current state as ADDED first
    initial = await read_events(http, f"{VMS}?watch=1", 1)
    assert initial[0]["type"] == "ADDED" and initial[0]["object"]["metadata"]["name"] == "w1"
    # selectors
    sel = await read_events(
        http, f"{VMS}?watch=true&resourceVersion={rv0}&fieldSelector=metadata.name%3Dw2", 1
    )
    assert sel[0]["object"]["metadata"]["name"] == "w2"


async def test_watch_too_old_resource_version(api: RunningApi, http: httpx.AsyncClient) -> None:
    await create_vm(http, "old", "Manual")
    await create_vm(http, "new", "Manual")
    api.runner.history_floor = api.runner.last_seq  # as if the history had rolled over
    events = await read_events(http, f"{VMS}?watch=true&resourceVersion=1", 1)
    assert events[0]["type"] == "ERROR"
    assert events[0]["object"]["code"] == 410
    assert events[0]["object"]["message"].startswith("too old resource version: 1")
