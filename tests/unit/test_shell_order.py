"""A service folds its own optimistic append as soon as the stream acknowledges it. On a
replicated stream the expected-sequence check can pass while another service's event on
the same aggregate is still being replicated, so that event lands before ours unseen. The
shell must not skip it as "already folded" (the controller then never learnt that a
launcher had exited, and a VM stayed down): it stops, and its restart folds in order."""

from __future__ import annotations

from typing import cast

import pytest

from events import subjects
from events.catalog import Event, StopReason, VMIDeleteRequested
from events.codec import event_type
from events.envelope import Context, Stored
from events.meta import Kind
from eventstore.port import EventLog
from services.controller.reactor import ControllerReactor
from services.controller.state import ControllerState
from services.runtime.shell import ServiceShell, Unordered
from tests.unit.test_controller_world import World, types


def stored(seq: int, ev: Event) -> Stored:
    subject = subjects.event_subject(ev.meta.aggregate, event_type(ev), ev.meta.node)
    return Stored(seq=seq, subject=subject, time=1000.0, event=ev)


def running_vm() -> tuple[World, ServiceShell[ControllerState]]:
    """vm1 Running on node1, folded by a controller's shell from the stream."""
    w = World()
    w.given(w.node_joined("node1"))
    w.run(w.vm_created("vm1"))
    w.start_running("vm1")
    shell: ServiceShell[ControllerState] = ServiceShell(
        ControllerReactor(node_timeout=1e9), cast(EventLog, None)
    )
    for s in w.log:
        shell.fold(s)
    return w, shell


def test_an_event_landed_before_our_own_append_unseen_stops_the_service() -> None:
    w, shell = running_vm()
    n = w.seq
    stopped = w.domain_stopped("vm1", StopReason.FAILED)
    exited = w.launcher_exited("vm1")
    shell.fold(stored(n + 1, stopped))  # delivered; the controller asks to delete the VMI
    delete = VMIDeleteRequested(meta=w.m(Kind.VMI, "vm1", "node1"))
    # the handler's LauncherExited was still replicating when ours passed its check
    shell.fold(stored(n + 3, delete), own=True)
    with pytest.raises(Unordered):
        shell.fold(stored(n + 2, exited))  # delivered now: it was never folded


def test_in_order_own_appends_and_redeliveries_fold_as_before() -> None:
    w, shell = running_vm()
    n = w.seq
    shell.fold(stored(n + 1, w.domain_stopped("vm1", StopReason.FAILED)))
    shell.fold(stored(n + 2, w.launcher_exited("vm1")))
    delete = VMIDeleteRequested(meta=w.m(Kind.VMI, "vm1", "node1"))
    assert shell.fold(stored(n + 3, delete), own=True)
    assert not shell.fold(stored(n + 3, delete))  # delivered back: already folded
    assert not shell.fold(w.log[-1])  # an old event again (a redelivery)
    assert not shell.ahead
    vmi = shell.state.cluster.vmis["default/vm1"]
    assert vmi.launcher_exited and vmi.deletion_requested_at is not None


def test_after_the_restart_the_vmi_is_removed() -> None:
    """The restart folds the stream in its order; the tick then removes the failed VMI,
    which the stopped service's state (launcher still running) never would."""
    w, _ = running_vm()
    n = w.seq
    events = [
        (n + 1, w.domain_stopped("vm1", StopReason.FAILED)),
        (n + 2, w.launcher_exited("vm1")),
        (n + 3, VMIDeleteRequested(meta=w.m(Kind.VMI, "vm1", "node1"))),
    ]
    restarted: ServiceShell[ControllerState] = ServiceShell(
        ControllerReactor(node_timeout=1e9), cast(EventLog, None)
    )
    for s in [*w.log, *(stored(seq, ev) for seq, ev in events)]:
        restarted.fold(s)
    decided = restarted.reactor.tick(restarted.state, Context("virt-controller", "", 1001, None))
    assert "VMIRemoved" in types([d.event for d in decided])  # type: ignore[union-attr]
