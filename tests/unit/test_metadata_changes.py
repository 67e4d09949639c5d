"""Metadata on every kind: a label, an annotation, a finalizer or an owner reference
changed by PUT, merge patch or JSON patch is one `MetadataChanged`, decided by the core
and folded into the object without touching its spec, status or generation; a changed
spec of an immutable kind is refused with its KubeVirt webhook's words."""

from __future__ import annotations

import itertools
import json
from typing import Any

import pytest

from core import commands
from core.commands import Request, Verb
from core.context import RequestContext
from core.errors import ApiError
from events.catalog import Event, MetadataChanged, VMUpdated
from events.envelope import Stored
from kinds.registry import REGISTRY
from projections.cluster import Cluster
from tests.factories import vm_manifest, vmi_manifest, with_namespaces

_ids = itertools.count(1)
_seq = itertools.count(1)
MERGE = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"


def ctx() -> RequestContext:
    return RequestContext(
        now=1000.0,
        correlation_id="req-1",
        new_id=lambda: f"{next(_ids):032x}",
        suffix=lambda: "abcde",
    )


def run(
    cluster: Cluster, verb: Verb, kind: str, name: str = "", body: Any = None, **kw: Any
) -> tuple[Event, ...]:
    """Decide a request and fold what it appends, as the api's projection would."""
    data = b"" if body is None else json.dumps(body).encode()
    req = Request(
        verb=verb, spec=REGISTRY.resource(kind), namespace="default", name=name, body=data, **kw
    )
    outcome = commands.decide(commands.decode(req), cluster, ctx(), REGISTRY.updatable)
    for append in outcome.appends:
        cluster.apply(Stored(seq=next(_seq), subject="", time=0.0, event=append.event))
    return tuple(a.event for a in outcome.appends)


def served(cluster: Cluster, kind: str, name: str) -> dict[str, Any]:
    spec = REGISTRY.resource(kind)
    found = REGISTRY.render_object(cluster, spec.event_kind, spec.key("default", name), 1000.0)
    assert found is not None
    return found


def migration(name: str, vmi: str) -> dict[str, Any]:
    return {
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachineInstanceMigration",
        "metadata": {"name": name},
        "spec": {"vmiName": vmi},
    }


def snapshot(name: str, vm: str) -> dict[str, Any]:
    return {
        "apiVersion": "snapshot.kubevirt.io/v1beta1",
        "kind": "VirtualMachineSnapshot",
        "metadata": {"name": name},
        "spec": {"source": {"apiGroup": "kubevirt.io", "kind": "VirtualMachine", "name": vm}},
    }


def test_a_label_on_a_vmi_is_a_metadata_change_that_leaves_its_spec_alone() -> None:
    c = with_namespaces()
    run(c, Verb.CREATE, "vmi", body=vmi_manifest("v1"))
    before = served(c, "vmi", "v1")
    patch = {"metadata": {"labels": {"foo": "bar"}, "annotations": {"note": "x"}}}
    (event,) = run(c, Verb.PATCH, "vmi", "v1", patch, content_type=MERGE)
    assert isinstance(event, MetadataChanged)
    assert event.metadata["labels"]["foo"] == "bar"
    after = served(c, "vmi", "v1")
    assert after["metadata"]["labels"]["foo"] == "bar"
    assert after["metadata"]["annotations"]["note"] == "x"
    assert after["spec"] == before["spec"] and after["status"] == before["status"]
    assert int(after["metadata"]["resourceVersion"]) > int(before["metadata"]["resourceVersion"])
    # the same label again changes nothing and appends nothing
    assert run(c, Verb.PATCH, "vmi", "v1", patch, content_type=MERGE) == ()
    # a label removed (null in a merge patch)
    run(c, Verb.PATCH, "vmi", "v1", {"metadata": {"labels": {"foo": None}}}, content_type=MERGE)
    assert "foo" not in (served(c, "vmi", "v1")["metadata"].get("labels") or {})


def test_a_changed_vmi_spec_is_refused_with_kubevirts_webhook_words() -> None:
    c = with_namespaces()
    run(c, Verb.CREATE, "vmi", body=vmi_manifest("v1"))
    patch = [{"op": "add", "path": "/spec/hostname", "value": "other"}]
    with pytest.raises(ApiError) as exc:
        run(c, Verb.PATCH, "vmi", "v1", patch, content_type=JSON_PATCH)
    assert exc.value.code == 422
    assert exc.value.status.message == (
        'admission webhook "virtualmachineinstances-update-validator.kubevirt.io" denied the '
        "request: update of VMI object is restricted"
    )


def test_a_put_of_a_migration_with_a_finalizer_and_an_owner_is_a_metadata_change() -> None:
    c = with_namespaces()
    run(c, Verb.CREATE, "vmi", body=vmi_manifest("v1"))
    run(c, Verb.CREATE, "vmim", body=migration("m1", "v1"))
    body = served(c, "vmim", "m1")
    owner = {"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance", "name": "v1",
             "uid": served(c, "vmi", "v1")["metadata"]["uid"]}  # fmt: skip
    body["metadata"]["finalizers"] = ["example.com/keep"]
    body["metadata"]["ownerReferences"] = [owner]
    (event,) = run(c, Verb.UPDATE, "vmim", "m1", body)
    assert isinstance(event, MetadataChanged)
    meta = served(c, "vmim", "m1")["metadata"]
    assert meta["finalizers"] == ["example.com/keep"] and meta["ownerReferences"] == [owner]
    body = served(c, "vmim", "m1")
    body["spec"]["vmiName"] = "other"
    with pytest.raises(ApiError) as exc:
        run(c, Verb.UPDATE, "vmim", "m1", body)
    assert "update of Migration object's spec is restricted" in exc.value.status.message


def test_a_snapshot_takes_a_label_by_json_patch_and_refuses_a_spec_change() -> None:
    c = with_namespaces()
    run(c, Verb.CREATE, "vm", body=vm_manifest("vm1", "Halted"))
    run(c, Verb.CREATE, "vmsnapshot", body=snapshot("s1", "vm1"))
    patch = [{"op": "add", "path": "/metadata/labels", "value": {"team": "a"}}]
    (event,) = run(c, Verb.PATCH, "vmsnapshot", "s1", patch, content_type=JSON_PATCH)
    assert isinstance(event, MetadataChanged)
    assert served(c, "vmsnapshot", "s1")["metadata"]["labels"] == {"team": "a"}
    patch = [{"op": "replace", "path": "/spec/source/name", "value": "vm2"}]
    with pytest.raises(ApiError) as exc:
        run(c, Verb.PATCH, "vmsnapshot", "s1", patch, content_type=JSON_PATCH)
    assert exc.value.code == 422
    assert exc.value.status.message.endswith("spec in immutable after creation")
    details = exc.value.status.details
    assert details is not None and details.causes
    assert details.causes[0].field == "spec"


def test_a_label_on_a_vm_keeps_its_generation_and_a_spec_change_moves_it() -> None:
    c = with_namespaces()
    run(c, Verb.CREATE, "vm", body=vm_manifest("vm1", "Halted"))
    (event,) = run(c, Verb.PATCH, "vm", "vm1", {"metadata": {"labels": {"a": "b"}}},
                   content_type=MERGE)  # fmt: skip
    assert isinstance(event, MetadataChanged)
    assert served(c, "vm", "vm1")["metadata"]["generation"] == 1
    (event,) = run(c, Verb.PATCH, "vm", "vm1", {"spec": {"runStrategy": "Always"}},
                   content_type=MERGE)  # fmt: skip
    assert isinstance(event, VMUpdated)
    meta = served(c, "vm", "vm1")["metadata"]
    assert meta["generation"] == 2 and meta["labels"] == {"a": "b"}


def test_a_metadata_change_records_its_field_manager() -> None:
    c = with_namespaces()
    run(c, Verb.CREATE, "vmi", body=vmi_manifest("v1"))
    run(c, Verb.PATCH, "vmi", "v1", {"metadata": {"labels": {"x": "y"}}}, content_type=MERGE,
        params={"fieldManager": "kubectl-label"})  # fmt: skip
    managers = served(c, "vmi", "v1")["metadata"]["managedFields"]
    mine = [m for m in managers if m["manager"] == "kubectl-label"]
    assert mine and "f:x" in mine[0]["fieldsV1"]["f:metadata"]["f:labels"]
