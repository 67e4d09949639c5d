"""kubectl's client-side apply (`client/apply.py`): the last-applied annotation as kubectl
writes it, and the three-way JSON merge patch (k8s.io/apimachinery's
CreateThreeWayJSONMergePatch) on plain data."""

from __future__ import annotations

import json
from typing import Any

from client.apply import LAST_APPLIED, go_json, merge_patch, modified, original, three_way

JSON = dict[str, Any]


def vm(**spec: Any) -> JSON:
    return {
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachine",
        "metadata": {"name": "vm-cirros", "labels": {"kubevirt.io/vm": "vm-cirros"}},
        "spec": {"runStrategy": "Halted", **spec},
    }


def test_the_annotation_is_written_as_kubectl_writes_it() -> None:
    out = modified(vm(), "default")
    text = out["metadata"]["annotations"][LAST_APPLIED]
    # what kubectl 1.33 wrote for the same manifest (sorted keys, an empty annotations
    # map, the namespace, a final newline)
    assert text == (
        '{"apiVersion":"kubevirt.io/v1","kind":"VirtualMachine","metadata":{"annotations":{},'
        '"labels":{"kubevirt.io/vm":"vm-cirros"},"name":"vm-cirros","namespace":"default"},'
        '"spec":{"runStrategy":"Halted"}}\n'
    )
    assert original(out) == json.loads(text)
    assert go_json({"a": "<b> & c", "é": 1}) == '{"a":"\\u003cb\\u003e \\u0026 c","é":1}\n'


def test_a_cluster_scoped_object_gets_no_namespace_and_an_old_annotation_is_replaced() -> None:
    doc = vm()
    doc["metadata"]["annotations"] = {LAST_APPLIED: "stale", "keep": "me"}
    out = modified(doc, None)
    assert "namespace" not in out["metadata"]
    recorded = json.loads(out["metadata"]["annotations"][LAST_APPLIED])
    assert recorded["metadata"]["annotations"] == {"keep": "me"}


def live(config: JSON, **changes: Any) -> JSON:
    """The object as served after `config` was applied, plus what others changed."""
    current = json.loads(json.dumps(config))
    current["metadata"] |= {"uid": "u", "resourceVersion": "7", "generation": 1}
    current["status"] = {"printableStatus": "Stopped"}
    for path, value in changes.items():
        node = current
        *parents, leaf = path.split("__")
        for p in parents:
            node = node.setdefault(p, {})
        node[leaf] = value
    return current


def test_unchanged_configuration_sends_nothing_whatever_others_added() -> None:
    config = modified(vm(), "default")
    current = live(config, metadata__labels={"kubevirt.io/vm": "vm-cirros", "tier": "web"})
    assert three_way(original(current), config, current) == {}


def test_a_field_the_configuration_names_ends_as_it_says() -> None:
    """As kubectl: `start` set runStrategy Always; the re-applied manifest says Halted."""
    config = modified(vm(), "default")
    current = live(config, spec__runStrategy="Always")
    assert three_way(original(current), config, current) == {"spec": {"runStrategy": "Halted"}}


def test_a_field_dropped_from_the_configuration_is_deleted_others_are_left() -> None:
    first = modified(vm(), "default")
    first["metadata"]["labels"]["extra"] = "x"
    first = modified(first, "default")
    current = live(first, metadata__labels={**first["metadata"]["labels"], "tier": "web"})
    second = modified(vm(), "default")
    patch = three_way(original(current), second, current)
    assert patch["metadata"]["labels"] == {"extra": None}
    assert set(patch["metadata"]) == {"labels", "annotations"}  # the new last-applied
    assert "spec" not in patch


def test_without_a_last_applied_configuration_nothing_is_deleted() -> None:
    config = modified(vm(), "default")
    created = vm()  # by a create, with no annotation
    created["metadata"]["namespace"] = "default"
    current = live(created, spec__template={"spec": {}})
    patch = three_way(original(current), config, current)
    assert patch == {"metadata": {"annotations": config["metadata"]["annotations"]}}


def test_lists_are_replaced_whole_and_empty_objects_are_values() -> None:
    assert merge_patch({"a": [1, 2]}, {"a": [2]}) == {"a": [2]}
    config = modified(vm(resources={}), "default")
    current = live(modified(vm(), "default"))  # no resources yet: the empty one is set
    assert three_way(original(current), config, current)["spec"] == {"resources": {}}
    # one that has some: an empty object in the configuration removes nothing (kubectl's)
    current = live(config, spec__resources={"requests": {"memory": "1Gi"}})
    assert "spec" not in three_way(original(current), config, current)
