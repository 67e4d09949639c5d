"""The read side restarts from its snapshot plus the tail, and equals a full rebuild."""

from __future__ import annotations

from events.catalog import VMCreated, VMStartRequested
from eventstore.jetstream import JetStreamStore
from readside import snapshots
from readside.runner import ProjectionRunner
from tests.factories import meta


def vm(name: str) -> dict[str, object]:
    return {
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachine",
        "metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}"},
        "spec": {"runStrategy": "Manual", "template": {"spec": {}}},
    }


async def test_runner_saves_and_restarts_from_a_snapshot(store: JetStreamStore) -> None:
    for i in range(30):
        await store.append(VMCreated(meta=meta(name=f"vm{i}"), manifest=vm(f"vm{i}")))
    first = ProjectionRunner(store, snapshot_name="t-views", snapshot_every=25)
    await first.start()
    assert first._saving is not None
    await first._saving  # the 25th event triggered a save
    await first.stop()  # and stopping saves the rest
    head_seq = first.last_seq

    for i in range(5):
        await store.append(VMStartRequested(meta=meta(name=f"vm{i}")))
    second = ProjectionRunner(store, snapshot_name="t-views")
    await second.start()
    try:
        assert second.snapshot_seq == head_seq == 30
        full = ProjectionRunner(store)
        await full.start()
        try:
            assert snapshots.encode_views(second.cluster) == snapshots.encode_views(full.cluster)
        finally:
            await full.stop()
    finally:
        await second.stop()
