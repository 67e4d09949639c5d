"""Objects' lives as Kubernetes has them, with the real kubectl and the `kubernetes`
client on one `virtstream up --nodes 1`:

- metadata on every kind: `kubectl label` and `annotate` of a VMI, a migration and a
  snapshot, a merge patch, a JSON patch and a PUT of labels, finalizers and owner
  references, none touching spec or status; a changed spec of an immutable kind refused
  with KubeVirt's words."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from kinds.registry import REGISTRY
from ops.supervisor import importable
from tests.integration.polling import until
from tests.integration.test_kubectl import EXAMPLES, Cluster
from tests.integration.up_process import running_up

pytestmark = pytest.mark.skipif(
    not (importable("services.api") and importable("services.handler")),
    reason="api, controller and handlers are needed",
)

VMIS = "/apis/kubevirt.io/v1/namespaces/default/virtualmachineinstances"
VMIMS = "/apis/kubevirt.io/v1/namespaces/default/virtualmachineinstancemigrations"
SNAPSHOTS = "/apis/snapshot.kubevirt.io/v1beta1/namespaces/default/virtualmachinesnapshots"


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    with running_up("vs-citizen-", 1) as up:
        yield Cluster(up.url, up.http, up.data_dir / "kubeconfig", up.data_dir)


def _get(cluster: Cluster, path: str) -> dict[str, Any]:
    r = cluster.http.get(path)
    assert r.status_code == 200, r.text
    return dict(r.json())


def _snapshot(name: str, vm: str) -> dict[str, Any]:
    return {
        "apiVersion": "snapshot.kubevirt.io/v1beta1",
        "kind": "VirtualMachineSnapshot",
        "metadata": {"name": name},
        "spec": {"source": {"apiGroup": "kubevirt.io", "kind": "VirtualMachine", "name": vm}},
    }


# ------------------------------------------------------------------ metadata
def test_kubectl_labels_and_annotates_a_vmi_without_touching_its_spec(cluster: Cluster) -> None:
    k = cluster.kubectl
    k("create", "-f", str(EXAMPLES / "vmi-fedora.yaml"))
    before = _get(cluster, f"{VMIS}/vmi-fedora")
    assert k("label", "vmi", "vmi-fedora", "foo=bar").out.strip() == (
        "virtualmachineinstance.kubevirt.io/vmi-fedora labeled"
    )
    assert k("annotate", "vmi", "vmi-fedora", "note=hello").out.strip() == (
        "virtualmachineinstance.kubevirt.io/vmi-fedora annotated"
    )
    after = _get(cluster, f"{VMIS}/vmi-fedora")
    assert after["metadata"]["labels"] == {"special": "vmi-fedora", "foo": "bar"}
    assert after["metadata"]["annotations"]["note"] == "hello"
    assert after["spec"] == before["spec"]
    assert after["metadata"]["uid"] == before["metadata"]["uid"]
    # a label removed, and shown by a label selector
    k("label", "vmi", "vmi-fedora", "foo-")
    names = k("get", "vmis", "-l", "special=vmi-fedora", "-o", "name").out.split()
    assert names == ["virtualmachineinstance.kubevirt.io/vmi-fedora"]
    assert "foo" not in _get(cluster, f"{VMIS}/vmi-fedora")["metadata"]["labels"]


def test_a_changed_vmi_spec_is_refused_as_kubevirt_refuses_it(cluster: Cluster) -> None:
    k = cluster.kubectl
    if k("get", "vmi", "vmi-fedora", check=False).code != 0:
        k("create", "-f", str(EXAMPLES / "vmi-fedora.yaml"))
    out = k(
        "patch", "vmi", "vmi-fedora", "--type=merge", "-p", '{"spec":{"hostname":"other"}}',
        check=False,
    )  # fmt: skip
    assert out.code != 0
    # kubectl prints an Invalid Status by its causes, as it does KubeVirt's
    assert out.err.strip() == (
        'The VirtualMachineInstance "vmi-fedora" is invalid: : update of VMI object is restricted'
    )
    r = cluster.http.patch(
        f"{VMIS}/vmi-fedora",
        content=b'{"spec":{"hostname":"other"}}',
        headers={"Content-Type": "application/merge-patch+json"},
    )
    assert r.status_code == 422
    assert r.json()["message"] == (
        'admission webhook "virtualmachineinstances-update-validator.kubevirt.io" denied the '
        "request: update of VMI object is restricted"
    )


def test_a_migration_takes_labels_finalizers_and_owners(cluster: Cluster) -> None:
    k = cluster.kubectl
    k("create", "-f", str(EXAMPLES / "vmi-migratable.yaml"))
    k("create", "-f", str(EXAMPLES / "migration-job.yaml"))
    assert k("label", "vmim", "migration-job", "team=a").out.strip() == (
        "virtualmachineinstancemigration.kubevirt.io/migration-job labeled"
    )
    vmi = _get(cluster, f"{VMIS}/vmi-migratable")
    owner = {
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachineInstance",
        "name": "vmi-migratable",
        "uid": vmi["metadata"]["uid"],
    }
    patch = [
        {"op": "add", "path": "/metadata/finalizers", "value": ["example.com/hold"]},
        {"op": "add", "path": "/metadata/ownerReferences", "value": [owner]},
    ]
    k("patch", "vmim", "migration-job", "--type=json", "-p", json.dumps(patch))
    shown = _get(cluster, f"{VMIMS}/migration-job")
    assert shown["metadata"]["labels"] == {"team": "a"}
    assert shown["metadata"]["finalizers"] == ["example.com/hold"]
    assert shown["metadata"]["ownerReferences"] == [owner]
    assert shown["spec"] == {"vmiName": "vmi-migratable"}
    # a PUT that drops them
    shown["metadata"].pop("finalizers")
    shown["metadata"].pop("ownerReferences")
    r = cluster.http.put(f"{VMIMS}/migration-job", json=shown)
    assert r.status_code == 200, r.text
    meta = _get(cluster, f"{VMIMS}/migration-job")["metadata"]
    assert "finalizers" not in meta and "ownerReferences" not in meta
    # the spec stays KubeVirt's to refuse
    out = k(
        "patch", "vmim", "migration-job", "--type=merge", "-p", '{"spec":{"vmiName":"x"}}',
        check=False,
    )  # fmt: skip
    assert out.code != 0 and "update of Migration object's spec is restricted" in out.err


def test_the_kubernetes_client_labels_a_snapshot(cluster: Cluster, tmp_path: Any) -> None:
    from kubernetes import client, config

    k = cluster.kubectl
    vm = yaml.safe_load((EXAMPLES / "vm-cirros.yaml").read_text())
    vm["metadata"]["name"] = "vm-snap"
    (tmp_path / "vm.yaml").write_text(yaml.safe_dump(vm))
    k("create", "-f", str(tmp_path / "vm.yaml"))
    (tmp_path / "snap.yaml").write_text(yaml.safe_dump(_snapshot("snap-one", "vm-snap")))
    k("create", "-f", str(tmp_path / "snap.yaml"))
    api = client.CustomObjectsApi(config.new_client_from_config(str(cluster.kubeconfig)))
    args = ("snapshot.kubevirt.io", "v1beta1", "default", "virtualmachinesnapshots", "snap-one")
    api.patch_namespaced_custom_object(*args, {"metadata": {"labels": {"backup": "nightly"}}})
    got = dict(api.get_namespaced_custom_object(*args))  # type: ignore[call-overload]
    assert got["metadata"]["labels"] == {"backup": "nightly"}
    assert got["spec"]["source"]["name"] == "vm-snap"
    assert k("annotate", "vmsnapshot", "snap-one", "why=test").out.strip() == (
        "virtualmachinesnapshot.snapshot.kubevirt.io/snap-one annotated"
    )


# ------------------------------------------------------------- names reused
MIG_TWO = {
    "apiVersion": "kubevirt.io/v1",
    "kind": "VirtualMachineInstanceMigration",
    "metadata": {"name": "mig-two"},
    "spec": {"vmiName": "vmi-reuse"},
}
HISTORY = "/apis/debug.virtstream.io/v1alpha1/namespaces/default/{plural}/{name}/history"


def _gone(cluster: Cluster, kind: str, name: str) -> None:
    cluster.kubectl("delete", kind, name, "--wait=true", "--timeout=60s")
    out = cluster.kubectl("get", kind, name, check=False)
    assert out.code != 0 and "NotFound" in out.err, out.err


def test_a_deleted_migrations_name_is_free_again(cluster: Cluster, tmp_path: Any) -> None:
    k = cluster.kubectl
    vmi = yaml.safe_load((EXAMPLES / "vmi-migratable.yaml").read_text())
    vmi["metadata"]["name"] = "vmi-reuse"
    (tmp_path / "vmi.yaml").write_text(yaml.safe_dump(vmi))
    k("create", "-f", str(tmp_path / "vmi.yaml"))
    path = tmp_path / "mig.yaml"
    path.write_text(yaml.safe_dump(MIG_TWO))
    k("create", "-f", str(path))
    old = _get(cluster, f"{VMIMS}/mig-two")["metadata"]["uid"]
    _gone(cluster, "vmim", "mig-two")
    assert k("create", "-f", str(path)).out.strip() == (
        "virtualmachineinstancemigration.kubevirt.io/mig-two created"
    )
    new = _get(cluster, f"{VMIMS}/mig-two")
    assert new["metadata"]["uid"] != old
    assert new["metadata"].get("deletionTimestamp") is None
    # its history is its own: it begins with its own creation
    r = cluster.http.get(HISTORY.format(plural="virtualmachineinstancemigrations", name="mig-two"))
    assert r.status_code == 200, r.text
    steps = [s for s in r.json()["steps"] if s["own"]]
    assert steps[0]["type"] == "MigrationRequested"
    assert all(s["type"] != "MigrationAbortRequested" for s in steps)
    assert steps[0]["object"]["metadata"]["uid"] == new["metadata"]["uid"]


@pytest.mark.parametrize(
    ("kind", "doc"),
    [
        ("vmi", yaml.safe_load((EXAMPLES / "vmi-fedora.yaml").read_text())),
        ("vm", yaml.safe_load((EXAMPLES / "vm-cirros.yaml").read_text())),
        ("vmsnapshot", _snapshot("snap-reuse", "vm-cirros")),
        (
            "migrationpolicy",
            yaml.safe_load((EXAMPLES / "example-migration-policy.yaml").read_text()),
        ),
    ],
)
def test_every_kinds_name_is_free_again(
    cluster: Cluster, tmp_path: Any, kind: str, doc: dict[str, Any]
) -> None:
    k = cluster.kubectl
    name = doc["metadata"]["name"] = f"reuse-{kind}"
    path = tmp_path / "obj.yaml"
    path.write_text(yaml.safe_dump(doc))
    k("create", "-f", str(path))
    uid = k("get", kind, name, "-o", "jsonpath={.metadata.uid}").out
    _gone(cluster, kind, name)
    k("create", "-f", str(path))
    new = k("get", kind, name, "-o", "jsonpath={.metadata.uid}").out
    assert new not in ("", uid)
    # the history of the name's object is the new one's: its first step is its creation
    spec = REGISTRY.resource(kind)
    where = "namespaces/default/" if spec.namespaced else ""
    r = cluster.http.get(f"/apis/debug.virtstream.io/v1alpha1/{where}{spec.plural}/{name}/history")
    assert r.status_code == 200, r.text
    steps = r.json()["steps"]
    assert steps[0]["own"] and steps[0]["object"]["metadata"]["uid"] == new
    assert all(s["object"]["metadata"]["uid"] == new for s in steps if s.get("object"))


# ------------------------------------------------------------------ deletion
FLEET = EXAMPLES.parent / "fleet"


def _fleet(tmp_path: Any, file: str, name: str, replicas: int) -> Any:
    doc = yaml.safe_load((FLEET / file).read_text())
    doc["metadata"]["name"] = name
    doc["spec"]["replicas"] = replicas
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def _owned(cluster: Cluster, kind: str, uid: str) -> list[str]:
    items = json.loads(cluster.kubectl("get", kind, "-o", "json").out)["items"]
    return sorted(
        i["metadata"]["name"]
        for i in items
        if any(r.get("uid") == uid for r in i["metadata"].get("ownerReferences") or [])
    )


def _until(check: Any, what: str, timeout: float = 60) -> None:
    until(check, timeout, what)


def test_deleting_a_replica_set_deletes_its_vmis(cluster: Cluster, tmp_path: Any) -> None:
    k = cluster.kubectl
    k("create", "-f", str(_fleet(tmp_path, "vmirs-cirros.yaml", "rs-bg", 2)))
    uid = k("get", "vmirs", "rs-bg", "-o", "jsonpath={.metadata.uid}").out
    _until(lambda: len(_owned(cluster, "vmis", uid)) == 2, "the replica set's VMIs")
    k("delete", "vmirs", "rs-bg")  # kubectl's default: Background
    _until(lambda: _owned(cluster, "vmis", uid) == [], "its VMIs gone")


def test_a_foreground_deletion_waits_for_the_pools_vms(cluster: Cluster, tmp_path: Any) -> None:
    k = cluster.kubectl
    k("create", "-f", str(_fleet(tmp_path, "vmpool-cirros.yaml", "pool-fg", 2)))
    uid = k("get", "vmpool", "pool-fg", "-o", "jsonpath={.metadata.uid}").out
    _until(lambda: len(_owned(cluster, "vms", uid)) == 2, "the pool's VMs")
    held, free = _owned(cluster, "vms", uid)
    k("patch", "vm", held, "--type=merge", "-p", '{"metadata":{"finalizers":["x.io/hold"]}}')
    k("delete", "vmpool", "pool-fg", "--cascade=foreground", "--wait=false")
    _until(lambda: _owned(cluster, "vms", uid) == [held], "the VM without a finalizer gone")
    # the pool stays, being deleted, while a VM of its own is left
    pool = json.loads(k("get", "vmpool", "pool-fg", "-o", "json").out)
    assert pool["metadata"]["deletionTimestamp"]
    assert pool["metadata"]["finalizers"] == ["foregroundDeletion"]
    vm = json.loads(k("get", "vm", held, "-o", "json").out)
    assert vm["metadata"]["deletionTimestamp"] and vm["status"]["printableStatus"] == "Terminating"
    k("patch", "vm", held, "--type=merge", "-p", '{"metadata":{"finalizers":null}}')
    _until(lambda: _owned(cluster, "vms", uid) == [], "its VMs gone")
    _until(lambda: k("get", "vmpool", "pool-fg", check=False).code != 0, "the pool gone")
    assert free not in k("get", "vms", "-o", "name").out


def test_an_orphaning_deletion_leaves_the_vmis(cluster: Cluster, tmp_path: Any) -> None:
    k = cluster.kubectl
    k("create", "-f", str(_fleet(tmp_path, "vmirs-cirros.yaml", "rs-or", 2)))
    uid = k("get", "vmirs", "rs-or", "-o", "jsonpath={.metadata.uid}").out
    _until(lambda: len(_owned(cluster, "vmis", uid)) == 2, "the replica set's VMIs")
    names = _owned(cluster, "vmis", uid)
    k("delete", "vmirs", "rs-or", "--cascade=orphan")
    assert k("get", "vmirs", "rs-or", check=False).code != 0
    assert _owned(cluster, "vmis", uid) == []
    for name in names:  # still there, without their reference
        vmi = _get(cluster, f"{VMIS}/{name}")
        assert "deletionTimestamp" not in vmi["metadata"]
        assert "ownerReferences" not in vmi["metadata"]


def test_a_finalizer_holds_an_object_until_it_is_removed(cluster: Cluster) -> None:
    k = cluster.kubectl
    doc = yaml.safe_load((EXAMPLES / "vmi-fedora.yaml").read_text())
    doc["metadata"]["name"] = "vmi-held"
    doc["metadata"]["finalizers"] = ["example.com/hold"]
    r = cluster.http.post(VMIS, json=doc)
    assert r.status_code == 201, r.text
    k("delete", "vmi", "vmi-held", "--wait=false")
    meta = _get(cluster, f"{VMIS}/vmi-held")["metadata"]
    assert meta["deletionTimestamp"] and meta["finalizers"] == ["example.com/hold"]
    # no new finalizer while it is being deleted, in the API server's words
    more = '[{"op":"add","path":"/metadata/finalizers/-","value":"x.io/more"}]'
    out = k("patch", "vmi", "vmi-held", "--type=json", "-p", more, check=False)
    assert out.code != 0 and "no new finalizers can be added" in out.err
    k("patch", "vmi", "vmi-held", "--type=merge", "-p", '{"metadata":{"finalizers":null}}')
    _until(lambda: k("get", "vmi", "vmi-held", check=False).code != 0, "the VMI gone")
