"""The read side restarts from its checkpoint plus the tail, and equals a full rebuild."""

from __future__ import annotations

from events.catalog import Unschedulable, VMCreated, VMICreated, VMStartRequested
from events.meta import Kind
from eventstore.jetstream import JetStreamStore
from projections import kube_events
from readside import view_checkpoints
from readside.runner import ProjectionRunner
from readside.watch import Selector
from tests.factories import meta
from tests.integration.test_checkpoints import vm

EVENTS = Selector(kube_events.KIND)


async def test_runner_saves_and_restarts_from_a_checkpoint(store: JetStreamStore) -> None:
    for i in range(30):
        await store.append(VMCreated(meta=meta(name=f"vm{i}"), manifest=vm(f"vm{i}")))
    first = ProjectionRunner(store, checkpoint_name="t-views", checkpoint_every=25)
    await first.start()
    assert first.checkpoint_seq == 25  # the 25th event took one
    await first.cadence.settle()
    await first.stop()  # and stopping saves the rest
    head_seq = first.last_seq

    for i in range(5):
        await store.append(VMStartRequested(meta=meta(name=f"vm{i}")))
    second = ProjectionRunner(store, checkpoint_name="t-views")
    await second.start()
    try:
        assert second.checkpoint_seq == head_seq == 30
        full = ProjectionRunner(store)
        await full.start()
        try:
            assert view_checkpoints.encode_views(second.cluster) == view_checkpoints.encode_views(
                full.cluster
            )
        finally:
            await full.stop()
    finally:
        await second.stop()


async def test_events_survive_a_restart_from_the_snapshot(store: JetStreamStore) -> None:
    """The Event records are in the snapshot: a repeat after the restart counts on the
    record made before it, as a full rebuild does."""
    vmi = {
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachineInstance",
        "metadata": {"name": "v", "namespace": "default", "uid": "uid-v"},
        "spec": {},
    }
    await store.append(VMICreated(meta=meta(Kind.VMI, "v"), manifest=vmi))
    full_message = "0/1 nodes are available: 1 Insufficient memory."
    for _ in range(2):
        await store.append(
            Unschedulable(meta=meta(Kind.VMI, "v"), reason="Unschedulable", message=full_message)
        )
    first = ProjectionRunner(store, checkpoint_name="t-events")
    await first.start()
    await first.stop()  # saves the snapshot
    await store.append(
        Unschedulable(meta=meta(Kind.VMI, "v"), reason="Unschedulable", message=full_message)
    )
    second = ProjectionRunner(store, checkpoint_name="t-events")
    await second.start()
    full = ProjectionRunner(store)
    await full.start()
    try:
        assert second.checkpoint_seq == 3
        assert [(e["reason"], e["count"]) for e in second.list(EVENTS)] == [("FailedScheduling", 3)]
        assert second.list(EVENTS) == full.list(EVENTS)
    finally:
        await full.stop()
        await second.stop()
