"""Every version KubeVirt serves, with the real kubectl and the `kubernetes` client on one
`virtstream up --nodes 1`: KubeVirt's own `vm-pool-cirros.yaml` (pool.kubevirt.io/v1beta1)
applied and read in v1alpha1 too, snapshots through the CustomObjectsApi in both
versions, discovery and explain per version, and the deprecated
VirtualMachineInstancePreset with KubeVirt's warning."""

from __future__ import annotations

import json
import platform
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client, config, watch

from ops.supervisor import importable
from tests.integration.polling import until
from tests.integration.test_kubectl import EXAMPLES, Cluster
from tests.integration.up_process import running_up

pytestmark = pytest.mark.skipif(
    not (importable("services.api") and importable("services.handler")),
    reason="api, controller and handlers are needed",
)

KINDS = EXAMPLES / "kinds"
PRESET_WARNING = (
    "Warning: kubevirt.io/v1 VirtualMachineInstancePresets is now deprecated and will be "
    "removed in v2."
)


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    with running_up("vs-versions-", 1) as up:
        yield Cluster(up.url, up.http, up.data_dir / "kubeconfig", up.data_dir)


def test_kubevirts_v1beta1_pool_example_applies_and_reads_in_both_versions(
    cluster: Cluster,
) -> None:
    k = cluster.kubectl
    pool = str(KINDS / "vm-pool-cirros.yaml")
    assert k("apply", "-f", pool).out.strip() == (
        "virtualmachinepool.pool.kubevirt.io/vm-pool-cirros created"
    )
    assert k("apply", "-f", pool).out.strip().endswith(" unchanged")
    for version in ("v1beta1", "v1alpha1"):
        got = json.loads(
            k("get", f"virtualmachinepools.{version}.pool.kubevirt.io", "vm-pool-cirros",
              "-o", "json").out
        )  # fmt: skip
        assert got["apiVersion"] == f"pool.kubevirt.io/{version}"
        assert got["spec"]["replicas"] == 3
    k("scale", "virtualmachinepools.v1alpha1.pool.kubevirt.io/vm-pool-cirros", "--replicas=0")
    until(lambda: not k("get", "vms", "-o", "name").out.strip(), 60, "the pool's VMs gone")
    shown = k("get", "vmpool", "vm-pool-cirros").out.splitlines()
    assert shown[0].split() == ["NAME", "DESIRED", "CURRENT", "READY", "AGE"]
    assert shown[1].split()[:2] == ["vm-pool-cirros", "0"]
    gone = k("delete", "virtualmachinepools.v1alpha1.pool.kubevirt.io", "vm-pool-cirros")
    assert (
        gone.out.strip()
        == 'virtualmachinepool.pool.kubevirt.io "vm-pool-cirros" deleted from default namespace'
    )


def test_discovery_and_explain_have_every_version(cluster: Cluster) -> None:
    k = cluster.kubectl
    served = set(k("api-versions").out.split())
    assert {
        "kubevirt.io/v1", "kubevirt.io/v1alpha3", "pool.kubevirt.io/v1alpha1",
        "pool.kubevirt.io/v1beta1", "snapshot.kubevirt.io/v1alpha1",
        "snapshot.kubevirt.io/v1beta1", "instancetype.kubevirt.io/v1beta1",
        "migrations.kubevirt.io/v1alpha1",
    } <= served  # fmt: skip
    rows = k("api-resources", "--api-group=pool.kubevirt.io", "--no-headers").out.split()
    assert "pool.kubevirt.io/v1beta1" in rows  # the preferred version
    group = json.loads(k("get", "--raw", "/apis/pool.kubevirt.io").out)
    assert group["preferredVersion"]["version"] == "v1beta1"
    explained = k("explain", "virtualmachinepools", "--api-version=pool.kubevirt.io/v1alpha1")
    assert "VERSION:    v1alpha1" in explained.out
    old = k("get", "virtualmachines.v1alpha3.kubevirt.io")
    assert (
        "Warning: kubevirt.io/v1alpha3 is now deprecated and will be removed in a future release."
        in old.err
    )


def test_the_kubernetes_client_reads_and_writes_snapshots_in_both_versions(
    cluster: Cluster,
) -> None:
    k = cluster.kubectl
    k("apply", "-f", str(EXAMPLES / "vm-cirros.yaml"))
    api: Any = client.CustomObjectsApi(config.new_client_from_config(str(cluster.kubeconfig)))
    group, plural = "snapshot.kubevirt.io", "virtualmachinesnapshots"
    body: dict[str, Any] = {
        "apiVersion": f"{group}/v1alpha1",
        "kind": "VirtualMachineSnapshot",
        "metadata": {"name": "snap-old"},
        "spec": {"source": {"apiGroup": "kubevirt.io", "kind": "VirtualMachine",
                            "name": "vm-cirros"}},
    }  # fmt: skip
    made = api.create_namespaced_custom_object(group, "v1alpha1", "default", plural, body)
    assert made["apiVersion"] == f"{group}/v1alpha1"
    new = api.get_namespaced_custom_object(group, "v1beta1", "default", plural, "snap-old")
    assert new["apiVersion"] == f"{group}/v1beta1"
    assert new["spec"] == body["spec"] and new["metadata"]["uid"] == made["metadata"]["uid"]
    patched = api.patch_namespaced_custom_object(
        group, "v1beta1", "default", plural, "snap-old", {"metadata": {"labels": {"a": "b"}}}
    )
    assert patched["apiVersion"] == f"{group}/v1beta1"
    seen = [
        (e["type"], e["object"]["apiVersion"])
        for e in watch.Watch().stream(
            api.list_namespaced_custom_object, group, "v1alpha1", "default", plural,
            timeout_seconds=2,
        )
    ]  # fmt: skip
    assert seen and seen[0] == ("ADDED", f"{group}/v1alpha1")
    assert {v for _, v in seen} == {f"{group}/v1alpha1"}
    listed = api.list_namespaced_custom_object(group, "v1alpha1", "default", plural)
    assert [(i["apiVersion"], i["metadata"]["labels"]) for i in listed["items"]] == [
        (f"{group}/v1alpha1", {"a": "b"})
    ]
    api.delete_namespaced_custom_object(group, "v1alpha1", "default", plural, "snap-old")
    until(
        lambda: not api.list_namespaced_custom_object(group, "v1beta1", "default", plural)["items"],
        30,
        "the snapshot gone",
    )


def test_a_preset_is_served_with_kubevirts_deprecation_warning(
    cluster: Cluster, tmp_path: Path
) -> None:
    k = cluster.kubectl
    preset = str(KINDS / "vmi-preset-small.yaml")
    made = k("apply", "-f", preset)
    assert made.out.strip() == "virtualmachineinstancepreset.kubevirt.io/vmi-preset-small created"
    assert PRESET_WARNING in made.err
    listed = k("get", "vmipresets")
    assert listed.out.split() == ["NAME", "AGE", "vmi-preset-small", listed.out.split()[-1]]
    assert PRESET_WARNING in listed.err
    got = json.loads(k("get", "vmipreset", "vmi-preset-small", "-o", "json").out)
    assert got["spec"]["selector"] == {"matchLabels": {"kubevirt.io/vmPreset": "vmi-preset-small"}}
    bad = tmp_path / "no-domain.json"
    bad.write_text(json.dumps(
        {"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstancePreset",
         "metadata": {"name": "no-domain"}, "spec": {"selector": {}}}
    ))  # fmt: skip
    refused = k("create", "-f", str(bad), check=False)
    assert refused.code == 1
    assert (
        'The VirtualMachineInstancePreset "no-domain" is invalid: spec.domain: missing domain.'
        in (refused.err)
    )
    gone = k("delete", "-f", preset)
    assert (
        gone.out.strip() == 'virtualmachineinstancepreset.kubevirt.io "vmi-preset-small" deleted '
        "from default namespace"
    )
    assert k("get", "vmipresets", "-o", "name").out.strip() == ""


def test_nodes_show_their_version_os_kernel_and_runtime_as_a_cluster_does(
    cluster: Cluster,
) -> None:
    k = cluster.kubectl
    lines = k("get", "nodes").out.splitlines()
    assert lines[0].split() == ["NAME", "STATUS", "ROLES", "AGE", "VERSION"]
    assert lines[1].split()[:3] == ["node-1", "Ready", "<none>"]
    assert lines[1].split()[4] == "v1.33.0-virtstream"  # the server's own Kubernetes version
    wide = k("get", "nodes", "-o", "wide").out.splitlines()
    assert wide[0].split() == [
        "NAME", "STATUS", "ROLES", "AGE", "VERSION", "INTERNAL-IP", "EXTERNAL-IP",
        "OS-IMAGE", "KERNEL-VERSION", "CONTAINER-RUNTIME",
    ]  # fmt: skip
    info = json.loads(k("get", "node", "node-1", "-o", "json").out)["status"]["nodeInfo"]
    assert info["kernelVersion"] == platform.release()
    assert info["containerRuntimeVersion"].startswith("libvirt://")
    assert info["architecture"] and info["operatingSystem"] == "linux"
    row = wide[1]
    for shown in (info["osImage"], info["kernelVersion"], info["containerRuntimeVersion"]):
        assert shown in row
