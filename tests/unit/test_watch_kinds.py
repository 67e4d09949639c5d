"""A watch of one kind ignores changes of other kinds that share its keys (a VM and its
VMI are both "ns/name")."""

from __future__ import annotations

from events.meta import Kind
from readside.watch import Change, EventType, Selector, Watcher


def obj(phase: str | None = None) -> dict[str, object]:
    o: dict[str, object] = {"metadata": {"name": "a", "namespace": "default"}}
    if phase:
        o["status"] = {"phase": phase}
    return o


def test_a_vm_change_is_not_a_deleted_vmi() -> None:
    w = Watcher(Selector.parse(Kind.VMI, "default"))
    w.offer(Change(1, EventType.ADDED, Kind.VMI, "default/a", obj("Pending")))
    w.offer(Change(1, EventType.MODIFIED, Kind.VM, "default/a", obj()))
    w.offer(Change(2, EventType.MODIFIED, Kind.VMI, "default/a", obj("Running")))
    w.offer(Change(2, EventType.DELETED, Kind.VM, "default/a", obj()))
    types = []
    while not w.queue.empty():
        item = w.queue.get_nowait()
        assert item is not None
        types.append((item["type"], item["object"].get("status")))
    assert types == [("ADDED", {"phase": "Pending"}), ("MODIFIED", {"phase": "Running"})]
