"""Launcher pods and Services with the real clients on one `virtstream up --nodes 1` (the
libvirt test driver): `kubectl get pods` (wide, field and label selectors), `describe pod`,
`describe node` (which lists the node's pods by field selector), `virtstream expose` as
`virtctl expose`, `kubectl get svc,endpoints`, a Service through `kubectl create -f` and the
`kubernetes` client's CoreV1Api for pods and services."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client, config, watch
from kubernetes.dynamic import DynamicClient

from ops.supervisor import importable
from tests.conftest import REPO
from tests.integration.polling import until
from tests.integration.test_kubectl import EXAMPLES, Cluster
from tests.integration.up_process import running_up

pytestmark = pytest.mark.skipif(
    not (importable("services.api") and importable("services.handler")),
    reason="api, controller and handlers are needed",
)


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    with running_up("vs-pods-", 1) as up:
        c = Cluster(up.url, up.http, up.data_dir / "kubeconfig", up.data_dir)
        c.kubectl("apply", "-f", str(EXAMPLES / "vm-cirros.yaml"))
        c.kubectl("patch", "vm", "vm-cirros", "--type", "merge",
                  "-p", '{"spec":{"runStrategy":"Always"}}')  # fmt: skip
        until(
            lambda: "Running" in c.kubectl("get", "vmi", "vm-cirros", check=False).out,
            60,
            "vm-cirros running",
        )
        yield c


def _pod(cluster: Cluster) -> dict[str, Any]:
    pods = json.loads(cluster.kubectl("get", "pods", "-o", "json").out)["items"]
    (pod,) = [p for p in pods if p["metadata"]["labels"]["vm.kubevirt.io/name"] == "vm-cirros"]
    return pod


def _cli(cluster: Cluster, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "VIRTSTREAM_SERVER": cluster.url}
    return subprocess.run(
        [sys.executable, "-m", "cli.main", *args],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip


def test_kubectl_gets_the_launcher_pod(cluster: Cluster) -> None:
    k = cluster.kubectl
    pod = _pod(cluster)
    name = pod["metadata"]["name"]
    assert name.startswith("virt-launcher-vm-cirros-") and len(name.rsplit("-", 1)[1]) == 5
    vmi = json.loads(k("get", "vmi", "vm-cirros", "-o", "json").out)
    assert pod["metadata"]["labels"]["kubevirt.io/created-by"] == vmi["metadata"]["uid"]
    assert pod["metadata"]["ownerReferences"][0]["uid"] == vmi["metadata"]["uid"]
    rows = k("get", "pods").out.splitlines()
    assert rows[0].split() == ["NAME", "READY", "STATUS", "RESTARTS", "AGE"]
    assert rows[1].split()[:4] == [name, "2/2", "Running", "0"]
    wide = k("get", "pods", "-o", "wide", "--field-selector", "spec.nodeName=node-1").out
    header, row = wide.splitlines()
    assert header.split()[5:7] == ["IP", "NODE"]
    assert row.split()[6] == "node-1"
    none = k("get", "pods", "--field-selector", "spec.nodeName=node-9").err
    assert "No resources found in default namespace." in none
    assert k("get", "pods", "-l", "kubevirt.io=virt-launcher", "-o", "name").out.strip() == (
        f"pod/{name}"
    )
    assert name in k("get", "pods", "-A").out
    bad = k("get", "pods", "--field-selector", "spec.image=x", check=False)
    assert bad.code == 1 and 'field label not supported: "spec.image"' in bad.err


def test_kubectl_describes_the_pod_and_its_node(cluster: Cluster) -> None:
    k = cluster.kubectl
    name = _pod(cluster)["metadata"]["name"]
    described = k("describe", "pod", name).out
    for line in (
        f"Name:             {name}",
        "Node:             node-1/127.0.0.1",
        "Status:           Running",
        "Controlled By:    VirtualMachineInstance/vm-cirros",
        "kubevirt.io=virt-launcher",
    ):
        assert line in described, described
    assert "compute:" in described and "guest-console-log:" in described
    logs = k("logs", name, check=False)  # the test driver's nodes keep no launcher logs
    assert logs.code == 1 and "which serves none (the libvirt test driver's nodes)" in logs.err
    node = k("describe", "node", "node-1").out
    assert "Non-terminated Pods:          (1 in total)" in node, node
    assert name in node


def test_virtstream_expose_makes_a_node_port_service_with_endpoints(cluster: Cluster) -> None:
    k = cluster.kubectl
    done = _cli(cluster, "expose", "vm", "vm-cirros", "--port", "22", "--name", "ssh",
                "--type", "NodePort")  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "Service ssh successfully created for vm vm-cirros"
    svc = json.loads(k("get", "svc", "ssh", "-o", "json").out)
    port = svc["spec"]["ports"][0]
    assert svc["spec"]["selector"] == {"vmi.kubevirt.io/id": "vm-cirros"}
    assert (port["port"], port["targetPort"], port["protocol"]) == (22, 22, "TCP")
    assert 30000 <= port["nodePort"] <= 32767
    assert svc["metadata"]["ownerReferences"][0]["kind"] == "VirtualMachine"
    shown = k("get", "svc,endpoints").out
    assert "service/ssh   NodePort" in shown
    assert f"22:{port['nodePort']}/TCP" in shown
    assert "endpoints/ssh" in shown  # test mode: the guest has no address, so no endpoint
    described = k("describe", "svc", "ssh").out
    assert "Type:                     NodePort" in described, described
    assert f"NodePort:                 <unset>  {port['nodePort']}/TCP" in described, described
    again = _cli(cluster, "expose", "vm", "vm-cirros", "--port", "22", "--name", "ssh")
    assert again.returncode == 1
    assert 'service creation failed: services "ssh" already exists' in again.stderr
    missing = _cli(cluster, "expose", "vmi", "nope", "--port", "22", "--name", "x")
    assert "error fetching VirtualMachineInstance" in missing.stderr
    no_port = _cli(cluster, "expose", "vm", "vm-cirros", "--name", "x")
    assert "couldn't find port via --port flag or introspection" in no_port.stderr


def test_a_service_from_a_manifest_and_the_python_client(cluster: Cluster) -> None:
    k = cluster.kubectl
    manifest = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "web"},
        "spec": {"selector": {"kubevirt.io/vm": "vm-cirros"}, "ports": [{"port": 80}]},
    }
    created = subprocess.run(
        ["kubectl", "create", "-f", "-"], input=json.dumps(manifest), capture_output=True,
        text=True, env={**os.environ, "KUBECONFIG": str(cluster.kubeconfig),
                        "HOME": str(cluster.home)}, timeout=60,
    )  # fmt: skip
    assert created.returncode == 0, created.stderr
    assert "ClusterIP" in k("get", "svc", "web").out
    api: Any = client.CoreV1Api(config.new_client_from_config(str(cluster.kubeconfig)))
    pods = api.list_namespaced_pod("default")
    assert [p.metadata.labels["vm.kubevirt.io/name"] for p in pods.items] == ["vm-cirros"]
    assert pods.items[0].status.phase == "Running"
    assert pods.items[0].spec.node_name == "node-1"
    seen = [
        (e["type"], e["object"].metadata.name)
        for e in watch.Watch().stream(api.list_namespaced_pod, "default", timeout_seconds=2)
    ]
    assert seen == [("ADDED", pods.items[0].metadata.name)]
    on_node = api.list_pod_for_all_namespaces(field_selector="spec.nodeName=node-1")
    assert len(on_node.items) == 1
    services: dict[str, Any] = {
        s.metadata.name: s for s in api.list_namespaced_service("default").items
    }
    assert services["web"].spec.type == "ClusterIP"
    assert services["web"].spec.ports[0].target_port == 80
    assert services["ssh"].spec.ports[0].node_port >= 30000
    # the dynamic client kubernetes.core (and kubevirt.core's inventory) finds kinds with
    dynamic = DynamicClient(config.new_client_from_config(str(cluster.kubeconfig)))
    found = dynamic.resources.get(api_version="v1", kind="Service").get(namespace="default")
    assert {s.metadata.name for s in found.items} == {"ssh", "web"}
    pods = dynamic.resources.get(api_version="v1", kind="Pod").get(
        namespace="default", label_selector="kubevirt.io=virt-launcher"
    )
    assert len(pods.items) == 1
    slices = json.loads(k("get", "endpointslices", "-o", "json").out)["items"]
    assert {s["metadata"]["labels"]["kubernetes.io/service-name"] for s in slices} == {"ssh", "web"}
    ep = api.read_namespaced_endpoints("web", "default")
    assert ep.metadata.name == "web"
    patched = api.patch_namespaced_service("web", "default", {"metadata": {"labels": {"a": "b"}}})
    assert patched.metadata.labels == {"a": "b"}
    deleted = api.delete_namespaced_service("web", "default")  # the Service, as it was
    assert deleted.metadata.name == "web" and deleted.spec.type == "ClusterIP"
    assert "service/web" not in k("get", "svc", "-o", "name").out
    assert k("delete", "svc", "ssh").out.strip() == 'service "ssh" deleted from default namespace'
