"""`?at=` on the status endpoints: any view as it was at a stream sequence or a time."""

from __future__ import annotations

import asyncio
import time

import httpx

from events.catalog import DomainPaused, DomainStarted, LauncherStarted, PodScheduled, VMICreated
from events.meta import Kind
from eventstore.jetstream import JetStreamStore
from tests.factories import meta
from tests.integration.test_api_crud import VMS, vm
from tests.integration.test_api_support import RunningApi

VMIS = "/apis/kubevirt.io/v1/namespaces/default/virtualmachineinstances"


async def test_at_shows_objects_as_they_were(api: RunningApi, store: JetStreamStore) -> None:
    async with httpx.AsyncClient(base_url=api.url, headers=api.headers) as http:
        r = await http.post(VMS, json=vm("tt", "Manual"))
        assert r.status_code == 201, r.text
        created_rv = int(r.json()["metadata"]["resourceVersion"])
        manifest = {
            "apiVersion": "kubevirt.io/v1",
            "kind": "VirtualMachineInstance",
            "metadata": {"name": "tt", "namespace": "default", "uid": "vmi-tt"},
            "spec": {},
        }
        uid = r.json()["metadata"]["uid"]
        await store.append(
            VMICreated(meta=meta(Kind.VMI, "tt"), manifest=manifest, owner_vm_uid=uid)
        )
        sched = await store.append(
            PodScheduled(
                meta=meta(Kind.VMI, "tt", node="n1"),
                node="n1",
                pod_name="p",
                pod_uid="pu",
                manifest=manifest,
            )
        )
        await asyncio.sleep(0.05)
        cut = time.time()
        await asyncio.sleep(0.05)
        await store.append(
            LauncherStarted(meta=meta(Kind.VMI, "tt"), node="n1", pod_uid="pu", pid=1)
        )
        await store.append(DomainStarted(meta=meta(Kind.VMI, "tt"), node="n1", domain="default_tt"))
        last = await store.append(DomainPaused(meta=meta(Kind.VMI, "tt")))
        await api.runner.wait_for(last.seq, 5)

        now = (await http.get(f"{VMS}/tt")).json()
        assert now["status"]["printableStatus"] == "Paused"

        at_create = (await http.get(f"{VMS}/tt", params={"at": str(created_rv)})).json()
        assert at_create["status"]["printableStatus"] == "Stopped"

        vmi_then = (await http.get(f"{VMIS}/tt", params={"at": str(sched.seq)})).json()
        assert vmi_then["status"]["phase"] == "Scheduling"
        assert vmi_then["status"]["nodeName"] == "n1"

        by_time = (await http.get(f"{VMIS}/tt", params={"at": f"@{cut}"})).json()
        assert by_time["status"]["phase"] == "Scheduling"

        listed = (await http.get(VMIS, params={"at": str(created_rv)})).json()
        assert listed["items"] == [] and listed["metadata"]["resourceVersion"] == str(created_rv)

        missing = await http.get(f"{VMIS}/tt", params={"at": str(created_rv)})
        assert missing.status_code == 404
        bad = await http.get(f"{VMS}/tt", params={"at": "yesterday-ish"})
        assert bad.status_code == 400 and bad.json()["kind"] == "Status"


async def test_cli_get_at(api: RunningApi) -> None:
    from typer.testing import CliRunner

    from cli.main import app

    async with httpx.AsyncClient(base_url=api.url, headers=api.headers) as http:
        r = await http.post(VMS, json=vm("cli-tt", "Manual"))
        rv = r.json()["metadata"]["resourceVersion"]
        await http.put(
            "/apis/subresources.kubevirt.io/v1/namespaces/default/virtualmachines/cli-tt/start",
            json={},
        )
    runner = CliRunner()
    result = await asyncio.to_thread(
        runner.invoke, app, ["--server", api.url, "get", "vms", "cli-tt", "--at", rv, "-o", "json"]
    )
    assert result.exit_code == 0, result.output
    assert '"stateChangeRequests"' not in result.output  # the start came later
    later = await asyncio.to_thread(
        runner.invoke, app, ["--server", api.url, "get", "vms", "cli-tt", "-o", "json"]
    )
    assert '"stateChangeRequests"' in later.output  # no controller here: still pending
