"""Namespaces as objects, on plain data: the API server's NamespaceLifecycle (a create into
a missing namespace is a 404, into a terminating one a 403, an immortal namespace is never
deleted), a namespace's termination (Terminating, its contents deleted by the garbage
collector, then gone), and who may read or write them."""

from __future__ import annotations

import itertools
import json
from typing import Any

import pytest

from core import commands
from core.commands import Request, Verb
from core.context import RequestContext
from core.errors import ApiError
from events.catalog import Event, MetadataChanged, ResourceCreated, ResourceDeleted, VMCreated
from events.envelope import Stored
from events.meta import CLUSTER_SCOPE, Kind, ResourceKind
from kinds.registry import REGISTRY
from projections import namespaces
from services.api import protowire, rbac
from tests.factories import meta, vm_manifest, with_namespaces
from tests.unit.test_controller_world import World

_ids = itertools.count(1)


class Log:
    """Decisions folded as the api's projection would."""

    def __init__(self, *names: str) -> None:
        self.cluster = with_namespaces(*names)
        self.seq = 0

    def fold(self, event: Event) -> None:
        self.seq += 1
        self.cluster.apply(Stored(seq=self.seq, subject="", time=0.0, event=event))

    def run(
        self, verb: Verb, kind: str, name: str = "", body: Any = None, namespace: str = "default"
    ) -> commands.Outcome:
        data = b"" if body is None else json.dumps(body).encode()
        req = Request(
            verb=verb, spec=REGISTRY.resource(kind), namespace=namespace, name=name, body=data
        )
        ctx = RequestContext(
            now=1000.0 + self.seq,
            correlation_id="req",
            new_id=lambda: f"{next(_ids):032x}",
            suffix=lambda: "abcde",
        )
        outcome = commands.decide(commands.decode(req), self.cluster, ctx, REGISTRY.updatable)
        for append in outcome.appends:
            self.fold(append.event)
        return outcome

    def refused(self, verb: Verb, kind: str, **kw: Any) -> ApiError:
        before = self.seq
        with pytest.raises(ApiError) as exc:
            self.run(verb, kind, **kw)
        assert self.seq == before  # nothing appended
        return exc.value

    def served(self, name: str) -> dict[str, Any]:
        found = namespaces.find(self.cluster, name)
        assert found is not None
        return REGISTRY.resource("ns").render(self.cluster, found, 2000.0)


def _vm(name: str = "vm1", namespace: str = "default", **meta_fields: Any) -> dict[str, Any]:
    m = vm_manifest(name, "Halted")
    m["metadata"] = {"name": name, "namespace": namespace, **meta_fields}
    return m


def _ns(name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}


def test_a_namespace_is_created_and_served_active_with_its_name_label() -> None:
    log = Log()
    out = log.run(Verb.CREATE, "namespace", body=_ns("dev"), namespace="")
    assert out.code == 201 and out.kind == ResourceKind.NAMESPACE and out.key == "dev"
    (append,) = out.appends
    assert isinstance(append.event, ResourceCreated)
    assert append.event.meta.aggregate.namespace == CLUSTER_SCOPE
    served = log.served("dev")
    assert served["apiVersion"] == "v1" and served["kind"] == "Namespace"
    assert served["metadata"]["labels"] == {"kubernetes.io/metadata.name": "dev"}
    assert served["spec"] == {"finalizers": ["kubernetes"]}
    assert served["status"] == {"phase": "Active"}
    again = log.refused(Verb.CREATE, "ns", body=_ns("dev"), namespace="")
    assert (again.code, again.status.message) == (409, 'namespaces "dev" already exists')


def test_a_namespace_name_is_a_dns_label() -> None:
    err = Log().refused(Verb.CREATE, "ns", body=_ns("a.b"), namespace="")
    assert err.code == 422
    assert err.status.message.startswith('Namespace "a.b" is invalid: metadata.name')


def test_a_create_into_a_missing_namespace_is_not_found_and_changes_nothing() -> None:
    log = Log()
    err = log.refused(Verb.CREATE, "vm", body=_vm(namespace="nowhere"), namespace="nowhere")
    assert err.code == 404 and err.status.reason == "NotFound"
    assert err.status.message == 'namespaces "nowhere" not found'
    details = err.status.details
    assert details is not None and (details.name, details.kind) == ("nowhere", "namespaces")
    # before any other check, as the admission plugin runs before the object's validation
    bad = _vm("Not_A_Name", namespace="nowhere")
    assert log.refused(Verb.CREATE, "vm", body=bad, namespace="nowhere").code == 404
    assert log.cluster.vms == {}


def test_a_server_side_apply_into_a_missing_namespace_is_not_found() -> None:
    log = Log()
    req = Request(
        verb=Verb.PATCH,
        spec=REGISTRY.resource("vm"),
        namespace="nowhere",
        name="vm1",
        body=json.dumps(_vm(namespace="nowhere")).encode(),
        content_type="application/apply-patch+yaml",
        params={"fieldManager": "kubectl"},
    )
    ctx = RequestContext(
        now=1.0, correlation_id="c", new_id=lambda: f"{next(_ids):032x}", suffix=lambda: "x"
    )
    with pytest.raises(ApiError) as exc:
        commands.decide(commands.decode(req), log.cluster, ctx, REGISTRY.updatable)
    assert exc.value.status.message == 'namespaces "nowhere" not found'


def test_a_created_namespace_takes_objects_and_cluster_scoped_kinds_need_none() -> None:
    log = Log()
    log.run(Verb.CREATE, "ns", body=_ns("dev"), namespace="")
    assert log.run(Verb.CREATE, "vm", body=_vm(namespace="dev"), namespace="dev").code == 201
    assert "dev/vm1" in log.cluster.vms
    policy = {
        "apiVersion": "migrations.kubevirt.io/v1alpha1",
        "kind": "MigrationPolicy",
        "metadata": {"name": "p"},
        "spec": {},
    }
    assert log.run(Verb.CREATE, "migrationpolicy", body=policy, namespace="").code == 201


def test_deleting_a_namespace_makes_it_terminating_and_refuses_new_content() -> None:
    log = Log("dev")
    log.run(Verb.CREATE, "vm", body=_vm(namespace="dev"), namespace="dev")
    out = log.run(Verb.DELETE, "ns", name="dev", namespace="")
    assert out.code == 200
    (append,) = out.appends
    assert isinstance(append.event, MetadataChanged) and append.event.deletion
    served = log.served("dev")
    assert served["status"] == {"phase": "Terminating"}
    assert served["metadata"]["deletionTimestamp"]
    assert "dev/vm1" in log.cluster.vms  # its contents are the controller's to delete
    assert log.run(Verb.DELETE, "ns", name="dev", namespace="").appends == ()  # under way
    err = log.refused(Verb.CREATE, "vm", body=_vm("vm2", namespace="dev"), namespace="dev")
    assert (err.code, err.status.reason) == (403, "Forbidden")
    assert err.status.message == (
        'virtualmachines.kubevirt.io "vm2" is forbidden: unable to create new content in '
        "namespace dev because it is being terminated"
    )
    details = err.status.details
    assert details is not None and details.causes is not None
    (cause,) = details.causes
    assert (cause.type, cause.field) == ("NamespaceTerminating", "metadata.namespace")
    # a generated name is refused by its prefix, as admission names it before generation
    gen = _vm(namespace="dev")
    gen["metadata"] = {"generateName": "vm-", "namespace": "dev"}
    err = log.refused(Verb.CREATE, "vm", body=gen, namespace="dev")
    assert err.status.message.startswith('virtualmachines.kubevirt.io "vm-" is forbidden')


def test_the_immortal_namespaces_are_never_deleted() -> None:
    log = Log()
    for name in ("default", "kube-system", "kube-public"):
        err = log.refused(Verb.DELETE, "ns", name=name, namespace="")
        assert (err.code, err.status.reason) == (403, "Forbidden")
        assert (
            err.status.message
            == f'namespaces "{name}" is forbidden: this namespace may not be deleted'
        )
    assert log.run(Verb.DELETE, "ns", name="kube-node-lease", namespace="").code == 200


def test_a_missing_namespace_is_not_found_on_delete() -> None:
    err = Log().refused(Verb.DELETE, "ns", name="nowhere", namespace="")
    assert (err.code, err.status.message) == (404, 'namespaces "nowhere" not found')


# ------------------------------------------------------------- termination
def _terminating(w: World, name: str) -> MetadataChanged:
    found = namespaces.find(w.state.cluster, name)
    assert found is not None
    return MetadataChanged(
        meta=meta(ResourceKind.NAMESPACE, name, CLUSTER_SCOPE, at=w.now),
        metadata={"labels": {"kubernetes.io/metadata.name": name}},
        deletion=True,
    )


def test_a_terminating_namespace_is_emptied_by_the_collector_then_goes() -> None:
    w = World()
    with_namespaces("dev", "other", cluster=w.state.cluster)
    # a VM that runs (no node: its VMI stays pending, so the controller removes it itself)
    vm = vm_manifest("vm1", "Always")
    vm["metadata"]["namespace"] = "dev"
    w.run(VMCreated(meta=meta(Kind.VM, "vm1", "dev", at=w.now), manifest=vm))
    assert "dev/vm1" in w.state.cluster.vmis
    # a preference that waits for its own finalizer, and one in another namespace
    for ns, fins in (("dev", ["example.com/keep"]), ("other", [])):
        pref = {
            "apiVersion": "instancetype.kubevirt.io/v1beta1",
            "kind": "VirtualMachinePreference",
            "metadata": {"name": "p", "namespace": ns, "uid": f"p-{ns}", "finalizers": fins},
            "spec": {},
        }
        w.given(ResourceCreated(meta=meta(ResourceKind.PREFERENCE, "p", ns), manifest=pref))
    appended = w.run(_terminating(w, "dev"))
    prefs = w.state.cluster.resources[ResourceKind.PREFERENCE]
    assert prefs["dev/p"].marked and "other/p" in prefs  # marked; the other namespace's stays
    assert "dev/vm1" not in w.state.cluster.vms and "dev/vm1" not in w.state.cluster.vmis
    assert namespaces.find(w.state.cluster, "dev") is not None  # its preference waits
    gone = [e for e in appended if isinstance(e, ResourceDeleted)]
    assert not [e for e in gone if e.meta.aggregate.name == "dev"]
    # the finalizer's owner removes it: the preference goes, and with it the namespace
    w.settle(
        [MetadataChanged(meta=meta(ResourceKind.PREFERENCE, "p", "dev", at=w.now), metadata={})]
    )
    w.settle(w.tick())
    assert "dev/p" not in prefs
    assert namespaces.find(w.state.cluster, "dev") is None
    assert namespaces.find(w.state.cluster, "other") is not None


def test_a_terminating_namespace_leaves_an_owned_object_to_its_owners_deletion() -> None:
    w = World()
    with_namespaces("dev", cluster=w.state.cluster)
    vm = vm_manifest("vm1", "Always")
    vm["metadata"]["namespace"] = "dev"
    w.run(VMCreated(meta=meta(Kind.VM, "vm1", "dev", at=w.now), manifest=vm))
    decided = w.when(_terminating(w, "dev"))
    # the VM is deleted; its VMI goes with it (the VM's teardown), not by a delete of its own
    deleted = {type(e).__name__: e.meta.aggregate.kind for e in decided}
    assert deleted == {"VMDeleted": Kind.VM}


# ------------------------------------------------------------------- RBAC
def _allowed(groups: tuple[str, ...], role: str, verb: str, path: str, ns: str = "") -> bool:
    roles = rbac.cluster_roles(REGISTRY)
    user = rbac.User("u", groups)
    binding = rbac.Binding(role, (rbac.Subject("User", "u"),), namespace=ns)
    method = {"get": "GET", "list": "GET", "create": "POST", "delete": "DELETE"}[verb]
    return rbac.allowed(user, rbac.attributes(method, path), [binding], roles)


def test_view_reads_namespaces_and_only_cluster_admin_creates_or_deletes_them() -> None:
    assert _allowed((), rbac.VIEW, "list", "/api/v1/namespaces")
    assert _allowed((), rbac.VIEW, "get", "/api/v1/namespaces/dev")
    # bound in a namespace: that namespace alone
    assert _allowed((), rbac.VIEW, "get", "/api/v1/namespaces/dev", ns="dev")
    assert not _allowed((), rbac.VIEW, "get", "/api/v1/namespaces/prod", ns="dev")
    for role in (rbac.VIEW, rbac.EDIT, rbac.ADMIN):
        assert not _allowed((), role, "create", "/api/v1/namespaces")
        assert not _allowed((), role, "delete", "/api/v1/namespaces/dev")
    assert _allowed((), rbac.CLUSTER_ADMIN, "create", "/api/v1/namespaces")
    assert _allowed((), rbac.CLUSTER_ADMIN, "delete", "/api/v1/namespaces/dev")


# ---------------------------------------------------------------- protobuf
def test_kubectls_protobuf_namespace_is_read_with_its_metadata() -> None:
    f = protowire._bytes_field
    entry = lambda k, v: f(1, k.encode()) + f(2, v.encode())  # noqa: E731
    meta = (
        f(1, b"dev")
        + f(11, entry("a", "1"))
        + f(11, entry("b", "2"))
        + f(12, entry("note", "x"))
        + f(14, b"example.com/one")
        + f(14, b"example.com/two")
    )
    raw = f(1, meta) + f(2, b"")  # metadata, an empty spec
    unknown = f(1, f(1, b"v1") + f(2, b"Namespace")) + f(2, raw)
    assert protowire.namespace(protowire.MAGIC + unknown) == {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {
            "name": "dev",
            "labels": {"a": "1", "b": "2"},
            "annotations": {"note": "x"},
            "finalizers": ["example.com/one", "example.com/two"],
        },
    }
    with pytest.raises(protowire.ProtoError):
        protowire.namespace(b'{"kind": "Namespace"}')
