"""Nodes a user writes, through the real kubectl and the official Python client against one
`virtstream up --nodes 2`: `kubectl label|annotate|taint|cordon|uncordon|patch node` and a
PUT, recorded as the node's events and honoured by the scheduler (a `nodeSelector` on a
label, a NoSchedule taint against tolerations); `CoreV1Api().list_node()` and `read_node`
deserialise (a full `status.nodeInfo`), and `allocatable` is the capacity."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client, config

from tests.integration.polling import until
from tests.integration.test_kubectl import Cluster, _vm, _write
from tests.integration.up_process import running_up


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    with running_up("vs-knode-", 2) as up:
        yield Cluster(up.url, up.http, up.data_dir / "kubeconfig", up.data_dir)


def _node(cluster: Cluster, name: str) -> dict[str, Any]:
    return json.loads(cluster.kubectl("get", "node", name, "-o", "json").out)


def test_label_annotate_and_remove(cluster: Cluster) -> None:
    before = cluster.seq()
    out = cluster.kubectl("label", "node", "node-1", "rack=r1").out
    assert out.strip() == "node/node-1 labeled"
    assert _node(cluster, "node-1")["metadata"]["labels"]["rack"] == "r1"
    assert cluster.seq() == before + 1  # one event on the node's aggregate
    shown = cluster.kubectl("get", "nodes", "-l", "rack=r1", "-o", "name").out.split()
    assert shown == ["node/node-1"]
    again = cluster.kubectl("label", "node", "node-1", "rack=r2", check=False)
    assert again.code == 1
    assert "'rack' already has a value (r1), and --overwrite is false" in again.err
    cluster.kubectl("label", "node", "node-1", "rack=r2", "--overwrite")
    assert _node(cluster, "node-1")["metadata"]["labels"]["rack"] == "r2"

    out = cluster.kubectl("annotate", "node", "node-1", "owner=ops").out
    assert out.strip() == "node/node-1 annotated"
    annotations = _node(cluster, "node-1")["metadata"]["annotations"]
    assert annotations["owner"] == "ops"
    assert "kubevirt.io/heartbeat" in annotations  # the server's stay

    cluster.kubectl("label", "node", "node-1", "rack-")
    cluster.kubectl("annotate", "node", "node-1", "owner-")
    meta = _node(cluster, "node-1")["metadata"]
    assert "rack" not in meta["labels"] and "owner" not in meta["annotations"]
    assert meta["labels"]["kubernetes.io/hostname"] == "node-1"

    bad = cluster.kubectl(
        "patch", "node", "node-1", "--type", "merge", "-p",
        '{"metadata":{"labels":{"rack":"not ok!"}}}', check=False,
    )  # fmt: skip
    assert bad.code == 1
    assert 'The Node "node-1" is invalid: metadata.labels: Invalid value: "not ok!": a valid ' \
        "label must be an empty string" in bad.err  # fmt: skip


def test_taints_and_cordon(cluster: Cluster) -> None:
    out = cluster.kubectl("taint", "node", "node-2", "dedicated=gpu:NoSchedule").out
    assert out.strip() == "node/node-2 tainted"
    taints = _node(cluster, "node-2")["spec"]["taints"]
    assert taints == [{"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}]
    bad = cluster.kubectl(
        "patch", "node", "node-2", "--type", "json", "-p",
        '[{"op":"add","path":"/spec/taints/-","value":{"key":"k","effect":"Sometimes"}}]',
        check=False,
    )  # fmt: skip
    assert bad.code == 1
    assert 'spec.taints[1].effect: Unsupported value: "Sometimes": supported values: ' \
        '"NoSchedule", "PreferNoSchedule", "NoExecute"' in bad.err  # fmt: skip
    out = cluster.kubectl("taint", "node", "node-2", "dedicated=gpu:NoSchedule-").out
    assert out.strip() == "node/node-2 untainted"
    assert "taints" not in _node(cluster, "node-2")["spec"]

    assert cluster.kubectl("cordon", "node-1").out.strip() == "node/node-1 cordoned"
    assert _node(cluster, "node-1")["spec"]["unschedulable"] is True
    rows = cluster.kubectl("get", "node", "node-1").out
    assert "Ready,SchedulingDisabled" in rows
    assert cluster.kubectl("cordon", "node-1").out.strip() == "node/node-1 already cordoned"
    assert cluster.kubectl("uncordon", "node-1").out.strip() == "node/node-1 uncordoned"
    assert "unschedulable" not in _node(cluster, "node-1")["spec"]


def test_put_writes_labels_and_keeps_the_agents_fields(cluster: Cluster) -> None:
    node = _node(cluster, "node-2")
    node["metadata"]["labels"]["zone"] = "z2"
    node["status"]["capacity"]["cpu"] = "1000"  # the agent's: not the user's to write
    r = cluster.http.put("/api/v1/nodes/node-2", json=node)
    assert r.status_code == 200, r.text
    after = r.json()
    assert after["metadata"]["labels"]["zone"] == "z2"
    assert after["status"]["capacity"]["cpu"] != "1000"
    stale = cluster.http.put("/api/v1/nodes/node-2", json=node)  # the old resourceVersion
    assert stale.status_code == 409


def _placed(cluster: Cluster, name: str) -> str:
    def node() -> str:
        return cluster.kubectl(
            "get", "vmi", name, "-o", "jsonpath={.status.nodeName}", check=False
        ).out

    until(lambda: node() != "", 60, f"{name} placed")
    return node()


def test_the_scheduler_honours_labels_and_taints(cluster: Cluster, tmp_path: Path) -> None:
    cluster.kubectl("label", "node", "node-2", "disk=ssd")
    vm = _vm("on-ssd", "Always")
    vm["spec"]["template"]["spec"]["nodeSelector"] = {"disk": "ssd"}
    cluster.kubectl("apply", "-f", str(_write(tmp_path, vm)))
    assert _placed(cluster, "on-ssd") == "node-2"

    # a selector no node matches leaves the VMI pending until a node is labelled
    vm = _vm("on-nvme", "Always")
    vm["spec"]["template"]["spec"]["nodeSelector"] = {"disk": "nvme"}
    cluster.kubectl("apply", "-f", str(_write(tmp_path, vm)))
    until(
        lambda: "didn't match Pod's node affinity/selector" in cluster.kubectl(
            "get", "vmi", "on-nvme", "-o", "json", check=False
        ).out,
        30, "on-nvme unschedulable",
    )  # fmt: skip
    cluster.kubectl("label", "node", "node-1", "disk=nvme")
    assert _placed(cluster, "on-nvme") == "node-1"

    # node-1 tainted: a VMI without the toleration goes to node-2, one with it may use node-1
    cluster.kubectl("taint", "node", "node-1", "team=a:NoSchedule")
    cluster.kubectl("label", "node", "node-1", "pool=p", "--overwrite")
    cluster.kubectl("label", "node", "node-2", "pool=p", "--overwrite")
    plain = _vm("untolerated", "Always")
    plain["spec"]["template"]["spec"]["nodeSelector"] = {"pool": "p"}
    cluster.kubectl("apply", "-f", str(_write(tmp_path, plain)))
    assert _placed(cluster, "untolerated") == "node-2"
    cluster.kubectl("taint", "node", "node-2", "team=b:NoSchedule")
    tolerant = _vm("tolerant", "Always")
    tolerant["spec"]["template"]["spec"]["nodeSelector"] = {"disk": "nvme"}
    tolerant["spec"]["template"]["spec"]["tolerations"] = [
        {"key": "team", "operator": "Equal", "value": "a", "effect": "NoSchedule"}
    ]
    cluster.kubectl("apply", "-f", str(_write(tmp_path, tolerant)))
    assert _placed(cluster, "tolerant") == "node-1"
    cluster.kubectl("taint", "node", "node-1", "team-")
    cluster.kubectl("taint", "node", "node-2", "team-")


def test_the_python_clients_typed_node_api(cluster: Cluster) -> None:
    api: Any = client.CoreV1Api(config.new_client_from_config(str(cluster.kubeconfig)))
    nodes = api.list_node()
    assert sorted(n.metadata.name for n in nodes.items) == ["node-1", "node-2"]
    info = nodes.items[0].status.node_info
    assert info.boot_id and info.machine_id and info.system_uuid
    assert info.kube_proxy_version == ""
    assert info.kubelet_version.startswith("v1.")
    node = api.read_node("node-1")
    assert node.status.allocatable == node.status.capacity
    patched = api.patch_node("node-1", {"metadata": {"labels": {"from": "python"}}})
    assert patched.metadata.labels["from"] == "python"
    assert api.read_node("node-1").metadata.labels["from"] == "python"
