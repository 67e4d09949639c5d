"""Run strategies and state change requests, given/when/then on plain data."""

from __future__ import annotations

from events.catalog import (
    StopReason,
    VMICreated,
    VMIDeleteRequested,
    VMRestartRequested,
    VMRunStrategyChanged,
    VMStartRequested,
    VMStateChangeRequestsCleared,
    VMStopRequested,
)
from events.meta import Kind
from tests.unit.test_controller_world import World, of, types


def running(strategy: str) -> World:
    w = World()
    w.given(w.node_joined("node1"))
    w.run(w.vm_created("vm1", strategy) if strategy != "Manual" else w.vm_created("vm1", "Manual"))
    if strategy == "Manual":
        w.run(VMStartRequested(meta=w.m(Kind.VM, "vm1")))
    w.start_running()
    assert w.vmi() is not None and w.vmi().phase == "Running"  # type: ignore[union-attr]
    return w


def test_always_recreates_a_vmi_that_shut_down() -> None:
    w = running("Always")
    old = w.vmi().uid  # type: ignore[union-attr]
    out = w.stop_guest(reason=StopReason.SHUTDOWN)
    assert types(out) == ["VMIDeleteRequested", "VMIRemoved", "VMICreated", "PodScheduled"]
    assert w.vmi().uid != old  # type: ignore[union-attr]


def test_restart_is_stop_then_start_with_a_new_vmi() -> None:
    w = running("Always")
    old = w.vmi().uid  # type: ignore[union-attr]
    out = w.run(VMRestartRequested(meta=w.m(Kind.VM, "vm1"), vmi_uid=old))
    assert types(out) == ["VMIDeleteRequested"]  # the Start waits for the old VMI to go
    assert w.vm().requests  # not cleared yet
    out = w.stop_guest(reason=StopReason.DESTROYED)
    assert types(out) == [
        "VMIRemoved",
        "VMICreated",
        "VMStateChangeRequestsCleared",
        "PodScheduled",
    ]
    assert w.vmi().uid != old and not w.vm().requests  # type: ignore[union-attr]


def test_stop_on_always_via_halted_deletes_and_does_not_recreate() -> None:
    w = running("Always")
    uid = w.vmi().uid  # type: ignore[union-attr]
    # the api turns Always + stop into Halted, then records the stop request
    w.given(VMRunStrategyChanged(meta=w.m(Kind.VM, "vm1"), run_strategy="Halted"))
    out = w.run(VMStopRequested(meta=w.m(Kind.VM, "vm1"), vmi_uid=uid, grace_period_seconds=5))
    assert types(out) == ["VMIDeleteRequested", "VMStateChangeRequestsCleared"]
    assert types(w.stop_guest()) == ["VMIRemoved"]
    assert w.vmi() is None and w.tick() == []


def test_start_on_halted_via_always_creates() -> None:
    w = World()
    w.given(w.node_joined("node1"))
    assert w.run(w.vm_created("vm1", "Halted")) == []
    w.given(VMRunStrategyChanged(meta=w.m(Kind.VM, "vm1"), run_strategy="Always"))
    out = w.run(VMStartRequested(meta=w.m(Kind.VM, "vm1")))
    assert types(out) == ["VMICreated", "VMStateChangeRequestsCleared", "PodScheduled"]


def test_halted_deletes_any_vmi() -> None:
    w = running("Always")
    out = w.run(VMRunStrategyChanged(meta=w.m(Kind.VM, "vm1"), run_strategy="Halted"))
    assert types(out) == ["VMIDeleteRequested"]


def test_manual_acts_only_on_requests_and_keeps_a_final_vmi() -> None:
    w = World()
    w.given(w.node_joined("node1"))
    assert w.run(w.vm_created("vm1", "Manual")) == []
    out = w.run(VMStartRequested(meta=w.m(Kind.VM, "vm1"), paused=True))
    assert types(out) == ["VMICreated", "VMStateChangeRequestsCleared", "PodScheduled"]
    assert of(out, VMICreated)[0].manifest["spec"]["startStrategy"] == "Paused"
    w.start_running()
    assert types(w.stop_guest()) == []  # final VMI stays
    assert w.vmi().phase == "Succeeded"  # type: ignore[union-attr]
    # a start on a final VMI replaces it
    out = w.run(VMStartRequested(meta=w.m(Kind.VM, "vm1")))
    assert types(out) == [
        "VMIDeleteRequested",
        "VMIRemoved",
        "VMICreated",
        "VMStateChangeRequestsCleared",
        "PodScheduled",
    ]
    assert "startStrategy" not in of(out, VMICreated)[0].manifest["spec"]


def test_manual_stop_deletes_and_clears() -> None:
    w = running("Manual")
    uid = w.vmi().uid  # type: ignore[union-attr]
    out = w.run(VMStopRequested(meta=w.m(Kind.VM, "vm1"), vmi_uid=uid))
    assert types(out) == ["VMIDeleteRequested", "VMStateChangeRequestsCleared"]
    assert isinstance(out[0], VMIDeleteRequested) and out[0].meta.node == "node1"
    assert types(w.stop_guest()) == ["VMIRemoved"]
    assert w.tick() == []


def test_rerun_on_failure_restarts_failed_but_not_succeeded() -> None:
    w = running("RerunOnFailure")
    out = w.stop_guest(reason=StopReason.CRASHED)
    assert types(out) == ["VMIDeleteRequested", "VMIRemoved", "VMICreated", "PodScheduled"]
    w.start_running()
    out = w.stop_guest(reason=StopReason.SHUTDOWN)
    assert types(out) == ["VMIDeleteRequested", "VMIRemoved"]
    assert w.vmi() is None and w.tick() == []
    # an explicit start brings it back
    out = w.run(VMStartRequested(meta=w.m(Kind.VM, "vm1")))
    assert types(out) == ["VMICreated", "VMStateChangeRequestsCleared", "PodScheduled"]


def test_rerun_on_failure_stop_is_not_a_failure() -> None:
    w = running("RerunOnFailure")
    uid = w.vmi().uid  # type: ignore[union-attr]
    w.run(VMStopRequested(meta=w.m(Kind.VM, "vm1"), vmi_uid=uid))
    # the guest ignored ACPI and was destroyed at the deadline: Failed, but it was a stop
    out = w.stop_guest(reason=StopReason.CRASHED)
    assert types(out) == ["VMIRemoved"]
    assert w.tick() == []


def test_once_runs_once_and_keeps_the_final_vmi() -> None:
    w = running("Once")
    assert types(w.stop_guest(reason=StopReason.CRASHED)) == []
    assert w.vmi().phase == "Failed" and w.tick() == []  # type: ignore[union-attr]


def test_a_stop_grace_period_reaches_the_vmi_deletion() -> None:
    w = running("Manual")
    uid = w.vmi().uid  # type: ignore[union-attr]
    out = w.run(VMStopRequested(meta=w.m(Kind.VM, "vm1"), vmi_uid=uid, grace_period_seconds=7))
    (deletion,) = of(out, VMIDeleteRequested)
    assert deletion.grace_period_seconds == 7
    assert deletion.meta.node == w.vmi().node  # type: ignore[union-attr]


def test_clearing_the_requests_decided_again_before_its_own_append_is_the_same_decision() -> None:
    """The live controller folds its own appends as they land; a replay in log order (what-if)
    may decide on an event that came between the decision and its append: the clear it
    decides there is the same event (the same id, a duplicate), not a second one."""
    w = running("Always")
    uid = w.vmi().uid  # type: ignore[union-attr]
    w.given(VMRunStrategyChanged(meta=w.m(Kind.VM, "vm1"), run_strategy="Halted"))
    first = of(w.when(VMStopRequested(meta=w.m(Kind.VM, "vm1"), vmi_uid=uid)),
               VMStateChangeRequestsCleared)  # fmt: skip
    # another event of the VM lands before the clear does (its version moves on)
    again = of(w.when(VMRunStrategyChanged(meta=w.m(Kind.VM, "vm1"), run_strategy="Halted")),
               VMStateChangeRequestsCleared)  # fmt: skip
    assert len(first) == len(again) == 1
    assert first[0].meta.event_id == again[0].meta.event_id
