"""A filtered watch follows objects in and out of its selector, as Kubernetes' does."""

from __future__ import annotations

from events.meta import Kind
from readside.watch import Change, EventType, Selector, Watcher


def vm(labels: dict[str, str]) -> dict[str, object]:
    return {"metadata": {"name": "a", "namespace": "default", "labels": labels}}


def drain(w: Watcher) -> list[tuple[str, dict[str, object]]]:
    out = []
    while not w.queue.empty():
        item = w.queue.get_nowait()
        assert item is not None
        out.append((item["type"], item["object"]["metadata"]["labels"]))
    return out


def test_objects_entering_and_leaving_a_label_selector() -> None:
    w = Watcher(Selector.parse(Kind.VM, "default", "app=web"))
    w.offer(Change(1, EventType.ADDED, Kind.VM, "default/a", vm({"app": "db"})))
    assert drain(w) == []
    w.offer(Change(2, EventType.MODIFIED, Kind.VM, "default/a", vm({"app": "web"})))
    assert drain(w) == [("ADDED", {"app": "web"})]
    w.offer(Change(3, EventType.MODIFIED, Kind.VM, "default/a", vm({"app": "web", "x": "1"})))
    assert drain(w) == [("MODIFIED", {"app": "web", "x": "1"})]
    w.offer(Change(4, EventType.MODIFIED, Kind.VM, "default/a", vm({"app": "db"})))
    assert drain(w) == [("DELETED", {"app": "db"})]
    w.offer(Change(5, EventType.DELETED, Kind.VM, "default/a", vm({"app": "db"})))
    assert drain(w) == []


def test_an_unfiltered_watch_passes_types_through() -> None:
    w = Watcher(Selector.parse(Kind.VM, "default"))
    w.offer(Change(1, EventType.MODIFIED, Kind.VM, "default/a", vm({})))
    w.offer(Change(2, EventType.DELETED, Kind.VM, "default/a", vm({})))
    assert [t for t, _ in drain(w)] == ["MODIFIED", "DELETED"]
