"""The registry of kinds: the real kinds are what every surface serves, and a kind
registered through the registry alone (no other module edited) appears in the api's
routes and answers requests, in the client's paths and in the CLI's tables, without
changing what the default registry gives the other tests."""

from __future__ import annotations

import json
from typing import Any, cast

import msgspec
import pytest
from litestar.testing import TestClient

from cli.tables import WatchPrinter, has_table, header_and_rows, render
from client.api import _Requests, resource, typed
from core.context import Outcome, RequestContext
from core.errors import conflict
from core.kind import CallArgs, Subresource
from events.catalog import ResourceCreated, VMICreated
from events.envelope import Stored
from events.meta import CLUSTER_SCOPED, Kind, ResourceKind, own_kind
from events.objects import VirtualMachineInstance
from kinds import columns as col
from kinds import configmap, nad, pod, preset, service
from kinds.registry import REGISTRY, Registry
from kinds.spec import Column, KindSpec, PrinterColumn, Scope
from projections import kube_events
from projections.cluster import Cluster
from projections.render import render_view
from projections.views import VMIView
from readside.runner import ProjectionRunner
from services.api.app import create_app
from services.api.service import ApiService
from tests import gadgets
from tests.factories import meta

JSON = dict[str, Any]
GROUP = "toys.virtstream.io"


def vmi_manifest(name: str) -> JSON:
    return {
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachineInstance",
        "metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}"},
        "spec": {},
    }


def _poke(c: Cluster, ns: str, name: str, _: CallArgs, __: RequestContext) -> Outcome:
    raise conflict(TOY.subresource_resource, name, "toys cannot be poked")


def _render_toy(_: Cluster, vmi: VMIView, __: float) -> JSON:
    return {
        "apiVersion": f"{GROUP}/v1alpha1",
        "kind": "Toy",
        "metadata": {"name": vmi.name, "namespace": vmi.namespace},
        "status": {"phase": vmi.phase},
    }


# A read-only view of the VMIs in another group: a second kind over an existing aggregate.
TOY = KindSpec(
    group=GROUP,
    version="v1alpha1",
    kind="Toy",
    plural="toys",
    singular="toy",
    short_names=("ty",),
    verbs=("get", "list"),
    event_kind=Kind.VMI,
    object_type=VirtualMachineInstance,
    subresource_group=f"subresources.{GROUP}",
    subresources=(Subresource("poke", _poke),),
    printer_columns=(PrinterColumn("Phase", "string", ".status.phase"),),
    columns=(
        col.NAME,
        Column("PHASE", lambda o, _: str(col.status(o).get("phase", ""))),
        Column("TOY", lambda _, __: "yes", wide=True),
    ),
    table=lambda c: c.vmis,
    render=_render_toy,
)


def _paths(kinds: Registry) -> set[str]:
    app = create_app(ApiService(cast(Any, None), None, kinds))
    return {r.path for r in app.routes}


# ------------------------------------------------------------ the real kinds
def test_every_aggregate_kind_has_one_registered_kind() -> None:
    derived = [s for s in REGISTRY if s.event_kind == kube_events.KIND]
    assert [(s.group, s.kind) for s in derived] == [("", "Event"), ("events.k8s.io", "Event")]
    views = [
        pod.SPEC,
        service.ENDPOINTS,
        service.ENDPOINT_SLICES,
    ]  # other kinds' aggregates, rendered on read
    assert [s.event_kind for s in REGISTRY if s not in derived and s not in views] == [
        *Kind,
        *ResourceKind,
        preset.KIND_TOKEN,
        service.KIND,
        nad.KIND_TOKEN,
        configmap.KIND_TOKEN,
    ]
    assert REGISTRY.event_kinds == (
        *Kind,
        *ResourceKind,
        preset.KIND_TOKEN,
        kube_events.KIND,
        service.KIND,
        nad.KIND_TOKEN,
        configmap.KIND_TOKEN,
    )
    assert REGISTRY.of(kube_events.KIND) is derived[0]  # core/v1 is what watches follow
    for spec in REGISTRY:
        assert REGISTRY.of(spec.event_kind) is spec or spec is derived[1] or spec in views
        if own_kind(spec.event_kind) is not None:
            assert (spec.scope is Scope.CLUSTER) == (spec.event_kind in CLUSTER_SCOPED)
        assert REGISTRY.types[(spec.group, spec.kind)] is spec.object_type
        if "create" in spec.verbs:
            assert spec.created is not None
        if "delete" in spec.verbs:
            assert spec.delete is not None


def test_registry_names_are_the_ones_users_type() -> None:
    for name, kind in (
        ("vm", "VirtualMachine"),
        ("VMs", "VirtualMachine"),
        ("VirtualMachine", "VirtualMachine"),
        ("vmis", "VirtualMachineInstance"),
        ("vmim", "VirtualMachineInstanceMigration"),
        ("migrations", "VirtualMachineInstanceMigration"),
        ("no", "Node"),
        ("policy", "MigrationPolicy"),
        ("migrationpolicies", "MigrationPolicy"),
    ):
        assert REGISTRY.resource(name).kind == kind
    with pytest.raises(ValueError, match='the server doesn\'t have a resource type "deploy"'):
        REGISTRY.resource("deploy")
    assert str(REGISTRY.resource("vmi").resource) == "virtualmachineinstances.kubevirt.io"
    assert str(REGISTRY.resource("nodes").resource) == "nodes"
    assert REGISTRY.updatable == (
        "virtualmachines",
        "migrationpolicies",
        "virtualmachineinstancetypes",
        "virtualmachineclusterinstancetypes",
        "virtualmachinepreferences",
        "virtualmachineclusterpreferences",
        "virtualmachineinstancereplicasets",
        "virtualmachinepools",
        "namespaces",
        "virtualmachineclones",
        "secrets",
        "storageclasses",
        "persistentvolumes",
        "persistentvolumeclaims",
        "datasources",
        "virtualmachineinstancepresets",
        "services",
        "network-attachment-definitions",
        "configmaps",
    )


def test_kubevirt_printer_columns() -> None:
    vmi = REGISTRY.resource("vmi").printer_columns
    assert [(c.name, c.priority) for c in vmi] == [
        ("Age", 0),
        ("Phase", 0),
        ("IP", 0),
        ("NodeName", 0),
        ("Ready", 0),
        ("Live-Migratable", 1),
        ("Paused", 1),
    ]
    assert [c.name for c in REGISTRY.resource("vm").printer_columns] == ["Age", "Status", "Ready"]
    assert [c.json_path for c in REGISTRY.resource("vmim").printer_columns] == [
        ".status.phase",
        ".spec.vmiName",
    ]


def test_the_kinds_evolve_and_render_as_the_cluster_folds() -> None:
    stored = Stored(
        seq=1,
        subject="",
        time=0.0,
        event=VMICreated(meta=meta(Kind.VMI, "a"), manifest=vmi_manifest("a")),
    )
    cluster = Cluster()
    cluster.apply(stored)
    spec = REGISTRY.of(Kind.VMI)
    assert spec.evolve is not None
    assert spec.table(cluster)["default/a"] == spec.evolve(None, stored)
    view = spec.table(cluster)["default/a"]
    assert spec.render(cluster, view, 5.0) == render_view(cluster, Kind.VMI, view, 5.0)


def test_default_routes_are_kubevirts() -> None:
    paths = _paths(REGISTRY)
    assert {
        "/apis/kubevirt.io/v1/namespaces/{ns:str}/virtualmachines",
        "/apis/kubevirt.io/v1/namespaces/{ns:str}/virtualmachines/{name:str}",
        "/apis/kubevirt.io/v1/virtualmachineinstances",
        "/apis/subresources.kubevirt.io/v1/namespaces/{ns:str}/virtualmachines/{name:str}/{action:str}",
        "/apis/migrations.kubevirt.io/v1alpha1/migrationpolicies/{name:str}",
        "/api/v1/nodes/{name:str}",
        "/apis/subresources.virtstream.io/v1/nodes/{name:str}/{action:str}",
    } <= paths
    assert not any("toys" in p for p in paths)


# ----------------------------------------------------------------- a toy kind
def test_a_registered_kind_gets_routes() -> None:
    kinds = REGISTRY.with_(TOY)
    added = _paths(kinds) - _paths(REGISTRY)
    assert added == {
        f"/apis/{GROUP}/v1alpha1/namespaces/{{ns:str}}/toys",
        f"/apis/{GROUP}/v1alpha1/namespaces/{{ns:str}}/toys/{{name:str}}",
        f"/apis/{GROUP}/v1alpha1/namespaces/{{ns:str}}/toys/{{name:str}}/status",
        f"/apis/{GROUP}/v1alpha1/toys",
        f"/apis/subresources.{GROUP}/v1alpha1/namespaces/{{ns:str}}/toys/{{name:str}}/{{action:str}}",
        # Kubernetes discovery and OpenAPI of the new groups
        f"/apis/{GROUP}",
        f"/apis/{GROUP}/v1alpha1",
        f"/apis/subresources.{GROUP}",
        f"/apis/subresources.{GROUP}/v1alpha1",
        f"/openapi/v3/apis/{GROUP}/v1alpha1",
    }
    assert REGISTRY.get("toys") is None  # the default registry is untouched


def test_a_registered_kind_answers_requests() -> None:
    kinds = REGISTRY.with_(TOY)
    runner = ProjectionRunner(cast(Any, None), kinds=kinds)
    event = VMICreated(meta=meta(Kind.VMI, "a"), manifest=vmi_manifest("a"))
    runner.fold(Stored(seq=1, subject="", time=0.0, event=event))
    base = f"/apis/{GROUP}/v1alpha1"
    with TestClient(app=create_app(ApiService(runner, None, kinds))) as http:
        listed = http.get(f"{base}/namespaces/default/toys").json()
        assert listed["kind"] == "ToyList" and listed["apiVersion"] == f"{GROUP}/v1alpha1"
        assert listed["items"] == [_render_toy(runner.cluster, runner.cluster.vmis["default/a"], 0)]
        assert http.get(f"{base}/toys").json()["items"] == listed["items"]
        assert http.get(f"{base}/namespaces/default/toys/a").json()["kind"] == "Toy"
        missing = http.get(f"{base}/namespaces/default/toys/b")
        assert missing.status_code == 404
        assert missing.json()["message"] == f'toys.{GROUP} "b" not found'
        # not a verb of the kind: the method is not served
        assert http.post(f"{base}/namespaces/default/toys", json={}).status_code == 405
        assert http.get(f"{base}/namespaces/default/toys?watch=true").status_code == 405
        # the real VMIs still render as VMIs
        vmi = http.get("/apis/kubevirt.io/v1/namespaces/default/virtualmachineinstances/a")
        assert vmi.json()["kind"] == "VirtualMachineInstance"


def test_a_registered_kind_is_in_the_clients_table() -> None:
    kinds = REGISTRY.with_(TOY)
    r = _Requests("default", kinds)
    assert r.collection("ty", None, False) == f"/apis/{GROUP}/v1alpha1/namespaces/default/toys"
    assert r.collection("toys", None, True) == f"/apis/{GROUP}/v1alpha1/toys"
    assert r.item("Toy", "a", "ns1") == f"/apis/{GROUP}/v1alpha1/namespaces/ns1/toys/a"
    assert r.sub("toy", "a", "poke") == (
        f"/apis/subresources.{GROUP}/v1alpha1/namespaces/default/toys/a/poke"
    )
    doc = {"apiVersion": f"{GROUP}/v1alpha1", "kind": "Toy", "metadata": {"name": "a"}}
    assert r.object_target(doc, None)[1] == f"/apis/{GROUP}/v1alpha1/namespaces/default/toys/a"
    assert isinstance(typed(doc, kinds), VirtualMachineInstance)
    assert typed(doc) == doc  # unknown to the default registry: stays a dict
    with pytest.raises(ValueError):
        resource("toys")


def test_a_registered_kind_is_in_the_clis_tables() -> None:
    kinds = REGISTRY.with_(TOY)
    objs = [{"metadata": {"name": "a", "namespace": "ns1"}, "status": {"phase": "Running"}}]
    assert has_table("toys", kinds) and not has_table("toys")
    assert render(header_and_rows("ty", objs, kinds=kinds)) == "NAME   PHASE\na      Running"
    wide = header_and_rows("Toy", objs, namespace_column=True, wide=True, kinds=kinds)
    assert render(wide) == "NAMESPACE   NAME   PHASE     TOY\nns1         a      Running   yes"


def test_cli_tables_are_unchanged_for_the_real_kinds() -> None:
    vm = {
        "metadata": {"name": "vm1", "namespace": "default"},
        "status": {
            "printableStatus": "Running",
            "ready": True,
            "runStrategy": "Always",
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }
    lines = header_and_rows("VirtualMachine", [vm], namespace_column=True, wide=True)
    assert lines == [
        ["NAMESPACE", "NAME", "AGE", "STATUS", "READY", "RUNSTRATEGY"],
        ["default", "vm1", "<unknown>", "Running", "True", "Always"],
    ]
    vmi = {
        "metadata": {"name": "vmi1", "namespace": "default"},
        "status": {
            "phase": "Running",
            "nodeName": "node-1",
            "interfaces": [{"name": "default", "ipAddress": "10.244.1.5"}],
            "conditions": [
                {"type": "Ready", "status": "True"},
                {"type": "LiveMigratable", "status": "False"},
            ],
        },
    }
    # what `kubectl get vmi -o wide` shows for KubeVirt: no Paused condition, an empty cell
    assert header_and_rows("VirtualMachineInstance", [vmi], wide=True) == [
        ["NAME", "AGE", "PHASE", "IP", "NODENAME", "READY", "LIVE-MIGRATABLE", "PAUSED"],
        ["vmi1", "<unknown>", "Running", "10.244.1.5", "node-1", "True", "False", ""],
    ]
    assert len(header_and_rows("VirtualMachineInstance", [vmi])[0]) == 6
    node = {
        "metadata": {"name": "n1"},
        "status": {
            "conditions": [{"type": "Ready", "status": "True"}],
            "schedulable": False,
            "allocated": {"vmis": 2, "cpu": "2", "memory": "1Gi"},
            "capacity": {"cpu": "4", "memory": "8Gi"},
        },
    }
    assert header_and_rows("nodes", [node])[1] == [
        "n1",
        "Ready,SchedulingDisabled",
        "2",
        "2/4",
        "1Gi/8Gi",
        "<unknown>",
    ]
    assert json.dumps(header_and_rows("vmim", [])) == '[["NAME", "PHASE", "VMI"]]'


def test_cli_tables_are_the_printer_columns_as_kubectl_prints_them() -> None:
    """NAME, then each printer column upper-cased: a date as an age, a boolean as
    `true`, a missing value blank; priority columns only with `-o wide`."""
    now = 1_700_000_000.0
    snap = {
        "metadata": {"name": "s1", "creationTimestamp": "2023-11-14T22:13:20Z"},
        "spec": {"source": {"kind": "VirtualMachine", "name": "vm1"}},
        "status": {
            "phase": "Succeeded",
            "readyToUse": True,
            "creationTime": "2023-11-14T22:12:20Z",
        },
    }
    assert header_and_rows("vmsnapshot", [snap], now=now) == [
        ["NAME", "SOURCEKIND", "SOURCENAME", "PHASE", "READYTOUSE", "CREATIONTIME", "ERROR"],
        ["s1", "VirtualMachine", "vm1", "Succeeded", "true", "60s", ""],
    ]
    vmi = {
        "metadata": {"name": "a", "creationTimestamp": "2023-11-14T19:13:20Z"},
        "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]},
    }
    assert header_and_rows("vmi", [vmi], now=now)[1] == ["a", "3h", "Running", "", "", "True"]
    assert header_and_rows("vmi", [vmi], now=now, wide=True)[0][-2:] == [
        "LIVE-MIGRATABLE",
        "PAUSED",
    ]
    # no printer columns: the API server's default, an age
    assert header_and_rows("policy", [])[0] == ["NAME", "AGE"]
    spec = REGISTRY.resource("vmirs")
    assert [c.header for c in spec.table_columns] == ["NAME", "DESIRED", "CURRENT", "READY", "AGE"]


def test_a_watch_prints_no_row_when_only_an_age_moved() -> None:
    out: list[str] = []
    clock = [1_700_000_000.0]
    printer = WatchPrinter(
        "vmsnapshot", namespace_column=False, wide=False, out=out.append, clock=lambda: clock[0]
    )
    snap = {
        "metadata": {"name": "s1", "creationTimestamp": "2023-11-14T22:13:20Z"},
        "status": {"phase": "InProgress", "creationTime": "2023-11-14T22:12:20Z"},
    }
    printer.start([snap])
    assert out[-1].split()[-1] == "60s"
    clock[0] += 600  # CREATIONTIME is now 11m: an age, not news
    printer.row(snap)
    assert len(out) == 2
    printer.row({**snap, "status": {**snap["status"], "phase": "Succeeded"}})
    assert len(out) == 3 and out[-1].split()[1:] == ["Succeeded", "11m"]


# ------------------------------------------------------------- a generic kind
def test_a_generic_kind_is_folded_and_rendered_by_its_token_alone() -> None:
    """Nothing below kinds/ names it: the fold keeps its views by its token."""
    kinds = REGISTRY.with_(gadgets.SPEC)
    manifest = {
        "apiVersion": f"{gadgets.GROUP}/v1alpha1",
        "kind": "Gadget",
        "metadata": {"name": "g1", "namespace": "default"},
        "spec": {"color": "red"},
    }
    event = ResourceCreated(meta=meta("gadget", "g1"), manifest=manifest)
    cluster = Cluster()
    assert cluster.apply(Stored(seq=1, subject="", time=0.0, event=event)) == [
        ("gadget", "default/g1")
    ]
    obj = kinds.render_object(cluster, "gadget", "default/g1", 0.0)
    assert obj is not None and obj["spec"] == {"color": "red"}
    assert isinstance(kinds.load(manifest), gadgets.Gadget)


def test_the_registry_refuses_a_kind_whose_events_nothing_folds() -> None:
    with pytest.raises(ValueError, match="no events of its own"):
        REGISTRY.with_(msgspec.structs.replace(gadgets.SPEC, evolve=None))
    with pytest.raises(ValueError, match="no subject token"):
        REGISTRY.with_(msgspec.structs.replace(gadgets.SPEC, event_kind="gad.get"))
    with pytest.raises(ValueError, match="scope"):
        other = msgspec.structs.replace(
            gadgets.SPEC, kind="G", plural="gs", singular="g", short_names=(), scope=Scope.CLUSTER
        )
        REGISTRY.with_(gadgets.SPEC, other)
