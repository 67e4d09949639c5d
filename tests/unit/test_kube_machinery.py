"""The pure parts kubectl relies on: patches, printer-column cells, discovery documents."""

from __future__ import annotations

import pytest

from core import delete_options, dryrun, field_manager, patch
from core.errors import ApiError
from kinds import vm, vmi
from kinds.registry import REGISTRY
from services.api import discovery, pagination, table


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


# ------------------------------------------------- field ownership and apply
def _apply(current: dict | None, config: dict, manager: str, force: bool = False) -> dict:
    res = vm.SPEC.resource
    return field_manager.apply(current, config, manager, force, 0.0, res, "v")


def _cfg(strategy: str, **labels: str) -> dict:
    meta: dict = {"name": "v", **({"labels": labels} if labels else {})}
    return {"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachine", "metadata": meta,
            "spec": {"runStrategy": strategy, "template": {}}}  # fmt: skip


def test_apply_conflicts_with_another_manager_unless_forced() -> None:
    first = _apply(None, _cfg("Halted"), "mgr")
    assert _apply(first, _cfg("Halted"), "other")["spec"]["runStrategy"] == "Halted"  # same value
    with pytest.raises(ApiError) as refused:
        _apply(first, _cfg("Manual"), "other")
    assert refused.value.code == 409
    assert refused.value.status.message == (
        'Apply failed with 1 conflict: conflict with "mgr" using kubevirt.io/v1: .spec.runStrategy'
    )
    forced = _apply(first, _cfg("Manual"), "other", force=True)
    owned = {e["manager"]: e["fieldsV1"] for e in forced["metadata"]["managedFields"]}
    assert owned["other"]["f:spec"] == {"f:runStrategy": {}, "f:template": {}}
    assert owned["mgr"]["f:spec"] == {"f:template": {}}


def test_apply_removes_what_it_no_longer_applies_and_a_repeat_changes_nothing() -> None:
    first = _apply(None, _cfg("Halted", a="1", b="2"), "mgr")
    again = _apply(first, _cfg("Halted", a="1", b="2"), "mgr")
    assert again == first
    fewer = _apply(first, _cfg("Halted", a="1"), "mgr")
    assert fewer["metadata"]["labels"] == {"a": "1"}


def test_an_update_owns_what_it_changed() -> None:
    first = _apply(None, _cfg("Halted"), "mgr")
    changed = {**first, "spec": {**first["spec"], "runStrategy": "Manual"}}
    out = field_manager.tracked_update("kubectl-edit")(first, changed, 5.0)
    owners = {(e["manager"], e["operation"]): e for e in out["metadata"]["managedFields"]}
    assert owners[("kubectl-edit", "Update")]["fieldsV1"] == {"f:spec": {"f:runStrategy": {}}}
    assert "f:runStrategy" not in owners[("mgr", "Apply")]["fieldsV1"]["f:spec"]
    same = field_manager.tracked_update("kubectl-edit")(out, out, 9.0)
    assert same == out  # nothing changed: no entry moves, the time stays


# ------------------------------------------------ pagination, dry run, tables
def test_pages_follow_the_key_order_and_expire() -> None:
    keyed = [(f"ns/{c}", {"n": c}) for c in "abcde"]
    first = pagination.page(keyed, 2, None, 10)
    assert [o["n"] for o in first.items] == ["a", "b"] and first.remaining == 3
    token = pagination.start({"continue": first.continue_token}, 12, 0)
    second = pagination.page(keyed, 2, token, 12)
    assert [o["n"] for o in second.items] == ["c", "d"] and second.resource_version == 10
    with pytest.raises(ApiError) as expired:
        pagination.start({"continue": first.continue_token}, 12, 11)
    assert expired.value.code == 410 and expired.value.status.reason == "Expired"
    with pytest.raises(ApiError) as garbled:
        pagination.start({"continue": "%%%"}, 12, 0)
    assert garbled.value.code == 400


def test_dry_run_values_and_ages() -> None:
    assert dryrun.requested({"dryRun": "All"}) and not dryrun.requested({})
    with pytest.raises(ApiError) as bad:
        dryrun.requested({"dryRun": "Some"})
    assert bad.value.code == 422
    ages = [table.human_duration(s) for s in (5, 150, 700, 3 * 3600 + 60, 50 * 3600, 9 * 86400)]
    assert ages == ["5s", "2m30s", "11m", "3h1m", "2d2h", "9d"]


def test_delete_options_policies() -> None:
    opts = delete_options.DeleteOptions.parse({}, {"preconditions": {"uid": "u"}})
    assert opts.uid == "u" and opts.resource_version is None
    with pytest.raises(ApiError) as orphan:
        delete_options.DeleteOptions.parse({"propagationPolicy": "Orphan"}, {})
    assert orphan.value.code == 422
