"""Snapshots and restores on a real cluster (`virtstream up` in test mode) through the real
kubectl and the CLI: an online snapshot becomes readyToUse, a restore waits while its target
runs and brings the spec back once it is stopped, and a restore to a new name creates a VM.
One cluster for the module."""

from __future__ import annotations

import json
from typing import Any

from tests.integration.polling import until
from tests.integration.test_kinds_fleet import REPO, Up, up  # noqa: F401  (the fixture)

SNAPSHOT = {
    "apiVersion": "snapshot.kubevirt.io/v1beta1",
    "kind": "VirtualMachineSnapshot",
    "metadata": {"name": "snap-cirros"},
    "spec": {"source": {"apiGroup": "kubevirt.io", "kind": "VirtualMachine", "name": "vm-cirros"}},
}


def restore(name: str, target: str) -> dict[str, Any]:
    return {
        "apiVersion": "snapshot.kubevirt.io/v1beta1",
        "kind": "VirtualMachineRestore",
        "metadata": {"name": name},
        "spec": {
            "target": {"apiGroup": "kubevirt.io", "kind": "VirtualMachine", "name": target},
            "virtualMachineSnapshotName": "snap-cirros",
        },
    }


def apply(cluster: Up, obj: dict[str, Any]) -> None:
    path = cluster.data_dir / f"{obj['metadata']['name']}.json"
    path.write_text(json.dumps(obj))
    cluster.kubectl("apply", "-f", str(path))


def guest_memory(cluster: Up, vm: str) -> str:
    return str(cluster.get("vm", vm)["spec"]["template"]["spec"]["domain"]["memory"]["guest"])


def reasons(obj: dict[str, Any]) -> dict[str, str]:
    return {c["type"]: c["reason"] for c in obj.get("status", {}).get("conditions", [])}


def test_snapshot_change_stop_restore_and_restore_to_a_new_vm(up: Up) -> None:  # noqa: F811
    up.kubectl("apply", "-f", str(REPO / "examples/kubevirt/vm-cirros.yaml"))
    up.run("virtstream", "start", "vm-cirros")
    until(lambda: up.get("vmi", "vm-cirros")["status"]["phase"] == "Running", timeout=60)

    apply(up, SNAPSHOT)
    snap = until(lambda: (s := up.get("vmsnapshot", "snap-cirros"))["status"]["readyToUse"] and s)
    assert snap["status"]["phase"] == "Succeeded"
    assert snap["status"]["indications"] == ["Online", "NoGuestAgent"]
    assert reasons(snap) == {"Progressing": "Operation complete", "Ready": "Ready"}
    content = up.get("vmsnapshotcontent", snap["status"]["virtualMachineSnapshotContentName"])
    assert content["spec"]["source"]["virtualMachine"]["metadata"]["name"] == "vm-cirros"
    assert up.kubectl("get", "vmsnapshot").stdout.split("\n")[1].split()[3] == "Succeeded"

    patch = '{"spec":{"template":{"spec":{"domain":{"memory":{"guest":"256Mi"}}}}}}'
    up.kubectl("patch", "vm", "vm-cirros", "--type", "merge", "-p", patch)
    assert guest_memory(up, "vm-cirros") == "256Mi"

    apply(up, restore("restore-cirros", "vm-cirros"))  # the VM still runs: the restore waits
    waiting = until(lambda: (r := up.get("vmrestore", "restore-cirros")).get("status") and r)
    until(lambda: reasons(up.get("vmrestore", "restore-cirros")).get("Ready")
          == "Waiting for target to be ready")  # fmt: skip
    assert waiting["status"]["complete"] is False
    assert up.get("vm", "vm-cirros")["status"]["restoreInProgress"] == "restore-cirros"

    up.run("virtstream", "stop", "vm-cirros")
    done = until(lambda: (r := up.get("vmrestore", "restore-cirros"))["status"]["complete"] and r,
                 timeout=60)  # fmt: skip
    assert done["status"]["restoreTime"]
    assert reasons(done) == {"Progressing": "Operation complete", "Ready": "Operation complete"}
    assert guest_memory(up, "vm-cirros") == "128Mi"
    vm = up.get("vm", "vm-cirros")
    assert "restoreInProgress" not in vm["status"]
    assert vm["metadata"]["annotations"]["restore.kubevirt.io/lastRestoreUID"].startswith(
        "restore-cirros-"
    )

    apply(up, restore("restore-copy", "vm-copy"))
    until(lambda: up.get("vmrestore", "restore-copy")["status"]["complete"], timeout=60)
    copy = up.get("vm", "vm-copy")
    assert copy["spec"]["runStrategy"] == "Halted" and guest_memory(up, "vm-copy") == "128Mi"
    assert copy["metadata"]["uid"] != vm["metadata"]["uid"]
