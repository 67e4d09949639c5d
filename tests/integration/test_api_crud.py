"""The api's create/read/update/delete against a real nats-server."""

from __future__ import annotations

from typing import Any

import httpx
import yaml

from eventstore.jetstream import JetStreamStore
from tests.integration.test_api_support import running_api
from tests.unit.kubevirt_examples import example_documents

VMS = "/apis/kubevirt.io/v1/namespaces/default/virtualmachines"
PLURALS = {
    "VirtualMachine": "virtualmachines",
    "VirtualMachineInstance": "virtualmachineinstances",
    "VirtualMachineInstanceMigration": "virtualmachineinstancemigrations",
}


def vm(name: str = "vm1", run_strategy: str = "Manual", **extra: Any) -> dict[str, Any]:
    return {
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachine",
        "metadata": {"name": name, **extra},
        "spec": {
            "runStrategy": run_strategy,
            "template": {"spec": {"domain": {"memory": {"guest": "64Mi"}}}},
        },
    }


def url_for(doc: dict[str, Any], ns: str = "default") -> str:
    if doc["kind"] == "MigrationPolicy":
        return "/apis/migrations.kubevirt.io/v1alpha1/migrationpolicies"
    return f"/apis/kubevirt.io/v1/namespaces/{ns}/{PLURALS[doc['kind']]}"


async def test_every_example_is_accepted_with_defaults(http: httpx.AsyncClient) -> None:
    docs = example_documents()
    # migrations need their VMI first: create them last
    docs.sort(key=lambda d: d[1]["kind"] == "VirtualMachineInstanceMigration")
    for fname, doc in docs:
        doc = {**doc, "metadata": {**doc["metadata"], "annotations": {"x.io/unknown": "kept"}}}
        doc["spec"] = {**doc["spec"], "someUnknownField": {"a": 1}}
        r = await http.post(url_for(doc), json=doc)
        assert r.status_code == 201, (fname, r.text)
        body = r.json()
        assert body["metadata"]["uid"]
        assert body["metadata"]["resourceVersion"]
        assert body["spec"]["someUnknownField"] == {"a": 1}
        assert body["metadata"]["annotations"]["x.io/unknown"] == "kept"
        name = doc["metadata"]["name"]
        got = (await http.get(f"{url_for(doc)}/{name}")).json()
        assert got["metadata"]["uid"] == body["metadata"]["uid"]
        if doc["kind"] == "VirtualMachine":
            domain = got["spec"]["template"]["spec"]["domain"]
            assert domain["machine"] == {"type": "q35"}
            assert domain["cpu"]["model"] == "host-model"
            assert got["status"]["printableStatus"] == "Stopped"
        if doc["kind"] == "VirtualMachineInstance":
            assert got["spec"]["domain"]["firmware"]["uuid"]
            assert got["status"]["phase"] == "Pending"


async def test_create_conflict_and_generate_name(http: httpx.AsyncClient) -> None:
    assert (await http.post(VMS, json=vm())).status_code == 201
    r = await http.post(VMS, json=vm())
    assert r.status_code == 409
    body = r.json()
    assert body["kind"] == "Status" and body["reason"] == "AlreadyExists"
    assert body["message"] == 'virtualmachines.kubevirt.io "vm1" already exists'
    gen = vm("")
    gen["metadata"] = {"generateName": "web-"}
    r = await http.post(VMS, json=gen)
    assert r.status_code == 201
    assert r.json()["metadata"]["name"].startswith("web-")
    assert len(r.json()["metadata"]["name"]) == len("web-") + 5


async def test_yaml_body_and_list(http: httpx.AsyncClient) -> None:
    r = await http.post(
        VMS, content=yaml.safe_dump(vm("yml")), headers={"Content-Type": "application/yaml"}
    )
    assert r.status_code == 201, r.text
    r = await http.post(VMS, content=yaml.safe_dump(vm("sniffed")))  # no content type
    assert r.status_code == 201, r.text
    listing = (await http.get(VMS)).json()
    assert listing["kind"] == "VirtualMachineList"
    assert [i["metadata"]["name"] for i in listing["items"]] == ["sniffed", "yml"]
    assert int(listing["metadata"]["resourceVersion"]) >= 2
    everywhere = (await http.get("/apis/kubevirt.io/v1/virtualmachines")).json()
    assert len(everywhere["items"]) == 2
    assert (await http.get(f"{VMS}?labelSelector=app%3Dnone")).json()["items"] == []


async def test_validation_errors_append_nothing(
    http: httpx.AsyncClient, store: JetStreamStore
) -> None:
    before = await store.stream_last_seq()
    cases: list[tuple[dict[str, Any], str]] = [
        ({"runStrategy": None}, "RunStrategy must be specified"),
        ({"runStrategy": "Sometimes"}, "Invalid RunStrategy (Sometimes)"),
        ({"running": True}, "Running and RunStrategy are mutually exclusive"),
    ]
    for patch, message in cases:
        doc = vm("bad")
        doc["spec"] = {**doc["spec"], **patch}
        if doc["spec"]["runStrategy"] is None:
            del doc["spec"]["runStrategy"]
        r = await http.post(VMS, json=doc)
        assert r.status_code == 422, r.text
        body = r.json()
        assert body["reason"] == "Invalid" and message in body["message"]
        assert body["message"].startswith(
            'admission webhook "virtualmachine-validator.kubevirt.io"'
        )
        assert any(message in c["message"] for c in body["details"]["causes"])
    # no memory at all: the VMI webhook's rule alone (a VM's template may leave it out)
    nomem = {"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance",
             "metadata": {"name": "nomem"}, "spec": {"domain": {}}}  # fmt: skip
    r = await http.post(VMS.replace("virtualmachines", "virtualmachineinstances"), json=nomem)
    assert r.status_code == 422 and "no memory requested" in r.json()["message"]
    vmi = {
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachineInstance",
        "metadata": {"name": "v"},
        "spec": {
            "domain": {
                "memory": {"guest": "64Mi"},
                "devices": {"disks": [{"name": "nope", "disk": {"bus": "ide"}}]},
            }
        },
    }
    r = await http.post("/apis/kubevirt.io/v1/namespaces/default/virtualmachineinstances", json=vmi)
    assert r.status_code == 422
    assert "IDE bus is not supported" in r.json()["message"]
    assert "spec.domain.devices.disks[0].Name 'nope' not found." in r.json()["message"]
    mig = {
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachineInstanceMigration",
        "metadata": {"name": "m"},
        "spec": {"vmiName": "ghost"},
    }
    r = await http.post(
        "/apis/kubevirt.io/v1/namespaces/default/virtualmachineinstancemigrations", json=mig
    )
    assert r.status_code == 422
    assert 'the VMI "default/ghost" does not exist' in r.json()["message"]
    r = await http.post(VMS, content=b"{not json")
    assert r.status_code == 400 and r.json()["reason"] == "BadRequest"
    assert await store.stream_last_seq() == before


async def test_update_with_resource_version(http: httpx.AsyncClient) -> None:
    created = (await http.post(VMS, json=vm())).json()
    rv = created["metadata"]["resourceVersion"]
    doc = vm()
    doc["metadata"]["resourceVersion"] = rv
    doc["metadata"]["labels"] = {"tier": "a"}
    r = await http.put(f"{VMS}/vm1", json=doc)
    assert r.status_code == 200, r.text
    assert r.json()["metadata"]["labels"] == {"tier": "a"}
    # a custom resource's generation counts changes of its spec, not of its metadata
    assert r.json()["metadata"]["generation"] == 1
    doc["metadata"]["resourceVersion"] = r.json()["metadata"]["resourceVersion"]
    doc["spec"]["runStrategy"] = "Halted"
    r = await http.put(f"{VMS}/vm1", json=doc)
    assert r.status_code == 200, r.text
    assert r.json()["metadata"]["generation"] == 2
    r = await http.put(f"{VMS}/vm1", json=doc)  # the same, now stale, resourceVersion
    assert r.status_code == 409
    assert r.json()["message"] == (
        'Operation cannot be fulfilled on virtualmachines.kubevirt.io "vm1": the object has '
        "been modified; please apply your changes to the latest version and try again"
    )
    r = await http.put(f"{VMS}/ghost", json=vm("ghost"))
    assert r.status_code == 404
    assert r.json()["message"] == 'virtualmachines.kubevirt.io "ghost" not found'


async def test_delete_vm_and_404s(http: httpx.AsyncClient) -> None:
    await http.post(VMS, json=vm())
    r = await http.delete(f"{VMS}/vm1")
    assert r.status_code == 200, r.text
    assert (await http.get(f"{VMS}/vm1")).status_code == 404
    assert (await http.delete(f"{VMS}/vm1")).status_code == 404
    r = await http.get("/apis/kubevirt.io/v1/namespaces/default/bogus")
    assert r.status_code == 404 and r.json()["kind"] == "Status"


async def test_a_deleted_name_can_be_created_again(
    http: httpx.AsyncClient, store: JetStreamStore
) -> None:
    """The name's events stay in the log; a new object of that name continues them."""
    first = await http.post(VMS, json=vm("again"))
    assert first.status_code == 201, first.text
    assert (await http.delete(f"{VMS}/again")).status_code == 200
    assert (await http.get(f"{VMS}/again")).status_code == 404
    second = await http.post(VMS, json=vm("again"))
    assert second.status_code == 201, second.text
    assert second.json()["metadata"]["uid"] != first.json()["metadata"]["uid"]
    got = (await http.get(f"{VMS}/again")).json()
    assert got["metadata"]["uid"] == second.json()["metadata"]["uid"]
    # a create racing an existing object of the name is still refused
    assert (await http.post(VMS, json=vm("again"))).status_code == 409


async def test_ops_endpoints(http: httpx.AsyncClient) -> None:
    assert (await http.get("/healthz")).status_code == 200
    assert (await http.get("/readyz")).status_code == 200
    schema = (await http.get("/openapi.json")).json()
    assert schema["openapi"].startswith("3")
    assert any("virtualmachines" in p for p in schema["paths"])
    r = await http.get(VMS, headers={"X-Correlation-Id": "abc123"})
    assert r.headers["x-correlation-id"] == "abc123"
    metrics = (await http.get("/metrics")).text
    assert "virtstream_api_requests_total" in metrics


async def test_read_replica_refuses_writes(store: JetStreamStore) -> None:
    async with (
        running_api(store, read_only=True) as replica,
        httpx.AsyncClient(base_url=replica.url, headers=replica.headers) as client,
    ):
        r = await client.post(VMS, json=vm())
        assert r.status_code == 405 and r.json()["reason"] == "MethodNotAllowed"
        assert (await client.get(VMS)).status_code == 200


async def test_a_vmi_list_follows_every_event(http: httpx.AsyncClient) -> None:
    """The encoded list is kept per projection version: the next event shows in it."""
    vmis = "/apis/kubevirt.io/v1/namespaces/default/virtualmachineinstances"

    def vmi(name: str) -> dict[str, Any]:
        return {
            "apiVersion": "kubevirt.io/v1",
            "kind": "VirtualMachineInstance",
            "metadata": {"name": name},
            "spec": {"domain": {"memory": {"guest": "64Mi"}}},
        }

    assert (await http.post(vmis, json=vmi("first"))).status_code == 201
    once, again = (await http.get(vmis)), (await http.get(vmis))
    assert once.content == again.content
    assert [i["metadata"]["name"] for i in once.json()["items"]] == ["first"]
    assert (await http.post(vmis, json=vmi("second"))).status_code == 201
    listing = (await http.get(vmis)).json()
    assert [i["metadata"]["name"] for i in listing["items"]] == ["first", "second"]
    assert int(listing["metadata"]["resourceVersion"]) > int(
        once.json()["metadata"]["resourceVersion"]
    )
    assert (await http.delete(f"{vmis}/first")).status_code in (200, 202)
    after = (await http.get(vmis)).json()
    names = [i["metadata"]["name"] for i in after["items"]]
    assert names == ["second"] or after["items"][0]["metadata"].get("deletionTimestamp")
