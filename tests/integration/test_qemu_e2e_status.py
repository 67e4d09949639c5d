"""What qemu mode adds to the control plane, without QEMU (runs everywhere): the VMI status
(SoftwareEmulation condition, `virtstream.io/domain`), the planner's DomainStarted (QEMU
pid, domain type), the handler's qemu flags, and `up`'s error without the packages."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from events.catalog import DomainPaused, DomainStarted, DomainStopped, StopReason
from events.envelope import Decision
from events.meta import Kind
from projections.render import render_vmi
from services.handler.__main__ import launch_settings
from services.handler.effects import Observed
from services.handler.node_info import qemu_pid_dir_of
from services.handler.planner import plan
from services.handler.state import VMIRecord
from services.launcher.domain_state import DomainState
from services.launcher.domain_xml import DomainType
from services.launcher.hypervisor import TEST_URI
from services.launcher.protocol import DomainStatus
from tests.unit.test_projections import NS, Given, running_vm

REPO = Path(__file__).resolve().parents[2]
URI = "qemu+unix:///system?socket=/tmp/vs/node-1/sock/libvirt-sock"


def _qemu_vm(g: Given, domain_type: str) -> Given:
    running_vm(g)
    return g(
        DomainStarted(
            meta=g.m(Kind.VMI, node="node-1"),
            node="node-1",
            domain="default_vm1",
            qemu_pid=4242,
            domain_type=domain_type,
        )
    )


def _status(g: Given) -> Any:
    return render_vmi(g.cluster, g.cluster.vmis[f"{NS}/vm1"])["status"]


def test_tcg_guest_shows_software_emulation_and_its_domain() -> None:
    g = _qemu_vm(Given(), "qemu")
    status = _status(g)
    conditions = {c["type"]: c for c in status["conditions"]}
    assert conditions["SoftwareEmulation"]["status"] == "True"
    assert conditions["SoftwareEmulation"]["reason"] == "KVMNotUsable"
    assert status["virtstream.io/domain"] == {"state": "Running", "type": "qemu", "qemuPid": 4242}
    g(DomainPaused(meta=g.m(Kind.VMI, node="node-1")))
    assert _status(g)["virtstream.io/domain"]["state"] == "Paused"
    g(DomainStopped(meta=g.m(Kind.VMI, node="node-1"), reason=StopReason.SHUTDOWN))
    assert _status(g)["virtstream.io/domain"] == {"state": "Shutoff", "type": "qemu"}


def test_kvm_guest_has_no_software_emulation_condition() -> None:
    status = _status(_qemu_vm(Given(), "kvm"))
    assert all(c["type"] != "SoftwareEmulation" for c in status["conditions"])
    assert status["virtstream.io/domain"]["type"] == "kvm"


def test_domain_started_carries_qemu_pid_from_the_running_status_and_the_type() -> None:
    record = VMIRecord(
        namespace=NS, name="vm1", uid="u1", pod_uid="p1", manifest_json=b"{}", launcher_pid=7
    )
    running = DomainStatus(state=DomainState.RUNNING, seq=2, domain_pid=999)
    observed = Observed(
        uid="u1", pid=7, domain_name="default_vm1", domain_type="qemu", connected=True
    )
    observed = observed.updated(running, 1.0)
    actions = plan("default/vm1", record, observed, "node-1", 1.0)
    started = [
        a.event for a in actions if isinstance(a, Decision) and isinstance(a.event, DomainStarted)
    ]
    assert len(started) == 1
    assert started[0].qemu_pid == 999 and started[0].domain_type == "qemu"


def test_qemu_pid_dir_follows_a_node_runtime_uri() -> None:
    assert qemu_pid_dir_of(URI) == "/tmp/vs/node-1/run/qemu"
    assert qemu_pid_dir_of(TEST_URI) is None


def _args(**kw: object) -> argparse.Namespace:
    base = {
        "hypervisor": "qemu",
        "libvirt_uri": URI,
        "domain_type": "qemu",
        "disk_dir": "/tmp/vs/disks",
        "image_dir": None,
        "qemu_pid_dir": None,
        "pod_network": None,
        "node": "node-1",
    }
    return argparse.Namespace(**{**base, **kw})


def test_handler_qemu_flags_become_launch_settings() -> None:
    s = launch_settings(_args(image_dir="/images"))
    assert s.hypervisor_uri == URI and s.domain_type is DomainType.QEMU
    assert s.qemu_pid_dir == "/tmp/vs/node-1/run/qemu" and s.image_dir == "/images"
    assert s.pod_network_dir is None  # no pod network: user-mode networking
    with_net = launch_settings(_args(pod_network="/tmp/vs/podnet"))
    assert (with_net.pod_network_dir, with_net.node) == ("/tmp/vs/podnet", "node-1")
    assert launch_settings(_args(hypervisor="test")).hypervisor_uri == TEST_URI
    with pytest.raises(SystemExit, match="--libvirt-uri"):
        launch_settings(_args(libvirt_uri=TEST_URI))


def test_up_names_the_install_command_when_qemu_is_missing(tmp_path: Path) -> None:
    # no qemu-system-x86_64 / qemu-img on this PATH: what a host without the packages sees
    out = subprocess.run(
        [sys.executable, "-m", "cli.main", "up", "--hypervisor", "qemu", "--data-dir",
         str(tmp_path)],
        cwd=REPO, capture_output=True, text=True, timeout=60,
        env={**os.environ, "PATH": str(tmp_path), "COLUMNS": "200"},
    )  # fmt: skip
    assert out.returncode == 1, out.stdout + out.stderr
    assert "bash ops/install.sh --qemu" in out.stdout and "qemu-img" in out.stdout
    assert not (tmp_path / "nats").exists()  # nothing was started
