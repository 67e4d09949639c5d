"""Instance types, replica sets and pools on a real cluster (`virtstream up`: nats, api,
controller, a handler in test mode) through the real kubectl and the CLI: discovery,
`instancetypes install`, a VM sized by u1.small, a replica set of 10 reaching 10 Running
and scaled to 3, a pool that survives a controller restart without duplicate VMs."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.integration.polling import until
from tests.integration.up_process import running_up

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


@dataclass
class Up:
    data_dir: Path
    port: int
    nats_port: int

    def run(self, tool: str, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        env = {
            **os.environ,
            "KUBECONFIG": str(self.data_dir / "kubeconfig"),
            "HOME": str(self.data_dir),
            "VIRTSTREAM_SERVER": f"http://127.0.0.1:{self.port}",
        }
        done = subprocess.run(
            [str(BIN / tool), *args], env=env, capture_output=True, text=True, timeout=60
        )
        if check:
            assert done.returncode == 0, f"{tool} {' '.join(args)}: {done.stderr}"
        return done

    def kubectl(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return self.run("kubectl", *args, check=check)

    def get(self, *args: str) -> Any:
        return json.loads(self.kubectl("get", *args, "-o", "json").stdout)


@pytest.fixture(scope="module")
def up() -> Iterator[Up]:
    with running_up("vs-kinds-", 1) as running:
        yield Up(running.data_dir, running.port, running.nats_port)


def test_discovery_lists_the_new_kinds_and_scale(up: Up) -> None:
    rows = up.kubectl("api-resources").stdout
    for line in (
        "virtualmachineclusterinstancetypes",
        "virtualmachineinstancereplicasets",
        "virtualmachinepools",
        "virtualmachinesnapshots",
        "virtualmachinerestores",
    ):
        assert line in rows
    raw = json.loads(up.kubectl("get", "--raw", "/apis/kubevirt.io/v1").stdout)
    scale = next(
        r for r in raw["resources"] if r["name"] == "virtualmachineinstancereplicasets/scale"
    )
    assert (scale["group"], scale["version"], scale["kind"]) == ("autoscaling", "v1", "Scale")


def test_instance_types_install_and_size_a_vm(up: Up) -> None:
    # deployed at the start, as KubeVirt's operator deploys them
    deployed = up.get("vmcf", "u1.small")
    assert deployed["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "virt-operator"
    assert len(up.get("vmcf")["items"]) >= 40
    assert up.get("vmcps", "centos.stream9")["metadata"]["name"] == "centos.stream9"
    out = up.run("virtstream", "instancetypes", "install").stdout
    assert "virtualmachineclusterinstancetype.instancetype.kubevirt.io/u1.small " in out
    missing = up.run(
        "virtstream", "create", "vm", "--name", "nope", "--instancetype", "u9.huge", "--apply",
        check=False,
    )  # fmt: skip
    assert missing.returncode == 1
    assert "Failure to find instancetype" in missing.stderr
    up.run(
        "virtstream", "create", "vm", "--name", "sized", "--instancetype", "u1.nano",
        "--preference", "cirros", "--volume-containerdisk",
        "src:quay.io/kubevirt/cirros-container-disk-demo:latest", "--apply",
    )  # fmt: skip
    vmi = until(lambda: up.get("vmi", "sized"))
    assert vmi["spec"]["domain"]["memory"]["guest"] == "512Mi"
    vm = up.get("vm", "sized")
    assert vm["status"]["instancetypeRef"]["name"] == "u1.nano"
    assert vm["spec"]["instancetype"]["revisionName"].startswith("sized-u1.nano-")
    up.kubectl("delete", "vm", "sized", "--wait=false")


def _running(up: Up, label: str) -> int:
    items = up.get("vmis", "-l", label)["items"]
    return sum(1 for v in items if v.get("status", {}).get("phase") == "Running")


def test_a_replica_set_of_10_reaches_10_running_and_scales_to_3(up: Up) -> None:
    up.kubectl("apply", "-f", str(REPO / "examples/fleet/vmirs-cirros.yaml"))
    until(lambda: _running(up, "myvmi=myvmi") == 10, timeout=120)
    rows = up.kubectl("get", "vmirs").stdout.split("\n")
    assert rows[0].split()[:4] == ["NAME", "DESIRED", "CURRENT", "READY"]
    up.kubectl("scale", "vmirs", "testreplicaset", "--replicas=3")
    until(lambda: len(up.get("vmis", "-l", "myvmi=myvmi")["items"]) == 3, timeout=120)
    status = up.get("vmirs", "testreplicaset")["status"]
    assert status["replicas"] == 3 and status["labelSelector"] == "myvmi=myvmi"
    up.kubectl("delete", "vmirs", "testreplicaset", "--wait=false")
    up.kubectl("delete", "vmis", "-l", "myvmi=myvmi", "--wait=false")


def _controller_pid(up: Up) -> int | None:
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmd = b" ".join((proc / "cmdline").read_bytes().split(b"\0"))
        except OSError:
            continue
        if b"services.controller" in cmd and f":{up.nats_port}".encode() in cmd:
            return int(proc.name)
    return None


def test_a_pool_survives_a_controller_restart_without_duplicate_vms(up: Up) -> None:
    up.kubectl("apply", "-f", str(REPO / "examples/fleet/vmpool-cirros.yaml"))
    label = "kubevirt.io/vmpool=vm-pool-cirros"
    until(lambda: _running(up, label) == 3, timeout=120)
    pid = _controller_pid(up)
    assert pid is not None
    os.kill(pid, signal.SIGKILL)  # the supervisor restarts it
    until(lambda: (p := _controller_pid(up)) is not None and p != pid, timeout=60)
    said = up.run("virtstream", "scale", "vmpool", "vm-pool-cirros", "--replicas", "4").stdout
    assert said.strip() == "virtualmachinepool.pool.kubevirt.io/vm-pool-cirros scaled"
    until(lambda: _running(up, label) == 4, timeout=120)
    names = sorted(v["metadata"]["name"] for v in up.get("vms", "-l", label)["items"])
    assert names == [f"vm-pool-cirros-{n}" for n in range(4)]
    up.kubectl("scale", "vmpool", "vm-pool-cirros", "--replicas=0")
    until(lambda: not up.get("vms", "-l", label)["items"], timeout=120)
    up.kubectl("delete", "vmpool", "vm-pool-cirros", "--wait=false")
