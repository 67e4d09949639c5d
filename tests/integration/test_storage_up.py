"""Storage with the real kubectl on `virtstream up --nodes 2` (test mode): the classes
present from the start (`kubectl get sc`, the default one marked); a shared claim binds
at once with its PersistentVolume; local claims bind where the VM that uses them runs, and
its VMI is refused migration with KubeVirt's reason, while a VM on a ReadWriteMany claim
migrates; a missing claim keeps the VMI Pending with KubeVirt's message until it appears;
a claim in use waits for its VMI to end before it and its volume go; the user guide's
DataVolume + VM manifest imports an image over HTTP from a local server (progress, CDI's
annotations, the disk's bytes), and a VM's DataVolume goes with the VM."""

from __future__ import annotations

import functools
import http.server
import json
import os
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from ops.supervisor import importable
from tests.integration.polling import until
from tests.integration.test_kubectl import Cluster
from tests.integration.up_process import running_up

pytestmark = pytest.mark.skipif(
    not (importable("services.api") and importable("services.handler")),
    reason="api, controller and handlers are needed",
)
MARK = b"virtstream-imported-disk\n"

# KubeVirt's user guide (storage/disks_and_volumes.md, dataVolume): a VM whose disk a
# DataVolume template imports over HTTP; the URL is the test's server
USER_GUIDE_VM = """\
apiVersion: kubevirt.io/v1
kind: VirtualMachine
metadata:
  labels:
    kubevirt.io/vm: vm-alpine-datavolume
  name: vm-alpine-datavolume
spec:
  runStrategy: Halted
  template:
    metadata:
      labels:
        kubevirt.io/vm: vm-alpine-datavolume
    spec:
      domain:
        devices:
          disks:
          - disk:
              bus: virtio
            name: datavolumedisk1
        resources:
          requests:
            memory: 64M
      volumes:
      - dataVolume:
          name: alpine-dv
        name: datavolumedisk1
  dataVolumeTemplates:
  - metadata:
      name: alpine-dv
    spec:
      storage:
        resources:
          requests:
            storage: 2Gi
      source:
        http:
          url: URL
"""


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    with running_up("vs-storage-", 2) as up:
        yield Cluster(up.url, up.http, up.data_dir / "kubeconfig", up.data_dir)


@pytest.fixture(scope="module")
def image_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A raw disk image (a marker, then 16 MiB of noise) served over HTTP on loopback."""
    root = tmp_path_factory.mktemp("images")
    (root / "disk.img").write_bytes(MARK + os.urandom(16 << 20))
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(root))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/disk.img"
    finally:
        server.shutdown()
        server.server_close()


def _apply(cluster: Cluster, tmp: Path, *objs: dict[str, Any]) -> None:
    path = tmp / "objs.yaml"
    path.write_text(yaml.safe_dump_all(objs))
    cluster.kubectl("apply", "-f", str(path))


def _claim(name: str, klass: str = "", modes: tuple[str, ...] = ("ReadWriteOnce",)) -> Any:
    spec: dict[str, Any] = {
        "accessModes": list(modes),
        "resources": {"requests": {"storage": "1Gi"}},
    }
    if klass:
        spec["storageClassName"] = klass
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": name},
        "spec": spec,
    }


def _vm(name: str, *claims: str, strategy: str = "Always") -> dict[str, Any]:
    return {
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachine",
        "metadata": {"name": name},
        "spec": {
            "runStrategy": strategy,
            "template": {
                "spec": {
                    "domain": {
                        "memory": {"guest": "64Mi"},
                        "devices": {
                            "disks": [
                                {"name": f"d{i}", "disk": {"bus": "virtio"}}
                                for i, _ in enumerate(claims)
                            ]
                        },
                    },
                    "terminationGracePeriodSeconds": 0,
                    "volumes": [
                        {"name": f"d{i}", "persistentVolumeClaim": {"claimName": c}}
                        for i, c in enumerate(claims)
                    ],
                }
            },
        },
    }


def _get(cluster: Cluster, *args: str) -> Any:
    return json.loads(cluster.kubectl("get", *args, "-o", "json").out)


def _phase(cluster: Cluster, kind: str, name: str, phase: str) -> bool:
    return bool(_get(cluster, kind, name).get("status", {}).get("phase") == phase)


def _rows(out: str) -> list[list[str]]:
    return [line.split() for line in out.strip().splitlines()]


def _running(cluster: Cluster, name: str) -> dict[str, Any]:
    def probe() -> Any:
        vmi = _get(cluster, "vmi", name)
        return vmi if vmi["status"].get("phase") == "Running" else None

    found: dict[str, Any] = until(probe, 60, f"{name} running")
    return found


def _gone(cluster: Cluster, *args: str) -> None:
    until(lambda: cluster.kubectl("get", *args, check=False).code != 0, 60, f"{args} gone")


def test_the_classes_are_there_from_the_start(cluster: Cluster) -> None:
    rows = _rows(cluster.kubectl("get", "sc").out)
    assert rows[0] == [
        "NAME", "PROVISIONER", "RECLAIMPOLICY", "VOLUMEBINDINGMODE", "ALLOWVOLUMEEXPANSION", "AGE"
    ]  # fmt: skip
    by_name = {r[0]: r for r in rows[1:]}
    assert by_name["local"][1:6] == [
        "(default)", "virtstream.io/local", "Delete", "WaitForFirstConsumer", "true"
    ]  # fmt: skip
    assert by_name["shared"][1:5] == ["virtstream.io/shared", "Delete", "Immediate", "true"]
    sc = _get(cluster, "storageclass", "local")
    assert sc["metadata"]["annotations"]["storageclass.kubernetes.io/is-default-class"] == "true"
    described = cluster.kubectl("describe", "sc", "shared").out
    assert (
        "IsDefaultClass:        No" in described and "VolumeBindingMode:     Immediate" in described
    )


def test_a_shared_claim_binds_at_once_with_its_volume(cluster: Cluster, tmp_path: Path) -> None:
    _apply(cluster, tmp_path, _claim("shared-one", "shared", ("ReadWriteMany",)))
    until(lambda: _get(cluster, "pvc", "shared-one")["status"]["phase"] == "Bound", 30, "bound")
    pvc = _get(cluster, "pvc", "shared-one")
    assert pvc["status"]["capacity"] == {"storage": "1Gi"}
    assert pvc["metadata"]["finalizers"] == ["kubernetes.io/pvc-protection"]
    volume = pvc["spec"]["volumeName"]
    assert volume == f"pvc-{pvc['metadata']['uid']}"
    row = _rows(cluster.kubectl("get", "pvc", "shared-one").out)[1]
    assert row[:6] == ["shared-one", "Bound", volume, "1Gi", "RWX", "shared"]
    pv = _get(cluster, "pv", volume)
    assert pv["spec"]["claimRef"]["name"] == "shared-one"
    assert pv["spec"]["persistentVolumeReclaimPolicy"] == "Delete"
    assert _rows(cluster.kubectl("get", "pv", volume).out)[1][1:4] == ["1Gi", "RWX", "Delete"]
    # (`kubectl describe pvc` lists the pods that use it: it needs pods served)
    described = cluster.kubectl("describe", "pv", volume).out
    assert "Bound" in described and "default/shared-one" in described


def test_rwx_on_a_local_class_is_refused(cluster: Cluster, tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(_claim("bad", "local", ("ReadWriteMany",))))
    refused = cluster.kubectl("create", "-f", str(path), check=False)
    assert refused.code != 0 and "ReadWriteMany" in refused.err


def test_a_vm_with_two_local_claims_pins_them_and_is_not_migratable(
    cluster: Cluster, tmp_path: Path
) -> None:
    _apply(cluster, tmp_path, _claim("disk-alpine"), _claim("disk-custom"))
    pending = _rows(cluster.kubectl("get", "pvc", "disk-alpine").out)[1]
    assert pending[1] == "Pending"  # WaitForFirstConsumer: no consumer yet
    _apply(cluster, tmp_path, _vm("vm-multipvc", "disk-alpine", "disk-custom"))
    vmi = _running(cluster, "vm-multipvc")
    node = vmi["status"]["nodeName"]
    for name in ("disk-alpine", "disk-custom"):
        bound = functools.partial(_phase, cluster, "pvc", name, "Bound")
        until(bound, 30, name)
        pvc = _get(cluster, "pvc", name)
        assert pvc["metadata"]["annotations"]["volume.kubernetes.io/selected-node"] == node
        pv = _get(cluster, "pv", pvc["spec"]["volumeName"])
        terms = pv["spec"]["nodeAffinity"]["required"]["nodeSelectorTerms"]
        assert terms[0]["matchExpressions"][0]["values"] == [node]
    migratable = next(c for c in vmi["status"]["conditions"] if c["type"] == "LiveMigratable")
    assert (migratable["status"], migratable["reason"]) == ("False", "DisksNotLiveMigratable")
    mig = {
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachineInstanceMigration",
        "metadata": {"name": "mig-rwo"},
        "spec": {"vmiName": "vm-multipvc"},
    }
    path = tmp_path / "mig.yaml"
    path.write_text(yaml.safe_dump(mig))
    refused = cluster.kubectl("create", "-f", str(path), check=False)
    assert refused.code != 0
    assert (
        "Cannot migrate VMI, Reason: DisksNotLiveMigratable, Message: cannot migrate VMI: PVC "
        "disk-alpine is not shared, live migration requires that all PVCs must be shared "
        "(using ReadWriteMany access mode)"
    ) in refused.err


def test_a_vm_on_a_shared_claim_migrates(cluster: Cluster, tmp_path: Path) -> None:
    _apply(cluster, tmp_path, _claim("rwx-data", "shared", ("ReadWriteMany",)))
    _apply(cluster, tmp_path, _vm("vm-rwx", "rwx-data"))
    before = _running(cluster, "vm-rwx")["status"]["nodeName"]
    mig = {
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachineInstanceMigration",
        "metadata": {"name": "mig-rwx"},
        "spec": {"vmiName": "vm-rwx"},
    }
    _apply(cluster, tmp_path, mig)
    until(
        lambda: _get(cluster, "vmim", "mig-rwx")["status"].get("phase") == "Succeeded",
        90,
        "migration succeeded",
    )
    assert _get(cluster, "vmi", "vm-rwx")["status"]["nodeName"] != before


def test_a_missing_claim_keeps_the_vmi_pending_until_it_appears(
    cluster: Cluster, tmp_path: Path
) -> None:
    _apply(cluster, tmp_path, _vm("vm-waits", "later"))

    def waiting() -> Any:
        conditions = _get(cluster, "vmi", "vm-waits")["status"].get("conditions") or []
        return next((c for c in conditions if c["type"] == "PodScheduled"), None)

    cond = until(waiting, 30, "PodScheduled condition")
    assert (cond["status"], cond["reason"]) == ("False", "Unschedulable")
    assert cond["message"] == "PVC default/later does not exist, waiting for it to appear"
    printable = _get(cluster, "vm", "vm-waits")["status"]["printableStatus"]
    assert printable == "ErrorPvcNotFound"
    _apply(cluster, tmp_path, _claim("later"))
    _running(cluster, "vm-waits")


def test_a_claim_in_use_goes_only_after_its_vmi(cluster: Cluster, tmp_path: Path) -> None:
    _apply(cluster, tmp_path, _claim("held"), _vm("vm-holds", "held"))
    _running(cluster, "vm-holds")
    volume = _get(cluster, "pvc", "held")["spec"]["volumeName"]
    # the claim's disk (test mode makes none for a plain claim: one is put where it lives)
    disk = cluster.home / "disks" / "volumes" / "default" / "held.qcow2"  # home: the data dir
    disk.parent.mkdir(parents=True, exist_ok=True)
    disk.write_bytes(b"a disk")
    cluster.kubectl("delete", "pvc", "held", "--wait=false")
    pvc = _get(cluster, "pvc", "held")
    assert pvc["metadata"]["deletionTimestamp"]
    assert pvc["metadata"]["finalizers"] == ["kubernetes.io/pvc-protection"]
    assert _rows(cluster.kubectl("get", "pvc", "held").out)[1][1] == "Terminating"
    cluster.kubectl(
        "patch", "vm", "vm-holds", "--type=merge", "-p", '{"spec":{"runStrategy":"Halted"}}'
    )
    _gone(cluster, "pvc", "held")
    _gone(cluster, "pv", volume)
    assert not disk.exists()  # reclaim policy Delete: its node deleted the disk first


def test_the_user_guide_data_volume_imports_over_http(
    cluster: Cluster, tmp_path: Path, image_server: str
) -> None:
    path = tmp_path / "vm.yaml"
    path.write_text(USER_GUIDE_VM.replace("URL", image_server))
    cluster.kubectl("apply", "-f", str(path))

    def done() -> Any:
        dv = _get(cluster, "dv", "alpine-dv")
        return dv if dv.get("status", {}).get("phase") == "Succeeded" else None

    dv = until(done, 120, "the import")
    assert dv["status"]["progress"] == "100.0%"
    assert dv["metadata"]["ownerReferences"][0]["name"] == "vm-alpine-datavolume"
    conditions = {c["type"]: (c["status"], c["reason"]) for c in dv["status"]["conditions"]}
    assert conditions == {
        "Bound": ("True", "Bound"),
        "Ready": ("True", ""),
        "Running": ("False", "Completed"),
    }
    row = _rows(cluster.kubectl("get", "dv", "alpine-dv").out)
    assert row[0][:3] == ["NAME", "PHASE", "PROGRESS"]
    assert row[1][:4] == ["alpine-dv", "Succeeded", "100.0%", "0"]
    pvc = _get(cluster, "pvc", "alpine-dv")
    notes = pvc["metadata"]["annotations"]
    assert notes["cdi.kubevirt.io/storage.import.endpoint"] == image_server
    assert notes["cdi.kubevirt.io/storage.pod.phase"] == "Succeeded"
    assert notes["cdi.kubevirt.io/storage.condition.running.reason"] == "Completed"
    assert pvc["status"]["capacity"] == {"storage": "2Gi"}
    # the disk: qcow2, the claim's size, the served bytes
    disk = cluster.home / "disks" / "volumes" / "default" / "alpine-dv.qcow2"
    info = json.loads(
        subprocess.run(
            ["qemu-img", "info", "--output=json", str(disk)], capture_output=True, check=True
        ).stdout
    )
    assert info["format"] == "qcow2" and info["virtual-size"] == 2 << 30
    raw = tmp_path / "back.raw"
    subprocess.run(["qemu-img", "convert", "-O", "raw", str(disk), str(raw)], check=True)
    with raw.open("rb") as f:
        assert f.read(len(MARK)) == MARK
    # its progress as events, a tenth at a time, not a chunk at a time
    events = _get(cluster, "events", "--field-selector", "involvedObject.name=alpine-dv")
    reasons = [e["reason"] for e in events["items"]]
    assert "ImportScheduled" in reasons and "ImportSucceeded" in reasons
    progress = [e for e in events["items"] if e["reason"] == "ImportInProgress"]
    assert 1 <= sum(e.get("count", 1) for e in progress) <= 10
    # the VM starts on it, where its disk is
    cluster.kubectl("patch", "vm", "vm-alpine-datavolume", "--type=merge", "-p",
                    '{"spec":{"runStrategy":"Always"}}')  # fmt: skip
    vmi = _running(cluster, "vm-alpine-datavolume")
    selected = pvc["metadata"]["annotations"]["volume.kubernetes.io/selected-node"]
    assert vmi["status"]["nodeName"] == selected
    # the VM's DataVolume, its claim and its volume go with it
    cluster.kubectl("delete", "vm", "vm-alpine-datavolume")
    _gone(cluster, "dv", "alpine-dv")
    _gone(cluster, "pvc", "alpine-dv")


def test_blank_and_clone_data_volumes(cluster: Cluster, tmp_path: Path) -> None:
    def dv(name: str, source: dict[str, Any]) -> dict[str, Any]:
        return {
            "apiVersion": "cdi.kubevirt.io/v1beta1",
            "kind": "DataVolume",
            "metadata": {"name": name},
            "spec": {
                "source": source,
                "storage": {"resources": {"requests": {"storage": "64Mi"}}},
            },
        }

    _apply(cluster, tmp_path, dv("blank-dv", {"blank": {}}))
    until(lambda: _get(cluster, "dv", "blank-dv")["status"]["phase"] == "Succeeded", 60, "blank")
    _apply(cluster, tmp_path, dv("clone-dv", {"pvc": {"namespace": "default", "name": "blank-dv"}}))
    until(lambda: _get(cluster, "dv", "clone-dv")["status"]["phase"] == "Succeeded", 60, "clone")
    disks = cluster.home / "disks" / "volumes" / "default"
    assert (disks / "blank-dv.qcow2").exists() and (disks / "clone-dv.qcow2").exists()
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump({**dv("bad-dv", {}), "spec": {"storage": {}}}))
    refused = cluster.kubectl("create", "-f", str(path), check=False)
    assert refused.code != 0
    assert "Data volume should have either Source or SourceRef" in refused.err


def test_a_data_import_cron_keeps_its_data_source_on_the_latest_import(
    cluster: Cluster, tmp_path: Path
) -> None:
    """A DataImportCron cloning a golden claim (a `pvc` source): its import is a DataVolume
    named for the DataSource and the claim's uid, labelled with the cron; once it succeeded
    the DataSource it made names it and the cron is UpToDate. A bad schedule is refused in
    CDI's webhook's words."""
    golden = {
        "apiVersion": "cdi.kubevirt.io/v1beta1",
        "kind": "DataVolume",
        "metadata": {"name": "golden"},
        "spec": {
            "source": {"blank": {}},
            "storage": {"resources": {"requests": {"storage": "32Mi"}}},
        },
    }
    _apply(cluster, tmp_path, golden)
    until(lambda: _get(cluster, "dv", "golden")["status"]["phase"] == "Succeeded", 60, "golden")
    cron: dict[str, Any] = {
        "apiVersion": "cdi.kubevirt.io/v1beta1",
        "kind": "DataImportCron",
        "metadata": {"name": "golden-cron"},
        "spec": {
            "template": {"spec": {
                "source": {"pvc": {"namespace": "default", "name": "golden"}},
                "storage": {"resources": {"requests": {"storage": "32Mi"}}},
            }},
            "schedule": "0 */12 * * *",
            "managedDataSource": "golden-latest",
        },
    }  # fmt: skip
    _apply(cluster, tmp_path, cron)

    def up_to_date() -> dict[str, Any]:
        status: dict[str, Any] = _get(cluster, "dic", "golden-cron")["status"]
        conditions = {c["type"]: c["status"] for c in status["conditions"]}
        return status if conditions.get("UpToDate") == "True" else {}

    status = until(up_to_date, 60, "the cron up to date")
    claim_uid = _get(cluster, "pvc", "golden")["metadata"]["uid"]
    name = f"golden-latest-{claim_uid[:12]}"
    assert status["currentImports"] == [{"DataVolumeName": name, "Digest": f"uid:{claim_uid}"}]
    assert status["lastImportedPVC"] == {"namespace": "default", "name": name}
    dv = _get(cluster, "dv", name)
    assert dv["metadata"]["labels"]["cdi.kubevirt.io/dataImportCron"] == "golden-cron"
    assert dv["status"]["phase"] == "Succeeded"
    ds = _get(cluster, "datasource", "golden-latest")
    assert ds["spec"]["source"] == {"pvc": {"name": name, "namespace": "default"}}
    until(lambda: _get(cluster, "das", "golden-latest")["status"]["conditions"][0]["status"]
          == "True", 30, "the DataSource ready")  # fmt: skip
    assert _rows(cluster.kubectl("get", "dic").out)[1][0] == "golden-cron"
    bad = {**cron, "metadata": {"name": "bad-cron"}, "spec": {**cron["spec"], "schedule": "x"}}
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(bad))
    refused = cluster.kubectl("create", "-f", str(path), check=False)
    assert refused.code != 0
    assert 'The DataImportCron "bad-cron" is invalid: spec.Schedule: Illegal cron schedule' in (
        refused.err
    )


def test_a_vm_manager_on_kubevirts_api_runs_unchanged(cluster: Cluster, image_server: str) -> None:
    """What a VM manager built on KubeVirt's API does, through the `kubernetes` Python
    client and nothing of ours: its pools are the StorageClasses, an image is a DataVolume
    whose progress it reads from CDI's annotations on the claim, a data disk is a claim; it
    creates a VM from the image with an extra disk, lists and inspects it, stops, starts
    and deletes it."""
    from kubernetes import client, config

    api = config.new_client_from_config(str(cluster.kubeconfig))
    # typed loosely, as the other client tests take it: its models' Optional fields
    core: Any = client.CoreV1Api(api)
    custom: Any = client.CustomObjectsApi(api)
    storage_api: Any = client.StorageV1Api(api)
    pools = {sc.metadata.name: sc for sc in storage_api.list_storage_class().items}
    marked = "storageclass.kubernetes.io/is-default-class"
    default = next(n for n, sc in pools.items() if (sc.metadata.annotations or {}).get(marked))
    assert default == "local" and "shared" in pools
    cdi = ("cdi.kubevirt.io", "v1beta1", "default", "datavolumes")
    custom.create_namespaced_custom_object(*cdi, {
        "apiVersion": "cdi.kubevirt.io/v1beta1", "kind": "DataVolume",
        "metadata": {"name": "mgr-image"},
        "spec": {"source": {"http": {"url": image_server}}, "storage": {
            "storageClassName": default, "resources": {"requests": {"storage": "64Mi"}}}},
    })  # fmt: skip

    def imported() -> bool:
        try:
            claim = core.read_namespaced_persistent_volume_claim("mgr-image", "default")
        except client.ApiException as e:  # its claim not made yet
            assert e.status == 404
            return False
        notes = claim.metadata.annotations
        assert notes["cdi.kubevirt.io/storage.import.endpoint"] == image_server
        return bool(notes.get("cdi.kubevirt.io/storage.pod.phase") == "Succeeded")

    until(imported, 60, "the import, by CDI's annotations")
    core.create_namespaced_persistent_volume_claim("default", {
        "apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "mgr-data"},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "32Mi"}}},
    })  # fmt: skip
    vms = ("kubevirt.io", "v1", "default", "virtualmachines")

    def names() -> list[str]:
        items: list[dict[str, Any]] = custom.list_namespaced_custom_object(*vms)["items"]
        return [v["metadata"]["name"] for v in items]

    custom.create_namespaced_custom_object(*vms, {
        "apiVersion": "kubevirt.io/v1", "kind": "VirtualMachine", "metadata": {"name": "mgr-vm"},
        "spec": {"runStrategy": "Always", "template": {"spec": {
            "domain": {"devices": {"disks": [{"name": "root", "disk": {"bus": "virtio"}},
                                             {"name": "data", "disk": {"bus": "virtio"}}]},
                       "resources": {"requests": {"memory": "64Mi"}}},
            "volumes": [{"name": "root", "dataVolume": {"name": "mgr-image"}},
                        {"name": "data", "persistentVolumeClaim": {"claimName": "mgr-data"}}]}}},
    })  # fmt: skip

    def printable() -> str:
        vm = custom.get_namespaced_custom_object(*vms, "mgr-vm")
        return str((vm.get("status") or {}).get("printableStatus") or "")

    until(lambda: printable() == "Running", 60, "mgr-vm running")
    assert "mgr-vm" in names()
    vmi = custom.get_namespaced_custom_object(
        "kubevirt.io", "v1", "default", "virtualmachineinstances", "mgr-vm"
    )
    assert [v["name"] for v in vmi["spec"]["volumes"]] == ["root", "data"]
    assert {v["name"] for v in vmi["status"]["volumeStatus"]} >= {"root", "data"}
    sub = "/apis/subresources.kubevirt.io/v1/namespaces/default/virtualmachines/mgr-vm"
    for verb, want in (("stop", "Stopped"), ("start", "Running")):
        json_body = {"Content-Type": "application/json"}
        request = api.param_serialize(
            "PUT", f"{sub}/{verb}", body={}, auth_settings=["BearerToken"], header_params=json_body
        )
        api.call_api(*request).read()
        until(lambda w=want: printable() == w, 60, f"mgr-vm {want}")  # type: ignore[misc]
    custom.delete_namespaced_custom_object(*vms, "mgr-vm")
    until(lambda: "mgr-vm" not in names(), 60, "mgr-vm gone")
