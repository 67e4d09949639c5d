"""A name used again after a checkpoint forgot its object, end to end on one data dir of a
real `virtstream up --nodes 1` (nats-server, api, controller, a handler; libvirt's test
driver), stopped cleanly and started again twice:
1. a VM runs, is stopped (its VMI removed); `up` stops and starts; the VM is started again:
   it runs, and no service gave up on it;
2. it is stopped and deleted; `up` stops and starts; a new VM of the same name is created
   and started: it runs, and no service gave up on it.

Every shell's clean stop takes a checkpoint (`ServiceShell.run` ends with
`_checkpoint(force=True)`), and each checkpoint first forgets the versions of the
aggregates its reactor no longer holds (`Folding.forget`): a removed VMI, a deleted VM.
The next run's first append to such a name expects it new while the hot log still holds
its events (the retirer leaves the last 10,000 alone), so it conflicts once; the conflict's
catch-up must teach the shell the name's version again, or every attempt conflicts the
same way until the controller gives up ("gave up after 8 conflicts", the delivery
dead-lettered) and the VM never runs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from cli.main import app
from ops.supervisor import importable
from tests.integration.polling import until
from tests.integration.up_process import RunningUp, running_up

VMS = "/apis/kubevirt.io/v1/namespaces/default/virtualmachines"
VMIS = "/apis/kubevirt.io/v1/namespaces/default/virtualmachineinstances"
SUB = "/apis/subresources.kubevirt.io/v1/namespaces/default/virtualmachines"
NAME = "again"

pytestmark = pytest.mark.skipif(
    not (importable("services.api") and importable("services.handler")),
    reason="api, controller and handlers are needed",
)


def vm(strategy: str) -> dict[str, Any]:
    return {
        "apiVersion": "kubevirt.io/v1", "kind": "VirtualMachine",
        "metadata": {"name": NAME, "namespace": "default"},
        "spec": {"runStrategy": strategy, "template": {"spec": {
            "domain": {"memory": {"guest": "64Mi"}, "devices": {}},
            "terminationGracePeriodSeconds": 0}}},
    }  # fmt: skip


def printable(up: RunningUp) -> str:
    return str(up.http.get(f"{VMS}/{NAME}").json()["status"]["printableStatus"])


def stops(up: RunningUp) -> None:
    """Stopped: its VMI removed (the controller no longer holds it)."""
    assert up.http.put(f"{SUB}/{NAME}/stop", json={}).is_success
    until(lambda: up.http.get(f"{VMIS}/{NAME}").status_code == 404, 60, "the VMI gone")
    until(lambda: printable(up) == "Stopped", 30, f"the VM {NAME} Stopped")


class ControllerLog:
    """The controller's structlog lines (`<data-dir>/logs/controller.log`, appended to by
    every run) written since `mark`."""

    def __init__(self, data_dir: Path) -> None:
        self.path = data_dir / "logs" / "controller.log"
        self.offset = 0

    def mark(self) -> None:
        self.offset = self.path.stat().st_size if self.path.exists() else 0

    def since(self) -> list[dict[str, Any]]:
        if not self.path.exists():
            return []
        with self.path.open("rb") as f:
            f.seek(self.offset)
            text = f.read().decode(errors="replace")
        lines = []
        for line in text.splitlines():
            try:
                lines.append(json.loads(line))
            except json.JSONDecodeError:
                lines.append({"event": line})  # not structlog's: kept for the message
        return lines


def expected_new(log: ControllerLog, kind: str) -> None:
    """The controller's append to `kind/default/NAME` expected it new and conflicted: it
    started from a checkpoint that had forgotten the name's version (a rebuild from the
    log would have learnt it), the path under test."""
    conflicts = [line for line in log.since() if line.get("event") == "conflict"]
    assert any(
        c.get("aggregate") == f"{kind}/default/{NAME}" and c.get("expected") == 0 for c in conflicts
    ), ("no conflict on a forgotten version: the test no longer tests what it names", conflicts)


def gave_up(log: ControllerLog) -> None:
    """No give-up in the controller's log of this run (`Appends.retry_conflicts`: the
    delivery dead-lettered, or a tick failed)."""
    lines = [line for line in log.since() if "gave up" in json.dumps(line)]
    assert not lines, [f"{x.get('event')}: {x.get('error')}" for x in lines[:3]]


def gave_up_on_nothing(up: RunningUp, log: ControllerLog) -> None:
    """No give-up in the controller's log of this run and no dead letter from any service
    (`virtstream dead-letters`: where a give-up is recorded for the user)."""
    gave_up(log)
    r = CliRunner().invoke(
        app, ["dead-letters", "--nats-url", up.nats_url, "-o", "json"], env={"COLUMNS": "250"}
    )
    assert r.exit_code == 0, (r.output, r.exception)
    assert r.stdout.strip() == "", r.stdout


def runs(up: RunningUp, log: ControllerLog) -> None:
    """The VMI Running and the VM saying so (a generous bound, not a timing); a give-up
    of the controller meanwhile fails at once, with its line."""

    def vmi_running() -> bool:
        gave_up(log)
        r = up.http.get(f"{VMIS}/{NAME}")
        return r.is_success and r.json().get("status", {}).get("phase") == "Running"

    until(vmi_running, 60, f"the VMI {NAME} Running")
    until(lambda: printable(up) == "Running", 30, f"the VM {NAME} Running")


@pytest.mark.timeout(300)
def test_a_vm_runs_again_after_a_restart_forgot_its_vmi_and_a_new_one_after_it_forgot_the_vm(
    tmp_path: Path,
) -> None:
    data_dir = tmp_path / "up"
    log = ControllerLog(data_dir)
    with running_up("", 1, data_dir=data_dir) as up:
        assert up.http.post(VMS, json=vm("Always")).status_code == 201
        runs(up, log)
        stops(up)
    # the clean stop's checkpoints forgot the removed VMI

    log.mark()
    with running_up("", 1, data_dir=data_dir) as up:
        assert up.http.put(f"{SUB}/{NAME}/start", json={}).is_success
        runs(up, log)
        gave_up_on_nothing(up, log)
        expected_new(log, "vmi")
        stops(up)
        assert up.http.delete(f"{VMS}/{NAME}").is_success
        until(lambda: up.http.get(f"{VMS}/{NAME}").status_code == 404, 30, "the VM gone")
    # the clean stop's checkpoints forgot the deleted VM and its VMI

    log.mark()
    with running_up("", 1, data_dir=data_dir) as up:
        assert up.http.post(VMS, json=vm("Halted")).status_code == 201
        assert up.http.put(f"{SUB}/{NAME}/start", json={}).is_success
        runs(up, log)
        gave_up_on_nothing(up, log)
        expected_new(log, "vmi")
