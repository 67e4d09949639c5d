"""Every version a kind is served in, on the api's application layer over an in-memory
log: a write in any served version is stored in the storage version and read back in
every other; discovery lists each version (preferred first) and marks the storage one;
OpenAPI has a document per version; a deprecated version answers with its warning."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from events.catalog import ResourceCreated
from events.meta import Aggregate
from eventstore.memory import MemoryLog
from kinds import preset, versions
from kinds.registry import REGISTRY, Registry
from kinds.spec import KindSpec, version_priority
from readside.runner import ProjectionRunner
from services.api.app import create_app
from services.api.service import ApiService

POOLS = "/apis/pool.kubevirt.io/{v}/namespaces/default/virtualmachinepools"
PRESETS = "/apis/kubevirt.io/{v}/namespaces/default/virtualmachineinstancepresets"
DOMAIN = {"memory": {"guest": "64Mi"}, "devices": {}}
PRESET_V1_WARNING = (
    '299 - "kubevirt.io/v1 VirtualMachineInstancePresets is now deprecated and will be '
    'removed in v2."'
)


@pytest.fixture(scope="module")
async def api() -> AsyncIterator[tuple[MemoryLog, httpx.AsyncClient]]:
    log = MemoryLog()
    runner = ProjectionRunner(log)
    await runner.start()
    service = ApiService(runner, log)
    await service.bootstrap()  # the system namespaces, as the api creates them at its start
    app: Any = create_app(service)
    try:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://api") as http:
            yield log, http
    finally:
        await runner.stop()


def _pool(name: str, version: str) -> dict[str, Any]:
    labels = {"kubevirt.io/vmpool": name}
    return {
        "apiVersion": f"pool.kubevirt.io/{version}",
        "kind": "VirtualMachinePool",
        "metadata": {"name": name},
        "spec": {
            "replicas": 0,
            "selector": {"matchLabels": labels},
            "virtualMachineTemplate": {
                "metadata": {"labels": labels},
                "spec": {"runStrategy": "Halted", "template": {"spec": {"domain": DOMAIN}}},
            },
        },
    }


async def _stored(log: MemoryLog, kind: str, name: str) -> dict[str, Any]:
    (created, *_) = await log.load(Aggregate(kind, "default", name))
    assert isinstance(created.event, ResourceCreated)
    return created.event.manifest


async def test_a_pool_written_in_v1alpha1_is_stored_in_v1beta1_and_read_in_both(
    api: tuple[MemoryLog, httpx.AsyncClient],
) -> None:
    log, http = api
    made = await http.post(POOLS.format(v="v1alpha1"), json=_pool("old", "v1alpha1"))
    assert made.status_code == 201, made.text
    assert made.json()["apiVersion"] == "pool.kubevirt.io/v1alpha1"
    assert (await _stored(log, "vmpool", "old"))["apiVersion"] == "pool.kubevirt.io/v1beta1"
    for version in ("v1alpha1", "v1beta1"):
        got = (await http.get(f"{POOLS.format(v=version)}/old")).json()
        assert got["apiVersion"] == f"pool.kubevirt.io/{version}"
        assert got["spec"] == made.json()["spec"]
        listed = (await http.get(POOLS.format(v=version))).json()
        assert listed["apiVersion"] == f"pool.kubevirt.io/{version}"
        assert {i["apiVersion"] for i in listed["items"]} == {f"pool.kubevirt.io/{version}"}
    # a patch in the other version answers in it; the object is one
    patched = await http.patch(
        f"{POOLS.format(v='v1beta1')}/old",
        json={"metadata": {"labels": {"a": "b"}}},
        headers={"content-type": "application/merge-patch+json"},
    )
    assert patched.status_code == 200, patched.text
    assert patched.json()["apiVersion"] == "pool.kubevirt.io/v1beta1"
    old = (await http.get(f"{POOLS.format(v='v1alpha1')}/old")).json()
    assert old["metadata"]["labels"] == {"a": "b"}
    # deleted in either
    gone = await http.delete(f"{POOLS.format(v='v1alpha1')}/old")
    assert gone.status_code == 200, gone.text
    assert (await http.get(f"{POOLS.format(v='v1beta1')}/old")).status_code == 404


async def test_discovery_lists_every_version_preferred_first_and_marks_storage(
    api: tuple[MemoryLog, httpx.AsyncClient],
) -> None:
    _, http = api
    group = (await http.get("/apis/pool.kubevirt.io")).json()
    assert [v["version"] for v in group["versions"]] == ["v1beta1", "v1alpha1"]
    assert group["preferredVersion"]["version"] == "v1beta1"
    hashes = set()
    for version in ("v1beta1", "v1alpha1"):
        listed = (await http.get(f"/apis/pool.kubevirt.io/{version}")).json()
        (pool,) = [r for r in listed["resources"] if r["name"] == "virtualmachinepools"]
        hashes.add(pool["storageVersionHash"])
    assert len(hashes) == 1  # one storage version, whichever version lists it
    accept = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"
    groups = (await http.get("/apis", headers={"accept": accept})).json()["items"]
    by_name = {g["metadata"]["name"]: [v["version"] for v in g["versions"]] for g in groups}
    assert by_name["kubevirt.io"] == ["v1", "v1alpha3"]
    assert by_name["subresources.kubevirt.io"] == ["v1", "v1alpha3"]
    assert by_name["snapshot.kubevirt.io"] == ["v1beta1", "v1alpha1"]
    assert by_name["clone.kubevirt.io"] == ["v1beta1", "v1alpha1"]
    assert by_name["instancetype.kubevirt.io"] == ["v1beta1"]
    assert by_name["migrations.kubevirt.io"] == ["v1alpha1"]


async def test_openapi_has_a_document_for_each_version(
    api: tuple[MemoryLog, httpx.AsyncClient],
) -> None:
    _, http = api
    index = (await http.get("/openapi/v3")).json()["paths"]
    assert {"apis/pool.kubevirt.io/v1alpha1", "apis/pool.kubevirt.io/v1beta1"} <= set(index)
    doc = (await http.get("/openapi/v3/apis/pool.kubevirt.io/v1alpha1")).json()
    gvks = doc["components"]["schemas"]["VirtualMachinePool"]["x-kubernetes-group-version-kind"]
    assert gvks == [
        {"group": "pool.kubevirt.io", "version": "v1alpha1", "kind": "VirtualMachinePool"}
    ]
    assert (await http.get("/openapi.json")).status_code == 200  # the app's own, too
    v2 = (await http.get("/openapi/v2")).json()["definitions"]["VirtualMachinePool"]
    versions_ = [g["version"] for g in v2["x-kubernetes-group-version-kind"]]
    assert versions_ == ["v1beta1", "v1alpha1"]


async def test_a_preset_is_answered_with_kubevirts_deprecation_warning(
    api: tuple[MemoryLog, httpx.AsyncClient],
) -> None:
    log, http = api
    body = {
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachineInstancePreset",
        "metadata": {"name": "small"},
        "spec": {"selector": {"matchLabels": {"a": "b"}}, "domain": {"memory": {"guest": "1Gi"}}},
    }
    made = await http.post(PRESETS.format(v="v1"), json=body)
    assert made.status_code == 201, made.text
    assert made.headers["warning"] == PRESET_V1_WARNING
    assert (await _stored(log, preset.KIND_TOKEN, "small"))["apiVersion"] == "kubevirt.io/v1alpha3"
    listed = await http.get(PRESETS.format(v="v1alpha3"))
    assert listed.headers["warning"] == (
        '299 - "kubevirt.io/v1alpha3 VirtualMachineInstancePresets is now deprecated and '
        'will be removed in v2."'
    )
    assert [i["metadata"]["name"] for i in listed.json()["items"]] == ["small"]
    # a refusal is warned of too
    no_domain = {**body, "metadata": {"name": "bad"}, "spec": {"selector": {}}}
    refused = await http.post(PRESETS.format(v="v1"), json=no_domain)
    assert refused.status_code == 422
    assert refused.json()["details"]["causes"][0] == {
        "reason": "FieldValueRequired",
        "message": "missing domain.",
        "field": "spec.domain",
    }
    assert refused.headers["warning"] == PRESET_V1_WARNING
    # kubevirt.io/v1alpha3 of the other kinds is deprecated, v1 is not
    old = await http.get("/apis/kubevirt.io/v1alpha3/namespaces/default/virtualmachines")
    assert old.headers["warning"] == (
        '299 - "kubevirt.io/v1alpha3 is now deprecated and will be removed in a future release."'
    )
    assert "warning" not in (await http.get("/apis/kubevirt.io/v1/virtualmachines")).headers


def test_versions_are_in_kubernetes_order() -> None:
    names = ["v1alpha1", "v2", "v1beta2", "v1", "v1beta1", "v1alpha3", "other"]
    assert sorted(names, key=version_priority) == [
        "v2", "v1", "v1beta2", "v1beta1", "v1alpha3", "v1alpha1", "other",
    ]  # fmt: skip


def test_a_kind_is_registered_in_its_storage_version() -> None:
    pool: KindSpec = REGISTRY.resource("vmpool")
    assert pool.version == pool.storage_version == "v1beta1"
    assert [v.name for v in pool.served] == ["v1beta1", "v1alpha1"]
    assert [s.version for s in REGISTRY.served if s.kind == "VirtualMachinePool"] == [
        "v1beta1",
        "v1alpha1",
    ]
    stored_elsewhere = pool.__class__(
        **{f: getattr(pool, f) for f in pool.__struct_fields__} | {"version": "v1alpha1"}
    )
    with pytest.raises(ValueError, match="must be its one storage version"):
        Registry((stored_elsewhere,))
    assert versions.PRESET[1].storage and REGISTRY.resource("vmipreset").version == "v1alpha3"
