"""cli/drain.py's progress loop against a scripted sequence of API listings."""

from __future__ import annotations

from typing import Any

from cli.drain import blocked_reason, drain_progress


def vmi(
    name: str,
    node: str,
    *,
    strategy: str | None = None,
    migratable: bool = True,
    uid: str = "",
) -> Any:
    spec = {"evictionStrategy": strategy} if strategy else {}
    cond = {"type": "LiveMigratable", "status": "True" if migratable else "False"}
    return {
        "metadata": {"name": name, "namespace": "default", "uid": uid or f"uid-{name}"},
        "spec": spec,
        "status": {"nodeName": node, "phase": "Running", "conditions": [cond]},
    }


def vmim(vmi_name: str, phase: str, target: str = "") -> Any:
    state = {"targetNode": target} if target else {}
    return {
        "metadata": {"name": f"m-{vmi_name}", "namespace": "default"},
        "spec": {"vmiName": vmi_name},
        "status": {"phase": phase, "migrationState": state},
    }


class Script:
    """Each poll returns the next (vmis, migrations) snapshot; the last one repeats."""

    def __init__(self, *snapshots: tuple[list[Any], list[Any]]) -> None:
        self.snapshots = list(snapshots)
        self.i = 0

    def list(self, kind: str, **_: Any) -> list[Any]:
        vmis, migs = self.snapshots[min(self.i, len(self.snapshots) - 1)]
        if kind == "vmi":
            return vmis
        self.i += 1
        return migs


def test_progress_until_the_node_is_empty() -> None:
    a, b = vmi("a", "node1", strategy="LiveMigrate"), vmi("b", "node1")
    script = Script(
        ([a, b], [vmim("a", "Scheduled", "node2")]),
        ([a], [vmim("a", "Running", "node2")]),
        ([vmi("a", "node2", strategy="LiveMigrate")], []),
    )
    lines: list[str] = []
    assert drain_progress(script, "node1", out=lines.append, sleep=lambda _: None) == 0
    # what became of each VMI: b (no eviction strategy) was deleted, a moved
    assert lines == [
        "default/a: migrating (Scheduled) to node2",
        "default/b: Running",
        "default/a: migrating (Running) to node2",
        "default/b: deleted (evictionStrategy None: a drain does not migrate it)",
        "default/a: migrated to node2",
        "node/node1 drained",
    ]


def test_only_blocked_vmis_left_stops_with_their_reason() -> None:
    stuck = vmi("stuck", "node1", strategy="LiveMigrate", migratable=False)
    assert blocked_reason(stuck) == (
        "VMI stuck is configured with an eviction strategy but is not live-migratable"
    )
    lines: list[str] = []
    assert drain_progress(Script(([stuck], [])), "node1", out=lines.append) == 1
    assert lines[0].startswith("default/stuck: blocked: VMI stuck")
    assert "cannot be drained" in lines[-1]


def test_a_vmi_deleted_and_recreated_by_its_vm_is_restarted_not_migrated() -> None:
    old = vmi("vm1", "node1")
    script = Script(([old], []), ([vmi("vm1", "node2", uid="uid-vm1-new")], []))
    lines: list[str] = []
    assert drain_progress(script, "node1", out=lines.append, sleep=lambda _: None) == 0
    assert lines == [
        "default/vm1: Running",
        "default/vm1: restarted on node2 (a new VMI of its VM)",
        "node/node1 drained",
    ]
