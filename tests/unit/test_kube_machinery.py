"""The pure parts kubectl relies on: patches, printer-column cells, discovery documents."""

from __future__ import annotations

import pytest

from kinds import vm, vmi
from kinds.registry import REGISTRY
from services.api import discovery, patch, table
from services.api.errors import ApiError


def test_merge_patch_removes_nulls_and_replaces_lists() -> None:
    current = {"spec": {"a": 1, "b": [1, 2], "c": {"d": 1}}}
    raw = b'{"spec": {"a": null, "b": [3], "c": {"e": 2}}}'
    assert patch.apply(current, raw, patch.MERGE) == {"spec": {"b": [3], "c": {"d": 1, "e": 2}}}
    assert patch.apply(current, raw, patch.STRATEGIC) == patch.apply(current, raw, patch.MERGE)
    assert current == {"spec": {"a": 1, "b": [1, 2], "c": {"d": 1}}}  # untouched


def test_json_patch_and_its_errors() -> None:
    op = b'[{"op": "replace", "path": "/spec/runStrategy", "value": "Halted"}]'
    out = patch.apply({"spec": {"runStrategy": "Always"}}, op, patch.JSON_PATCH)
    assert out == {"spec": {"runStrategy": "Halted"}}
    with pytest.raises(ApiError) as missing:
        patch.apply({}, b'[{"op": "remove", "path": "/spec"}]', patch.JSON_PATCH)
    assert missing.value.code == 422
    with pytest.raises(ApiError) as unsupported:
        patch.apply({}, b"{}", "application/apply-patch+yaml")
    assert unsupported.value.code == 415


def test_a_patch_nested_too_deep_is_a_bad_request_not_a_crash() -> None:
    deep = b'{"a":' * 200_000 + b"1" + b"}" * 200_000
    with pytest.raises(ApiError) as err:
        patch.apply({}, deep, patch.MERGE)
    assert err.value.status.code == 400 and "nested deeper" in err.value.status.message


def test_table_cells_follow_kubevirts_printer_columns() -> None:
    obj = {
        "metadata": {"name": "v", "creationTimestamp": "2026-01-01T00:00:00Z"},
        "status": {
            "phase": "Running",
            "interfaces": [{"ipAddress": "10.0.0.2"}],
            "nodeName": "node-1",
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }
    doc = table.table(table.columns(vmi.SPEC), [obj])
    names = [c["name"] for c in doc["columnDefinitions"]]
    assert names == ["Name", "Age", "Phase", "IP", "NodeName", "Ready", "Live-Migratable", "Paused"]
    cells = doc["rows"][0]["cells"]
    assert cells[:6] == ["v", "2026-01-01T00:00:00Z", "Running", "10.0.0.2", "node-1", "True"]
    assert cells[6:] == [None, None]
    assert [c["priority"] for c in doc["columnDefinitions"]][-2:] == [1, 1]


def test_discovery_lists_kinds_and_subresources() -> None:
    kv = discovery.resource_list(REGISTRY, "kubevirt.io", "v1")
    assert kv is not None
    vms = next(r for r in kv["resources"] if r["name"] == vm.SPEC.plural)
    assert vms["shortNames"] == ["vm", "vms"] and "patch" in vms["verbs"]
    subs = discovery.resource_list(REGISTRY, "subresources.kubevirt.io", "v1")
    assert subs is not None
    assert "virtualmachines/start" in {r["name"] for r in subs["resources"]}
    assert discovery.wants_aggregated(discovery.AGGREGATED + ",application/json")
    assert not discovery.wants_aggregated("application/json")
    assert table.wants_table("application/json;as=Table;v=v1;g=meta.k8s.io,application/json")
