"""What automation around the VMs reads and writes besides the VMs, through the real kubectl and
the official Python client against one `virtstream up --nodes 1`: `kubectl create secret
generic` and `kubectl create configmap` (protobuf bodies), virt-api's `version` and `healthz`,
the Events' `source` and `involvedObject.*` field selectors, `authentication.k8s.io` in
discovery, and the `status` subresource of every kind that has a status (`CustomObjectsApi`'s
`*_status` calls, `CoreV1Api.read_node_status`)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client, config

from tests.integration.polling import until
from tests.integration.test_kubectl import Cluster, _rows, _vm, _write
from tests.integration.up_process import running_up

START = ("patch", "vm", "--type", "merge", "-p", '{"spec":{"runStrategy":"Always"}}')


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    with running_up("vs-kauto-", 1) as up:
        yield Cluster(up.url, up.http, up.data_dir / "kubeconfig", up.data_dir)


@pytest.fixture(scope="module")
def running(cluster: Cluster, tmp_path_factory: pytest.TempPathFactory) -> str:
    """A VM with its VMI running."""
    tmp = tmp_path_factory.mktemp("vms")
    cluster.kubectl("apply", "-f", str(_write(tmp, _vm("auto-vm"))))
    cluster.kubectl(*START[:2], "auto-vm", *START[2:])
    until(
        lambda: cluster.kubectl(
            "get", "vmi", "auto-vm", "-o", "jsonpath={.status.phase}", check=False
        ).out == "Running",
        60, "auto-vm running",
    )  # fmt: skip
    return "auto-vm"


def _clients(cluster: Cluster) -> tuple[Any, Any]:
    api = config.new_client_from_config(str(cluster.kubeconfig))
    return client.CoreV1Api(api), client.CustomObjectsApi(api)


def test_create_secret_generic_sends_protobuf_and_is_stored(cluster: Cluster) -> None:
    out = cluster.kubectl(
        "create", "secret", "generic", "creds", "--from-literal=user=admin",
        "--from-literal=pass=s3cr3t",
    ).out  # fmt: skip
    assert out.strip() == "secret/creds created"
    secret = json.loads(cluster.kubectl("get", "secret", "creds", "-o", "json").out)
    assert secret["type"] == "Opaque"
    assert secret["data"] == {"user": "YWRtaW4=", "pass": "czNjcjN0"}
    again = cluster.kubectl(
        "create", "secret", "generic", "creds", "--from-literal=a=b", check=False
    )
    assert again.code == 1
    assert 'secrets "creds" already exists' in again.err


def test_create_configmap_sends_protobuf_and_is_validated(cluster: Cluster) -> None:
    out = cluster.kubectl(
        "create", "configmap", "settings", "--from-literal=mode=fast",
        "--from-literal=level=3",
    ).out  # fmt: skip
    assert out.strip() == "configmap/settings created"
    cm = json.loads(cluster.kubectl("get", "cm", "settings", "-o", "json").out)
    assert cm["data"] == {"mode": "fast", "level": "3"}
    assert cm["apiVersion"] == "v1"  # the core group's, as the API server writes it
    bad = cluster.kubectl("create", "configmap", "bad", "--from-literal=a b=c", check=False)
    assert bad.code == 1
    assert "a valid config key must consist of alphanumeric characters" in bad.err
    assert cluster.kubectl("get", "configmap", "bad", check=False).code == 1
    core, _ = _clients(cluster)
    names = [c.metadata.name for c in core.list_namespaced_config_map("default").items]
    assert "settings" in names
    assert core.read_namespaced_config_map("settings", "default").api_version == "v1"


def test_virt_api_version_and_healthz(cluster: Cluster) -> None:
    version = json.loads(
        cluster.kubectl("get", "--raw", "/apis/subresources.kubevirt.io/v1/version").out
    )
    assert set(version) == {
        "gitVersion", "gitCommit", "gitTreeState", "buildDate", "goVersion", "compiler",
        "platform",
    }  # fmt: skip
    assert version["gitVersion"].startswith("v1.")
    health = json.loads(
        cluster.kubectl("get", "--raw", "/apis/subresources.kubevirt.io/v1/healthz").out
    )
    assert health["apiserver"]["connectivity"] == "ok"
    assert health["apiserver"]["version"]["major"] == "1"


def test_discovery_lists_the_reviews_and_the_status_subresources(cluster: Cluster) -> None:
    rows = {r[0]: r for r in _rows(cluster.kubectl("api-resources").out)[1:]}
    assert rows["selfsubjectreviews"][1:] == ["authentication.k8s.io/v1", "false",
                                              "SelfSubjectReview"]  # fmt: skip
    assert rows["selfsubjectrulesreviews"][1] == "authorization.k8s.io/v1"
    raw = json.loads(cluster.kubectl("get", "--raw", "/apis/kubevirt.io/v1").out)
    status = {r["name"]: r["verbs"] for r in raw["resources"] if r["name"].endswith("/status")}
    assert status["virtualmachines/status"] == ["get", "patch", "update"]
    assert "virtualmachineinstances/status" in status
    assert cluster.kubectl("auth", "whoami").code == 0


def test_event_field_selectors_source_and_involved_object(cluster: Cluster, running: str) -> None:
    def rows(selector: str) -> list[list[str]]:
        return _rows(cluster.kubectl("get", "events", "--field-selector", selector).out)[1:]

    by_controller = rows(f"source=virt-controller,involvedObject.name={running}")
    assert by_controller and {r[2] for r in by_controller} == {"SuccessfulCreate"}
    by_handler = rows(f"source=virt-handler,involvedObject.name={running}")
    assert {r[2] for r in by_handler} >= {"Created", "Started"}
    assert rows(f"involvedObject.fieldPath=,involvedObject.name={running}")
    assert not rows("involvedObject.resourceVersion=12345")
    core, _ = _clients(cluster)
    typed = core.list_namespaced_event("default", field_selector="source=virt-handler")
    assert typed.items and all(e.source.component == "virt-handler" for e in typed.items)


def test_status_subresources_of_vms_vmis_and_nodes(cluster: Cluster, running: str) -> None:
    core, custom = _clients(cluster)
    args = ("kubevirt.io", "v1", "default")
    vm = custom.get_namespaced_custom_object_status(*args, "virtualmachines", running)
    assert vm["kind"] == "VirtualMachine" and vm["status"]["printableStatus"] == "Running"
    vmi = custom.get_namespaced_custom_object_status(*args, "virtualmachineinstances", running)
    assert vmi["status"]["phase"] == "Running"
    node = core.read_node_status("node-1")
    assert node.status.node_info.kubelet_version

    # a status write that changes nothing answers the object; one that changes it is refused
    same = custom.patch_namespaced_custom_object_status(
        *args, "virtualmachines", running, {"metadata": {"labels": {"ignored": "yes"}}}
    )
    assert same["status"]["printableStatus"] == "Running"
    assert "ignored" not in (same["metadata"].get("labels") or {})
    with pytest.raises(client.ApiException) as exc:
        custom.patch_namespaced_custom_object_status(
            *args, "virtualmachines", running, {"status": {"printableStatus": "Stopped"}}
        )
    assert exc.value.status == 422
    assert "status: Forbidden: the status is recorded from the cluster's events" in str(
        exc.value.body
    )
    r = cluster.http.put(
        f"/apis/kubevirt.io/v1/namespaces/default/virtualmachines/{running}/status", json=vm
    )
    assert r.status_code in (200, 409), r.text  # 409: the VM moved on since it was read
    missing = cluster.http.get("/apis/kubevirt.io/v1/namespaces/default/virtualmachines/no/status")
    assert missing.status_code == 404
    # kinds without a status have no such subresource, as their CRDs
    assert (
        cluster.http.get(
            "/apis/instancetype.kubevirt.io/v1beta1/virtualmachineclusterinstancetypes/x/status"
        ).status_code
        == 404
    )


def test_status_of_a_pool(cluster: Cluster, tmp_path: Path) -> None:
    pool = {
        "apiVersion": "pool.kubevirt.io/v1alpha1",
        "kind": "VirtualMachinePool",
        "metadata": {"name": "auto-pool"},
        "spec": {
            "replicas": 0,
            "selector": {"matchLabels": {"pool": "auto"}},
            "virtualMachineTemplate": {
                "metadata": {"labels": {"pool": "auto"}},
                "spec": _vm("x")["spec"],
            },
        },
    }
    cluster.kubectl("apply", "-f", str(_write(tmp_path, pool)))
    _, custom = _clients(cluster)
    got = custom.get_namespaced_custom_object_status(
        "pool.kubevirt.io", "v1alpha1", "default", "virtualmachinepools", "auto-pool"
    )
    assert got["metadata"]["name"] == "auto-pool"
