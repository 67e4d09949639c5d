"""A snapshot and a restore of a persistent volume in qemu mode (TCG), the guest's own data
checked through its console: one `virtstream up --hypervisor qemu --nodes 1`, one guest
(vm-cirros with a persistentVolumeClaim disk, /dev/vdc). The guest writes marker A to
the claim's disk, a snapshot is taken while it runs, the guest overwrites it with B; after
a stop, a restore and a start the guest reads A back.

Skipped without the qemu packages or root."""

from __future__ import annotations

import random
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from services.launcher.rundir import guest_console_log
from tests.integration.polling import until
from tests.integration.qemu_support import CIRROS, qemu_marks
from tests.integration.qemu_up import (
    BOOT_TIMEOUT,
    SUB_VM,
    VMS,
    Cluster,
    read_for,
    running_cluster,
)

pytestmark = qemu_marks

SNAP = "/apis/snapshot.kubevirt.io/v1beta1/namespaces/default"
PROMPT = "vm-cirros:~# "
TOKEN = f"{random.randrange(16**6):06x}"


CLAIMS = "/api/v1/namespaces/default/persistentvolumeclaims"


def data_claim() -> dict[str, Any]:
    """The claim vm-cirros's data disk names (the default class: the node's own disk)."""
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": "data-pvc"},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}},
    }


def vm_with_claim() -> dict[str, Any]:
    vm = yaml.safe_load(CIRROS.read_text())
    spec = vm["spec"]["template"]["spec"]
    spec["domain"]["devices"]["disks"].append({"name": "data", "disk": {"bus": "virtio"}})
    spec["volumes"].append({"name": "data", "persistentVolumeClaim": {"claimName": "data-pvc"}})
    return dict(vm)


class Guest:
    def __init__(self, cluster: Cluster, node_log: Path) -> None:
        self.cluster = cluster
        self.log = node_log

    def run(self, command: str, seconds: float = 6) -> str:
        with self.cluster.console_ws("vm-cirros") as ws:
            ws.send(f"\r{command}\r".encode())
            return read_for(ws, seconds)

    def write(self, marker: str) -> None:  # raw bytes at a fixed offset, flushed
        self.run(f"echo MARK-$(echo {marker})-{TOKEN} | dd of=/dev/vdc bs=512 seek=8; sync")

    def read(self) -> str | None:
        """The marker on the data disk; None while there is none or while the just-booted
        guest's console does not answer its WebSocket handshake in time (asked again)."""
        try:
            out = self.run("dd if=/dev/vdc bs=512 skip=8 count=1 2>/dev/null | tr -cd 'A-Za-z0-9-'")
        except TimeoutError:
            return None
        found = re.findall(rf"MARK-([AB])-{TOKEN}", out)
        return found[-1] if found else None


def booted(cluster: Cluster) -> Guest:
    until(lambda: cluster.vmi("vm-cirros")["status"].get("phase") == "Running",
          timeout=BOOT_TIMEOUT, what="vm-cirros Running")  # fmt: skip
    node = cluster.vmi("vm-cirros")["status"]["nodeName"]
    log = guest_console_log(cluster.data_dir / "run", node, "default", "vm-cirros")
    until(lambda: log.exists() and PROMPT in log.read_text(errors="replace"),
          timeout=BOOT_TIMEOUT, what="the guest's prompt")  # fmt: skip
    return Guest(cluster, log)


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    with running_cluster("vs-qs-", nodes=1) as c:
        yield c


def test_a_restored_claim_has_the_data_of_its_snapshot(cluster: Cluster) -> None:
    http = cluster.http
    assert http.post(CLAIMS, json=data_claim()).is_success
    assert http.post(VMS, json=vm_with_claim()).is_success
    assert http.put(f"{SUB_VM}/vm-cirros/start", json={}).is_success
    guest = booted(cluster)
    guest.write("A")
    assert until(guest.read, timeout=30, what="marker A") == "A"
    until(
        lambda: any(
            c["type"] == "AgentConnected"
            for c in cluster.vmi("vm-cirros")["status"].get("conditions", [])
        ),
        timeout=BOOT_TIMEOUT,
        what="AgentConnected",
    )

    snapshot = {
        "apiVersion": "snapshot.kubevirt.io/v1beta1",
        "kind": "VirtualMachineSnapshot",
        "metadata": {"name": "snap-data"},
        "spec": {"source": {"apiGroup": "kubevirt.io", "kind": "VirtualMachine",
                            "name": "vm-cirros"}},
    }  # fmt: skip
    assert http.post(f"{SNAP}/virtualmachinesnapshots", json=snapshot).is_success

    def ready() -> dict[str, Any] | None:
        snap = http.get(f"{SNAP}/virtualmachinesnapshots/snap-data").json()
        assert snap["status"].get("phase") != "Failed", snap["status"]
        return dict(snap) if snap["status"].get("readyToUse") else None

    snap = until(ready, timeout=120, what="the snapshot readyToUse")
    # online, with the guest agent: its file systems were frozen around the copy
    assert snap["status"]["indications"] == ["Online", "GuestAgent"]
    assert "guest-fsfreeze called" in guest.run("grep qemu-ga /var/log/messages")
    assert snap["status"]["snapshotVolumes"]["includedVolumes"] == ["data"]
    content_name = snap["status"]["virtualMachineSnapshotContentName"]
    content = http.get(f"{SNAP}/virtualmachinesnapshotcontents/{content_name}").json()
    [backup] = content["spec"]["volumeBackups"]
    assert backup["volumeName"] == "data"
    assert backup["persistentVolumeClaim"]["metadata"]["name"] == "data-pvc"
    assert content["status"]["volumeSnapshotStatus"][0]["readyToUse"] is True
    assert any(cluster.data_dir.rglob(f"backups/default/{backup['volumeSnapshotName']}.qcow2"))

    guest.write("B")
    assert until(guest.read, timeout=30, what="marker B") == "B"
    assert http.put(f"{SUB_VM}/vm-cirros/stop", json={}).is_success
    until(lambda: http.get(f"{VMS}/vm-cirros").json()["status"].get("printableStatus")
          == "Stopped", timeout=60, what="vm-cirros stopped")  # fmt: skip

    restore = {
        "apiVersion": "snapshot.kubevirt.io/v1beta1",
        "kind": "VirtualMachineRestore",
        "metadata": {"name": "restore-data"},
        "spec": {"target": {"apiGroup": "kubevirt.io", "kind": "VirtualMachine",
                            "name": "vm-cirros"},
                 "virtualMachineSnapshotName": "snap-data"},
    }  # fmt: skip
    assert http.post(f"{SNAP}/virtualmachinerestores", json=restore).is_success
    done = until(
        lambda: (r := http.get(f"{SNAP}/virtualmachinerestores/restore-data").json())["status"]
        .get("complete") and r, timeout=120, what="the restore complete",
    )  # fmt: skip
    [restored] = done["status"]["restores"]
    claim = restored["persistentVolumeClaim"]
    assert claim.startswith("restore-") and restored["volumeName"] == "data"
    vm = http.get(f"{VMS}/vm-cirros").json()
    volumes = {v["name"]: v for v in vm["spec"]["template"]["spec"]["volumes"]}
    assert volumes["data"]["persistentVolumeClaim"]["claimName"] == claim

    assert http.put(f"{SUB_VM}/vm-cirros/start", json={}).is_success
    guest = booted(cluster)
    assert until(guest.read, timeout=30, what="a marker") == "A"
