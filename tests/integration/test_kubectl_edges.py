"""`virtstream apply` as kubectl's, and the edges of kubectl against the api, with the real
kubectl on one `virtstream up --nodes 1`:

- client-side apply: the last-applied annotation both tools read and write, the same
  three-way merge patch kubectl sends, fields others set left alone, fields dropped from
  the manifest deleted; `--server-side` with its conflicts;
- an unknown kind gets kubectl's own `no matches for kind ... ensure CRDs are installed
  first` (its protobuf OpenAPI request is answered);
- `explain` with KubeVirt's descriptions;
- a strategic merge patch of a KubeVirt kind is 415, as a CRD answers; JSON-patch failures
  in the API server's words;
- nodes' columns, and `get vmis -o wide` with KubeVirt's priority-1 columns."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from client import apply as client_apply
from ops.supervisor import importable
from tests.conftest import REPO
from tests.integration.polling import until
from tests.integration.test_kubectl import CIRROS, Cluster, _rows, _write
from tests.integration.up_process import running_up

pytestmark = pytest.mark.skipif(
    not (importable("services.api") and importable("services.handler")),
    reason="api, controller and handlers are needed",
)

VMS = "/apis/kubevirt.io/v1/namespaces/default/virtualmachines"


@dataclass
class Up(Cluster):
    def virtstream(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        out = subprocess.run(
            [sys.executable, "-m", "cli.main", "--server", self.url, *args],
            cwd=REPO, capture_output=True, text=True, timeout=90,
        )  # fmt: skip
        if check:
            assert out.returncode == 0, f"virtstream {' '.join(args)}: {out.stderr}"
        return out

    def vm(self, name: str) -> dict[str, Any]:
        return dict(self.http.get(f"{VMS}/{name}").json())

    def kubectl_patch_body(self, *args: str) -> dict[str, Any]:
        """The PATCH body `kubectl apply` sends (a server-side dry run: nothing changes)."""
        out = self.kubectl(*args, "--dry-run=server", "-v=8").err
        bodies = [
            json.loads(json.loads(line.split('"Request Body" body=', 1)[1]))
            for line in out.splitlines()
            if '"Request Body" body="{' in line
        ]
        assert bodies, out
        return dict(bodies[-1])


@pytest.fixture(scope="module")
def cluster() -> Iterator[Up]:
    with running_up("vs-kedge-", 1) as up:
        yield Up(up.url, up.http, up.data_dir / "kubeconfig", up.data_dir)


# ------------------------------------------------------------------- apply
def test_virtstream_apply_reads_and_writes_kubectls_annotation(cluster: Up) -> None:
    v, k = cluster.virtstream, cluster.kubectl
    assert v("apply", "-f", str(CIRROS)).stdout.strip() == (
        "virtualmachine.kubevirt.io/vm-cirros created"
    )
    # kubectl finds its own annotation: nothing to send
    assert k("apply", "-f", str(CIRROS)).out.strip() == (
        "virtualmachine.kubevirt.io/vm-cirros unchanged"
    )
    shown = k("apply", "view-last-applied", "vm/vm-cirros", "-o", "json").out
    assert json.loads(shown)["spec"]["runStrategy"] == "Halted"
    # and the other way round
    k("delete", "vm", "vm-cirros")
    k("apply", "-f", str(CIRROS))
    assert v("apply", "-f", str(CIRROS)).stdout.strip() == (
        "virtualmachine.kubevirt.io/vm-cirros unchanged"
    )


def test_virtstream_apply_sends_kubectls_three_way_patch(cluster: Up, tmp_path: Path) -> None:
    v, k = cluster.virtstream, cluster.kubectl
    manifest = yaml.safe_load(CIRROS.read_text())
    manifest["metadata"]["name"] = "vm-3way"
    manifest["metadata"]["labels"]["extra"] = "x"
    path = _write(tmp_path, manifest)
    v("apply", "-f", str(path))
    # another writer: a label the manifest does not name, and a started VM
    k("label", "vm", "vm-3way", "tier=web")
    v("start", "vm-3way")
    assert cluster.vm("vm-3way")["spec"]["runStrategy"] == "Always"
    rv = cluster.vm("vm-3way")["metadata"]["resourceVersion"]

    # re-applied unchanged: kubectl and virtstream both send runStrategy back (the
    # manifest names it), and nothing about the label only kubectl's `label` set
    current = cluster.vm("vm-3way")
    config = client_apply.modified(manifest, "default")
    ours = client_apply.three_way(client_apply.original(current), config, current)
    assert ours == cluster.kubectl_patch_body("apply", "-f", str(path))
    assert ours == {"spec": {"runStrategy": "Halted"}}
    assert cluster.vm("vm-3way")["metadata"]["resourceVersion"] == rv  # the dry run

    # the manifest drops its extra label: deleted; the label set by `kubectl label` stays
    del manifest["metadata"]["labels"]["extra"]
    path = _write(tmp_path, manifest)
    config = client_apply.modified(manifest, "default")
    ours = client_apply.three_way(client_apply.original(current), config, current)
    assert ours == cluster.kubectl_patch_body("apply", "-f", str(path))
    assert v("apply", "-f", str(path)).stdout.strip() == (
        "virtualmachine.kubevirt.io/vm-3way configured"
    )
    after = cluster.vm("vm-3way")
    assert after["metadata"]["labels"] == {"kubevirt.io/vm": "vm-cirros", "tier": "web"}
    assert after["spec"]["runStrategy"] == "Halted"
    assert v("apply", "-f", str(path)).stdout.strip() == (
        "virtualmachine.kubevirt.io/vm-3way unchanged"
    )


def test_apply_of_an_object_created_without_the_annotation_warns_and_adds_it(
    cluster: Up, tmp_path: Path
) -> None:
    manifest = yaml.safe_load(CIRROS.read_text())
    manifest["metadata"]["name"] = "vm-created"
    assert cluster.http.post(VMS, json=manifest).status_code == 201
    out = cluster.virtstream("apply", "-f", str(_write(tmp_path, manifest)))
    assert out.stdout.strip() == "virtualmachine.kubevirt.io/vm-created configured"
    assert (
        "Warning: resource virtualmachines/vm-created is missing the "
        "kubectl.kubernetes.io/last-applied-configuration annotation" in out.stderr
    )
    annotations = cluster.vm("vm-created")["metadata"]["annotations"]
    assert client_apply.LAST_APPLIED in annotations


def test_virtstream_apply_server_side(cluster: Up, tmp_path: Path) -> None:
    v = cluster.virtstream
    manifest = yaml.safe_load(CIRROS.read_text())
    manifest["metadata"]["name"] = "vm-ssa"
    path = _write(tmp_path, manifest)
    assert v("apply", "--server-side", "-f", str(path)).stdout.strip() == (
        "virtualmachine.kubevirt.io/vm-ssa serverside-applied"
    )
    managers = {m["manager"] for m in cluster.vm("vm-ssa")["metadata"]["managedFields"]}
    assert managers == {"virtstream"}
    manifest["spec"]["runStrategy"] = "Manual"
    other = _write(tmp_path, manifest)
    refused = v("apply", "--server-side", "--field-manager=other", "-f", str(other), check=False)
    assert refused.returncode == 1
    assert refused.stderr.strip() == (
        'Error from server (Conflict): Apply failed with 1 conflict: conflict with "virtstream" '
        "using kubevirt.io/v1: .spec.runStrategy"
    )
    v("apply", "--server-side", "--field-manager=other", "--force-conflicts", "-f", str(other))
    assert cluster.vm("vm-ssa")["spec"]["runStrategy"] == "Manual"
    # the same via kubectl reads as the same owner's
    assert (
        cluster.kubectl(
            "apply", "--server-side", "--field-manager=other", "-f", str(other)
        ).out.strip()
        == "virtualmachine.kubevirt.io/vm-ssa serverside-applied"
    )


# ------------------------------------------------------------- kubectl's edges
def test_an_unknown_kind_gets_kubectls_own_message(cluster: Up, tmp_path: Path) -> None:
    backup = {  # a KubeVirt kind not served here
        "apiVersion": "backup.kubevirt.io/v1alpha1",
        "kind": "VirtualMachineBackup",
        "metadata": {"name": "testbackup"},
        "spec": {"source": {"apiGroup": "kubevirt.io", "kind": "VirtualMachine", "name": "x"}},
    }
    path = _write(tmp_path, backup)
    for verb in ("apply", "create"):
        out = cluster.kubectl(verb, "-f", str(path), check=False)
        assert out.code == 1
        assert out.err.strip().splitlines() == [
            f'error: resource mapping not found for name: "testbackup" namespace: "" from '
            f'"{path}": no matches for kind "VirtualMachineBackup" in version '
            '"backup.kubevirt.io/v1alpha1"',
            "ensure CRDs are installed first",
        ]


def test_explain_shows_kubevirts_descriptions(cluster: Up) -> None:
    k = cluster.kubectl
    cpu = k("explain", "vm.spec.template.spec.domain.cpu").out
    assert "CPU allows specifying the CPU topology." in cpu
    assert "Cores specifies the number of cores inside the vmi." in cpu
    assert "<no description>" not in k("explain", "vmi.spec.domain.devices.disks").out
    migration = k("explain", "vmim.spec.vmiName").out
    assert "The name of the VMI to perform the migration on." in migration


def test_a_strategic_merge_patch_of_a_kubevirt_kind_is_415(cluster: Up) -> None:
    before = cluster.seq()
    out = cluster.kubectl("patch", "vm", "vm-cirros", "-p", '{"spec":{"runStrategy":"Always"}}',
                          check=False)  # fmt: skip
    assert out.code == 1
    assert out.err.strip() == (
        "error: application/strategic-merge-patch+json is not supported by kubevirt.io/v1, "
        "Kind=VirtualMachine: the body of the request was in an unknown format - accepted "
        "media types include: application/json-patch+json, application/merge-patch+json, "
        "application/apply-patch+yaml"
    )
    assert cluster.seq() == before


def test_json_patch_failures_are_the_api_servers_words(cluster: Up) -> None:
    k = cluster.kubectl
    test_op = '[{"op":"test","path":"/spec/runStrategy","value":"Always"}]'
    failed = k("patch", "vm", "vm-cirros", "--type", "json", "-p", test_op, check=False)
    assert failed.code == 1
    assert failed.err.strip() == (
        "The request is invalid: the server rejected our request due to an error in our request"
    )
    raw = cluster.http.patch(
        f"{VMS}/vm-cirros",
        content=b'{"op":"test"}',
        headers={"Content-Type": "application/json-patch+json"},
    )
    assert raw.status_code == 400
    assert raw.json()["message"] == (
        "json: cannot unmarshal object into Go value of type jsonpatch.Patch"
    )
    for text in (failed.err, raw.text):
        assert "<class" not in text and "Halted" not in text


def test_nodes_and_wide_vmis_show_the_columns_a_kubevirt_cluster_shows(
    cluster: Up, tmp_path: Path
) -> None:
    k = cluster.kubectl
    nodes = _rows(k("get", "nodes").out)
    assert nodes[0] == ["NAME", "STATUS", "ROLES", "AGE", "VERSION"]
    assert nodes[1][:3] == ["node-1", "Ready", "<none>"]
    wide = _rows(k("get", "nodes", "-o", "wide").out)
    assert wide[0][5:] == [
        "INTERNAL-IP", "EXTERNAL-IP", "OS-IMAGE", "KERNEL-VERSION", "CONTAINER-RUNTIME"
    ]  # fmt: skip
    assert "127.0.0.1" in wide[1] and "<none>" in wide[1]
    cluster.virtstream("cordon", "node-1")  # virtstream's subresource, as `kubectl cordon`
    try:
        assert _rows(k("get", "nodes").out)[1][1] == "Ready,SchedulingDisabled"
    finally:
        cluster.virtstream("uncordon", "node-1")

    vmi = {
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachineInstance",
        "metadata": {"name": "vmi-wide"},
        "spec": {"domain": {"memory": {"guest": "64Mi"}, "devices": {}},
                 "terminationGracePeriodSeconds": 0},
    }  # fmt: skip
    k("apply", "-f", str(_write(tmp_path, vmi)))
    until(lambda: "Running" in k("get", "vmi", "vmi-wide").out, 60, "vmi-wide Running")
    plain = _rows(cluster.virtstream("get", "vmis").stdout)
    assert plain[0] == ["NAME", "AGE", "PHASE", "IP", "NODENAME", "READY"]
    shown = _rows(cluster.virtstream("get", "vmis", "-o", "wide").stdout)
    assert shown[0] == [
        "NAME", "AGE", "PHASE", "IP", "NODENAME", "READY", "LIVE-MIGRATABLE", "PAUSED"
    ]  # fmt: skip
    by_kubectl = _rows(k("get", "vmis", "-o", "wide").out)
    assert by_kubectl[0] == shown[0]
    assert next(r for r in by_kubectl if r[0] == "vmi-wide")[-1] == "True"  # LiveMigratable
    k("delete", "vmi", "vmi-wide", "--wait=false")
