"""The pure parts of kubectl's edges: KubeVirt's descriptions on the served schemas, the
vendoring script's walk, patch media types and JSON-patch failures, the node table, the
protobuf OpenAPI v2 document."""

from __future__ import annotations

import json
from typing import Any

import pytest

from core import patch
from core.errors import ApiError
from kinds.registry import REGISTRY
from ops import vendor_descriptions
from services.api import descriptions, openapi_k8s, protowire, table

VM: dict[str, Any] = {"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachine",
                      "spec": {"runStrategy": "Halted"}}  # fmt: skip


def test_the_served_schemas_carry_kubevirts_descriptions() -> None:
    doc = openapi_k8s.v3_document(REGISTRY, "kubevirt.io", "v1")
    assert doc is not None
    schemas = doc["components"]["schemas"]
    spec = schemas["VirtualMachineSpec"]
    assert spec["description"].startswith("VirtualMachineSpec describes how the proper")
    assert spec["properties"]["runStrategy"]["description"].startswith(
        "Running state indicates the requested running state"
    )
    # a described reference keeps its type: the ref goes into allOf, as Kubernetes writes
    template = spec["properties"]["template"]
    assert template["description"] and template["allOf"][0]["$ref"].endswith("VMITemplateSpec")


def test_every_vendored_description_names_a_field_the_api_serves() -> None:
    """The data was made from these Structs: nothing in it is for a field that is gone
    (`python -m ops.vendor_descriptions` again when one is renamed)."""
    specs = [s for s in REGISTRY if s.group]
    ours = openapi_k8s.schemas(specs, openapi_k8s.V2_REF, describe=False)
    data = descriptions.vendored()
    roots = {s.object_type.__name__: f"{s.group}/{s.version}/{s.kind}" for s in specs}
    paired = descriptions.vendored_pairs(ours, roots, data)
    assert set(paired.values()) == set(data["definitions"])
    for mine, theirs in paired.items():
        assert set(data["definitions"][theirs]["properties"]) <= set(ours[mine]["properties"])


def test_the_vendoring_script_keeps_only_what_the_structs_have() -> None:
    swagger = {
        "paths": {
            "/apis/kubevirt.io/v1/namespaces/{namespace}/virtualmachines/{name}": {
                "get": {"responses": {"200": {"schema": {"$ref": "#/definitions/v1.VM"}}}}
            }
        },
        "definitions": {
            "v1.VM": {
                "description": "A VM.",
                "properties": {
                    "spec": {"description": "The spec.", "$ref": "#/definitions/v1.Spec"},
                    "nothingOfOurs": {"description": "dropped"},
                },
            },
            "v1.Spec": {"properties": {"runStrategy": {"description": "How it runs."}}},
            "v1.Unreached": {"description": "dropped"},
        },
    }
    out = vendor_descriptions.vendored(swagger, REGISTRY)
    assert out["roots"]["kubevirt.io/v1/VirtualMachine"] == "v1.VM"
    assert out["definitions"] == {
        "v1.Spec": {"description": "", "properties": {"runStrategy": ["How it runs.", ""]}},
        "v1.VM": {"description": "A VM.", "properties": {"spec": ["The spec.", "v1.Spec"]}},
    }


def test_strategic_merge_patch_is_refused_for_custom_resources_only() -> None:
    with pytest.raises(ApiError) as refused:
        patch.check_type(patch.STRATEGIC, strategic=False)
    assert refused.value.code == 415
    assert refused.value.status.message.endswith(
        "application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml"
    )
    assert patch.check_type(patch.STRATEGIC) == patch.STRATEGIC  # a node's


@pytest.mark.parametrize(
    ("body", "code", "message"),
    [
        (b'[{"op":"test","path":"/spec/runStrategy","value":"Always"}]', 422,
         "the server rejected our request due to an error in our request"),
        (b'[{"op":"remove","path":"/spec/nothing"}]', 422,
         "the server rejected our request due to an error in our request"),
        (b'[{"op":"frobnicate","path":"/spec"}]', 422,
         "the server rejected our request due to an error in our request"),
        (b'{"op":"test"}', 400,
         "json: cannot unmarshal object into Go value of type jsonpatch.Patch"),
        (b'["test"]', 400,
         "json: cannot unmarshal string into Go value of type jsonpatch.Operation"),
    ],
)  # fmt: skip
def test_json_patch_failures_in_the_api_servers_words(body: bytes, code: int, message: str) -> None:
    with pytest.raises(ApiError) as failed:
        patch.apply(VM, body, patch.JSON_PATCH, strategic=False)
    assert (failed.value.code, failed.value.status.message) == (code, message)


def test_too_many_json_patch_operations_is_413() -> None:
    ops = json.dumps([{"op": "test", "path": "/kind", "value": "VirtualMachine"}] * 10_001)
    with pytest.raises(ApiError) as failed:
        patch.apply(VM, ops.encode(), patch.JSON_PATCH, strategic=False)
    assert failed.value.code == 413
    assert failed.value.status.message.endswith("is 10000, got 10001")


def _node(ready: str, **spec: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": "n", "labels": {"node-role.kubernetes.io/worker": ""}},
        "spec": spec,
        "status": {
            "conditions": [{"type": "Ready", "status": ready}],
            "addresses": [{"type": "InternalIP", "address": "10.0.0.1"}],
        },
    }


def test_node_rows_are_the_api_servers() -> None:
    spec = REGISTRY.resource("nodes")
    doc = table.table(table.columns(spec), [_node("True"), _node("False", unschedulable=True)])
    names = [c["name"] for c in doc["columnDefinitions"]]
    assert names[:5] == ["Name", "Status", "Roles", "Age", "Version"]
    assert [c["priority"] for c in doc["columnDefinitions"][5:]] == [1] * 5
    first, second = (r["cells"] for r in doc["rows"])
    assert first[1:3] == ["Ready", "worker"]
    assert first[5:] == ["10.0.0.1", "<none>", "<unknown>", "<unknown>", "<unknown>"]
    assert second[1] == "NotReady,SchedulingDisabled"


def test_the_protobuf_openapi_v2_document_decodes() -> None:
    raw = protowire.openapi_v2("Kubernetes", "v1.33.0")
    fields = protowire.fields(raw)
    assert fields[1] == b"2.0"
    info = protowire.fields(fields[2])
    assert (info[1], info[2]) == (b"Kubernetes", b"v1.33.0")
