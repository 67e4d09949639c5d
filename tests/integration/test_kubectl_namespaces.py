"""Namespaces as objects, with the real kubectl and the `kubernetes` client on one
`virtstream up --nodes 1`: the system namespaces from the start, `kubectl create|get|
describe|delete namespace`, a create into a missing namespace (404) or a terminating one
(403) refused and storing nothing, a deleted namespace Terminating while what it holds is
deleted, then gone; the immortal ones never deleted."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from ops.supervisor import importable
from tests.integration.polling import until
from tests.integration.test_kubectl import EXAMPLES, Cluster
from tests.integration.up_process import running_up

pytestmark = pytest.mark.skipif(
    not (importable("services.api") and importable("services.handler")),
    reason="api, controller and handlers are needed",
)

VMS = "/apis/kubevirt.io/v1/namespaces/{ns}/virtualmachines"
SYSTEM = ["default", "kube-node-lease", "kube-public", "kube-system", "kubevirt"]


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    with running_up("vs-namespaces-", 1) as up:
        yield Cluster(up.url, up.http, up.data_dir / "kubeconfig", up.data_dir)


def _rows(out: str) -> list[list[str]]:
    return [line.split() for line in out.strip().splitlines()]


def _vm(tmp_path: Path, name: str, strategy: str = "Halted", **meta: Any) -> Path:
    doc = yaml.safe_load((EXAMPLES / "vm-cirros.yaml").read_text())
    doc["metadata"] = {"name": name, **meta}
    doc["spec"]["runStrategy"] = strategy
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def test_the_system_namespaces_exist_from_the_start(cluster: Cluster) -> None:
    k = cluster.kubectl
    rows = _rows(k("get", "namespaces").out)
    assert rows[0] == ["NAME", "STATUS", "AGE"]
    assert [r[0] for r in rows[1:]] == SYSTEM
    assert all(r[1] == "Active" for r in rows[1:])
    found = [r for r in _rows(k("api-resources", "--api-group=").out) if r[0] == "namespaces"]
    assert found == [["namespaces", "ns", "v1", "false", "Namespace"]]
    got = json.loads(k("get", "ns", "default", "-o", "json").out)
    assert got["status"] == {"phase": "Active"} and got["metadata"]["uid"]
    assert got["metadata"]["labels"] == {"kubernetes.io/metadata.name": "default"}


def test_kubectl_creates_describes_and_fills_a_namespace(cluster: Cluster, tmp_path: Path) -> None:
    k = cluster.kubectl
    assert k("create", "namespace", "dev").out.strip() == "namespace/dev created"
    again = k("create", "ns", "dev", check=False)
    assert again.code != 0
    assert again.err.strip() == 'Error from server (AlreadyExists): namespaces "dev" already exists'
    described = k("describe", "namespace", "dev").out
    assert "Name:" in described and "Status:       Active" in described
    out = k("apply", "-n", "dev", "-f", str(_vm(tmp_path, "vm-dev"))).out
    assert out.strip() == "virtualmachine.kubevirt.io/vm-dev created"
    assert [r[0] for r in _rows(k("get", "vms", "-n", "dev").out)[1:]] == ["vm-dev"]
    k("label", "ns", "dev", "team=a")
    assert k("get", "ns", "-l", "team=a", "-o", "name").out.split() == ["namespace/dev"]


def test_a_create_into_a_missing_namespace_is_not_found_and_stores_nothing(
    cluster: Cluster, tmp_path: Path
) -> None:
    k = cluster.kubectl
    before = cluster.seq()
    out = k("create", "-n", "nowhere", "-f", str(_vm(tmp_path, "vm-lost")), check=False)
    assert out.code != 0
    assert out.err.strip() == (
        f'Error from server (NotFound): error when creating "{tmp_path / "vm-lost.yaml"}": '
        'namespaces "nowhere" not found'
    )
    applied = k("apply", "-n", "nowhere", "-f", str(_vm(tmp_path, "vm-lost")), check=False)
    assert applied.code != 0 and 'namespaces "nowhere" not found' in applied.err
    r = cluster.http.post(
        VMS.format(ns="nowhere"), json=yaml.safe_load(_vm(tmp_path, "x").read_text())
    )
    assert r.status_code == 404
    assert (r.json()["reason"], r.json()["details"]) == (
        "NotFound",
        {"name": "nowhere", "kind": "namespaces"},
    )
    assert cluster.seq() == before
    assert k("get", "vms", "-n", "nowhere", "-o", "name").out.strip() == ""


def test_a_deleted_namespace_terminates_its_contents_then_goes(
    cluster: Cluster, tmp_path: Path
) -> None:
    k = cluster.kubectl
    k("create", "namespace", "doomed")
    k("create", "-n", "doomed", "-f", str(_vm(tmp_path, "vm-run", "Always")))
    # one that waits for its finalizer's owner: the namespace stays Terminating until then
    held = _vm(tmp_path, "vm-held", finalizers=["example.com/hold"])
    k("create", "-n", "doomed", "-f", str(held))
    vmis = "/apis/kubevirt.io/v1/namespaces/doomed/virtualmachineinstances/vm-run"
    until(lambda: cluster.http.get(vmis).json().get("status", {}).get("phase") == "Running", 60,
          "the VMI running")  # fmt: skip
    out = k("delete", "namespace", "doomed", "--wait=false")
    assert out.out.strip() == 'namespace "doomed" deleted'
    rows = _rows(k("get", "ns", "doomed").out)
    assert rows[1][:2] == ["doomed", "Terminating"]
    refused = k("create", "-n", "doomed", "-f", str(_vm(tmp_path, "vm-late")), check=False)
    assert refused.code != 0
    assert refused.err.strip() == (
        'Error from server (Forbidden): error when creating "'
        + str(tmp_path / "vm-late.yaml")
        + '": virtualmachines.kubevirt.io "vm-late" is forbidden: unable to create new '
        "content in namespace doomed because it is being terminated"
    )
    # its contents go: the running VM and its VMI; the held one is marked and waits
    until(lambda: k("get", "vm", "vm-run", "-n", "doomed", check=False).code != 0, 60,
          "the running VM gone")  # fmt: skip
    held_vm = json.loads(k("get", "vm", "vm-held", "-n", "doomed", "-o", "json").out)
    assert held_vm["metadata"]["deletionTimestamp"]
    assert _rows(k("get", "ns", "doomed").out)[1][1] == "Terminating"
    k("patch", "vm", "vm-held", "-n", "doomed", "--type=json",
      "-p", '[{"op":"remove","path":"/metadata/finalizers"}]')  # fmt: skip
    k("wait", "--for=delete", "namespace/doomed", "--timeout=60s")
    gone = k("get", "ns", "doomed", check=False)
    assert gone.code != 0
    assert gone.err.strip() == 'Error from server (NotFound): namespaces "doomed" not found'
    # the name is free again, and empty
    k("create", "namespace", "doomed")
    assert k("get", "vms", "-n", "doomed", "-o", "name").out.strip() == ""


def test_the_immortal_namespaces_are_never_deleted(cluster: Cluster) -> None:
    out = cluster.kubectl("delete", "namespace", "default", check=False)
    assert out.code != 0
    assert out.err.strip() == (
        'Error from server (Forbidden): namespaces "default" is forbidden: '
        "this namespace may not be deleted"
    )


def test_the_kubernetes_client_creates_reads_lists_and_deletes_namespaces(
    cluster: Cluster,
) -> None:
    from kubernetes import client, config
    from kubernetes.client.rest import ApiException

    api_client = config.new_client_from_config(str(cluster.kubeconfig))
    core = client.CoreV1Api(api_client)
    made = core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name="py")))
    assert made.metadata is not None and made.status is not None
    assert made.metadata.name == "py" and made.status.phase == "Active"
    read = core.read_namespace("py").metadata
    assert read is not None and read.uid == made.metadata.uid
    names = [n.metadata.name for n in core.list_namespace().items if n.metadata is not None]
    assert {"py", *SYSTEM} <= set(names)
    custom = client.CustomObjectsApi(api_client)
    vm = yaml.safe_load((EXAMPLES / "vm-cirros.yaml").read_text())
    with pytest.raises(ApiException) as exc:
        custom.create_namespaced_custom_object(
            "kubevirt.io", "v1", "nowhere", "virtualmachines", vm
        )
    assert exc.value.status == 404
    assert json.loads(exc.value.body or "{}")["message"] == 'namespaces "nowhere" not found'
    custom.create_namespaced_custom_object("kubevirt.io", "v1", "py", "virtualmachines", vm)
    core.delete_namespace("py")

    def gone() -> bool:
        try:
            core.read_namespace("py")
        except ApiException as e:
            return e.status == 404
        return False

    until(gone, 60, "the namespace gone")
