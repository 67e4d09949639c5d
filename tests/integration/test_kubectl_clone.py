"""VirtualMachineClone and VirtualMachineExport with the real kubectl and the `kubernetes`
client on one `virtstream up --nodes 1`: the user guide's clone (`kubectl create -f`,
`kubectl wait --for condition=Ready`) makes a Halted target with the filtered labels and
annotations, the given MAC, a blank one elsewhere and the new SMBIOS serial; the clone's
snapshot and restore are gone afterwards; a clone of a snapshot (the "golden image")
through the client; bad input refused with KubeVirt's words and nothing created. The user
guide's export Secret and VirtualMachineExport: Ready with KubeVirt's links, a download
refused without the token (test mode has no disk images: tests/integration/
test_qemu_export.py downloads one)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, cast

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

# the user guide's clone object (storage/clone_api.md), in the version KubeVirt stores
USER_GUIDE_CLONE = """\
kind: VirtualMachineClone
apiVersion: "clone.kubevirt.io/v1beta1"
metadata:
  name: testclone

spec:
  # source & target definitions
  source:
    apiGroup: kubevirt.io
    kind: VirtualMachine
    name: vm-cirros
  target:
    apiGroup: kubevirt.io
    kind: VirtualMachine
    name: vm-clone-target

  # labels & annotations definitions
  labelFilters:
    - "*"
    - "!someKey/*"
  annotationFilters:
    - "anotherKey/*"

  # template labels & annotations definitions
  template:
    labelFilters:
      - "*"
      - "!someKey/*"
    annotationFilters:
      - "anotherKey/*"

  # other identity stripping specs:
  newMacAddresses:
    interfaceName: "00-11-22"
  newSMBiosSerial: "new-serial"
"""


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    with running_up("vs-clone-", 1) as up:
        yield Cluster(up.url, up.http, up.data_dir / "kubeconfig", up.data_dir)


def _source_vm(cluster: Cluster, tmp: Any) -> None:
    vm = yaml.safe_load((EXAMPLES / "vm-cirros.yaml").read_text())
    vm["metadata"]["labels"] = {"app": "cirros", "someKey/zone": "a"}
    vm["metadata"]["annotations"] = {"anotherKey/owner": "ops", "note": "drop me"}
    template = vm["spec"]["template"]
    template["metadata"].setdefault("labels", {})["someKey/t"] = "x"
    template["metadata"]["annotations"] = {"anotherKey/t": "kept", "ovn.kubernetes.io/ip": "x"}
    domain = template["spec"]["domain"]
    domain["devices"]["interfaces"] = [{"name": "default", "masquerade": {}}]
    template["spec"]["networks"] = [{"name": "default", "pod": {}}]
    domain["firmware"] = {"serial": "old-serial"}
    (tmp / "vm.yaml").write_text(yaml.safe_dump(vm))
    cluster.kubectl("create", "-f", str(tmp / "vm.yaml"))


def test_the_user_guides_clone_makes_a_stripped_halted_copy(
    cluster: Cluster, tmp_path: Any
) -> None:
    k = cluster.kubectl
    _source_vm(cluster, tmp_path)
    # the guide's MAC (3 octets) is one KubeVirt's admitter refuses: nothing is created
    (tmp_path / "guide.yaml").write_text(USER_GUIDE_CLONE)
    refused = k("create", "-f", str(tmp_path / "guide.yaml"), check=False)
    assert refused.code == 1
    assert refused.err.strip() == (
        'The VirtualMachineClone "testclone" is invalid: spec.newMacAddresses.interfaceName: '
        "interface interfaceName has malformed MAC address (00-11-22)."
    )
    assert k("get", "vmclone", "testclone", check=False).code == 1

    clone = USER_GUIDE_CLONE.replace('interfaceName: "00-11-22"', 'default: "02:00:00:11:22:33"')
    (tmp_path / "clone.yaml").write_text(clone)
    out = k("create", "-f", str(tmp_path / "clone.yaml")).out.strip()
    assert out == "virtualmachineclone.clone.kubevirt.io/testclone created"
    waited = k("wait", "vmclone", "testclone", "--for", "condition=Ready", "--timeout=90s")
    assert waited.out.strip() == "virtualmachineclone.clone.kubevirt.io/testclone condition met"

    got = yaml.safe_load(k("get", "vmclone", "testclone", "-o", "yaml").out)
    assert got["status"]["phase"] == "Succeeded"
    assert got["status"]["targetName"] == "vm-clone-target"
    assert "snapshotName" not in got["status"] and "restoreName" not in got["status"]
    rows = [line.split() for line in k("get", "vmclone").out.strip().splitlines()]
    # a CRD with printer columns shows those alone (no AGE), as KubeVirt's does
    assert rows[0] == ["NAME", "PHASE", "SOURCEVIRTUALMACHINE", "TARGETVIRTUALMACHINE"]
    assert rows[1][:4] == ["testclone", "Succeeded", "vm-cirros", "vm-clone-target"]

    target = yaml.safe_load(k("get", "vm", "vm-clone-target", "-o", "yaml").out)
    meta = target["metadata"]
    assert meta["labels"] == {"app": "cirros"}
    assert meta["annotations"].get("anotherKey/owner") == "ops"
    assert "note" not in meta["annotations"]
    tmeta = target["spec"]["template"]["metadata"]
    assert "someKey/t" not in tmeta.get("labels", {})
    assert tmeta["annotations"] == {"anotherKey/t": "kept"}
    domain = target["spec"]["template"]["spec"]["domain"]
    assert domain["devices"]["interfaces"][0]["macAddress"] == "02:00:00:11:22:33"
    assert domain["firmware"]["serial"] == "new-serial"
    source = yaml.safe_load(k("get", "vm", "vm-cirros", "-o", "yaml").out)
    source_uuid = source["spec"]["template"]["spec"]["domain"]["firmware"]["uuid"]
    assert domain["firmware"]["uuid"] not in ("", source_uuid)
    assert target["spec"]["runStrategy"] == "Halted"
    # the clone's snapshot and restore were its own: cleaned up
    until(lambda: k("get", "vmsnapshot", "-o", "name").out.strip() == "")
    until(lambda: k("get", "vmrestore", "-o", "name").out.strip() == "")


def test_a_clone_of_a_snapshot_through_the_client(cluster: Cluster, tmp_path: Any) -> None:
    from kubernetes import client, config

    k = cluster.kubectl
    vm = yaml.safe_load((EXAMPLES / "vm-cirros.yaml").read_text())
    vm["metadata"]["name"] = "golden"
    (tmp_path / "vm.yaml").write_text(yaml.safe_dump(vm))
    k("create", "-f", str(tmp_path / "vm.yaml"))
    api = client.CustomObjectsApi(config.new_client_from_config(str(cluster.kubeconfig)))
    snap = {
        "apiVersion": "snapshot.kubevirt.io/v1beta1",
        "kind": "VirtualMachineSnapshot",
        "metadata": {"name": "golden-snap"},
        "spec": {"source": {"apiGroup": "kubevirt.io", "kind": "VirtualMachine", "name": "golden"}},
    }
    api.create_namespaced_custom_object(
        "snapshot.kubevirt.io", "v1beta1", "default", "virtualmachinesnapshots", snap
    )
    clone = {
        "apiVersion": "clone.kubevirt.io/v1beta1",
        "kind": "VirtualMachineClone",
        "metadata": {"name": "from-golden"},
        "spec": {
            "source": {
                "apiGroup": "snapshot.kubevirt.io",
                "kind": "VirtualMachineSnapshot",
                "name": "golden-snap",
            }
        },
    }
    args = ("clone.kubevirt.io", "v1beta1", "default", "virtualmachineclones")
    api.create_namespaced_custom_object(*args, clone)

    def done() -> Any:
        got = cast(dict[str, Any], api.get_namespaced_custom_object(*args, "from-golden"))
        return got if (got.get("status") or {}).get("phase") == "Succeeded" else None

    got = until(done, timeout=90)
    target = got["status"]["targetName"]
    assert target.startswith("golden-clone-") and len(target) == len("golden-clone-") + 5
    assert yaml.safe_load(k("get", "vm", target, "-o", "yaml").out)["spec"]["runStrategy"] == (
        "Halted"
    )
    # a snapshot given as the source is the user's: it stays
    assert k("get", "vmsnapshot", "golden-snap", "-o", "name").out.strip() == (
        "virtualmachinesnapshot.snapshot.kubevirt.io/golden-snap"
    )
    # deleting the target deletes the succeeded clone (KubeVirt's clone controller)
    k("delete", "vm", target, "--wait=true", "--timeout=60s")
    until(lambda: k("get", "vmclone", "from-golden", check=False).code == 1, timeout=60)


def test_a_clone_onto_its_own_source_is_refused(cluster: Cluster, tmp_path: Any) -> None:
    bad = {
        "apiVersion": "clone.kubevirt.io/v1beta1",
        "kind": "VirtualMachineClone",
        "metadata": {"name": "selfie"},
        "spec": {
            "source": {"apiGroup": "kubevirt.io", "kind": "VirtualMachine", "name": "x"},
            "target": {"apiGroup": "kubevirt.io", "kind": "VirtualMachine", "name": "x"},
            "labelFilters": ["some/*/key"],
        },
    }
    (tmp_path / "bad.yaml").write_text(yaml.safe_dump(bad))
    out = cluster.kubectl("create", "-f", str(tmp_path / "bad.yaml"), check=False)
    assert out.code == 1
    assert out.err.startswith('The VirtualMachineClone "selfie" is invalid: ')
    assert "Target name cannot be equal to source name when both are VirtualMachines" in out.err
    assert "spec.labels filter some/*/key is invalid" in out.err
    assert cluster.kubectl("get", "vmclone", "selfie", check=False).code == 1


# the user guide's token Secret and export (storage/export_api.md), in the served version
EXPORT_GUIDE = """\
apiVersion: v1
kind: Secret
metadata:
  name: example-token
stringData:
  token: 1234567890ab
---
apiVersion: export.kubevirt.io/v1beta1
kind: VirtualMachineExport
metadata:
  name: example-export
spec:
  tokenSecretRef: example-token
  source:
    apiGroup: "kubevirt.io"
    kind: VirtualMachine
    name: example-vm
"""


def test_the_user_guides_export_with_kubectl(cluster: Cluster, tmp_path: Any) -> None:
    k = cluster.kubectl
    vm = yaml.safe_load((EXAMPLES / "vm-cirros.yaml").read_text())
    vm["metadata"]["name"] = "example-vm"
    vm["spec"]["template"]["spec"]["volumes"].append(
        {"name": "data", "persistentVolumeClaim": {"claimName": "example-pvc"}}
    )
    vm["spec"]["template"]["spec"]["domain"]["devices"]["disks"].append(
        {"name": "data", "disk": {"bus": "virtio"}}
    )
    (tmp_path / "vm.yaml").write_text(yaml.safe_dump(vm))
    k("create", "-f", str(tmp_path / "vm.yaml"))
    (tmp_path / "export.yaml").write_text(EXPORT_GUIDE)
    created = k("create", "-f", str(tmp_path / "export.yaml"))
    assert created.out.split("\n")[:2] == [
        "secret/example-token created",
        "virtualmachineexport.export.kubevirt.io/example-export created",
    ]
    # the guide's v1beta1 is served, deprecated as KubeVirt's CRD says (v1 is stored)
    assert (
        "Warning: export.kubevirt.io/v1beta1 VirtualMachineExport is now deprecated" in created.err
    )
    secret = yaml.safe_load(k("get", "secret", "example-token", "-o", "yaml").out)
    assert secret["data"] == {"token": "MTIzNDU2Nzg5MGFi"}  # stringData folded, as the guide's
    k("wait", "vmexport", "example-export", "--for", "jsonpath={.status.phase}=Ready",
      "--timeout=60s")  # fmt: skip
    rows = [line.split() for line in k("get", "vmexport").out.strip().splitlines()]
    assert rows == [
        ["NAME", "SOURCEKIND", "SOURCENAME", "PHASE"],
        ["example-export", "VirtualMachine", "example-vm", "Ready"],
    ]
    got = yaml.safe_load(k("get", "vmexport", "example-export", "-o", "yaml").out)
    [volume] = got["status"]["links"]["external"]["volumes"]
    assert [f["format"] for f in volume["formats"]] == ["raw", "gzip"]
    raw = volume["formats"][0]["url"]
    assert raw.startswith(cluster.url) and raw.endswith(
        "/api/export.kubevirt.io/v1/namespaces/default/virtualmachineexports/"
        "example-export/volumes/example-pvc/disk.img"
    )
    path = raw[len(cluster.url) :]
    # the user's credentials are no export token; the token is, but test mode has no disks
    assert cluster.http.get(path).status_code == 401
    found = cluster.http.get(path, headers={"x-kubevirt-export-token": "1234567890ab"})
    assert (found.status_code, found.json()["message"]) == (
        404,
        "volume example-pvc has no disk image (qemu mode only)",
    )
    # a changed spec is refused as KubeVirt's webhook does
    patch = '{"spec":{"ttlDuration":"1h"}}'
    refused = k("patch", "vmexport", "example-export", "--type", "merge", "-p", patch, check=False)
    assert refused.code == 1 and "spec in immutable after creation" in refused.err
