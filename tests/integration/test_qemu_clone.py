"""A clone of a running VM in qemu mode (TCG) copies its persistent volume: one `virtstream
up --hypervisor qemu --nodes 1`, vm-cirros with a persistentVolumeClaim disk (/dev/vdc).
The guest writes a marker to the claim's disk; a VirtualMachineClone of the running VM
succeeds; the target's volume names a new claim whose qcow2 holds the marker (read with
qemu-img, the bytes the guest wrote), while the source keeps running.

Skipped without the qemu packages or root."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from typing import Any

import pytest

from tests.integration.polling import until
from tests.integration.qemu_support import qemu_marks
from tests.integration.qemu_up import SUB_VM, VMS, Cluster, running_cluster
from tests.integration.test_qemu_snapshots import (
    CLAIMS,
    TOKEN,
    booted,
    data_claim,
    vm_with_claim,
)

pytestmark = qemu_marks

CLONES = "/apis/clone.kubevirt.io/v1beta1/namespaces/default/virtualmachineclones"


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    with running_cluster("vs-qc-", nodes=1) as c:
        yield c


def claim_bytes(cluster: Cluster, claim: str) -> bytes:
    [qcow2] = cluster.data_dir.rglob(f"volumes/default/{claim}.qcow2")
    raw = cluster.data_dir / f"{claim}.raw"
    subprocess.run(
        ["qemu-img", "convert", "-O", "raw", str(qcow2), str(raw)], check=True, timeout=60
    )
    with raw.open("rb") as f:
        f.seek(8 * 512)
        return f.read(512)


def test_a_clone_of_a_running_vm_copies_its_claim(cluster: Cluster) -> None:
    http = cluster.http
    assert http.post(CLAIMS, json=data_claim()).is_success
    assert http.post(VMS, json=vm_with_claim()).is_success
    assert http.put(f"{SUB_VM}/vm-cirros/start", json={}).is_success
    guest = booted(cluster)
    guest.write("A")
    assert until(guest.read, timeout=30, what="marker A") == "A"

    clone: dict[str, Any] = {
        "apiVersion": "clone.kubevirt.io/v1beta1",
        "kind": "VirtualMachineClone",
        "metadata": {"name": "copy-data"},
        "spec": {
            "source": {"apiGroup": "kubevirt.io", "kind": "VirtualMachine", "name": "vm-cirros"},
            "target": {"apiGroup": "kubevirt.io", "kind": "VirtualMachine", "name": "vm-copy"},
        },
    }
    assert http.post(CLONES, json=clone).is_success

    def succeeded() -> dict[str, Any] | None:
        got = http.get(f"{CLONES}/copy-data").json()
        assert got.get("status", {}).get("phase") != "Failed", got["status"]
        return dict(got) if got.get("status", {}).get("phase") == "Succeeded" else None

    until(succeeded, timeout=180, what="the clone Succeeded")
    target = http.get(f"{VMS}/vm-copy").json()
    assert target["spec"]["runStrategy"] == "Halted"
    volumes = {v["name"]: v for v in target["spec"]["template"]["spec"]["volumes"]}
    claim = volumes["data"]["persistentVolumeClaim"]["claimName"]
    assert claim.startswith("restore-") and claim != "data-pvc"
    assert f"MARK-A-{TOKEN}".encode() in claim_bytes(cluster, claim)
    # the source kept running (paused for the copy, resumed)
    assert cluster.vmi("vm-cirros")["status"]["phase"] == "Running"
