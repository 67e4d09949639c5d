"""The compressed watch history: every kept change after an rv, in order; whole blocks
leave the window and move the floor."""

from __future__ import annotations

import pytest

from events.meta import Kind, KindToken
from readside.watch import Change, EventType
from readside.watch_history import WatchHistory


def change(seq: int, name: str = "a", kind: KindToken = Kind.VMI) -> Change:
    obj = {"metadata": {"name": name, "resourceVersion": str(seq)}, "status": {"n": seq}}
    return Change(seq, EventType.MODIFIED, kind, f"default/{name}", obj)


def test_after_returns_every_later_change_in_order_across_blocks_and_the_open_one() -> None:
    h = WatchHistory(100, block=4)
    changes = [change(s, name) for s in range(1, 11) for name in ("a", "b")]  # 2 per seq
    for c in changes:
        h.append(c)
    assert len(h) == 20 and h.floor == 0
    assert list(h.after(0)) == changes
    assert list(h.after(7)) == [c for c in changes if c.seq > 7]
    assert list(h.after(10)) == []


def test_kinds_and_types_survive_the_round_trip() -> None:
    h = WatchHistory(10, block=2)
    added = Change(1, EventType.ADDED, Kind.VM, "default/x", {"kind": "VirtualMachine"})
    deleted = Change(2, EventType.DELETED, Kind.NODE, "node-1", {"kind": "Node"})
    h.append(added)
    h.append(deleted)
    assert list(h.after(0)) == [added, deleted]


def test_whole_blocks_leave_the_window_and_move_the_floor() -> None:
    h = WatchHistory(8, block=2)  # limit // 4 = 2
    for s in range(1, 12):
        h.append(change(s))
    # 11 appended, at most 8 kept: the blocks (1, 2) and (3, 4) left
    assert len(h) == 7
    assert h.floor == 4
    assert [c.seq for c in h.after(h.floor)] == list(range(5, 12))


def test_the_floor_is_the_last_dropped_seq_even_when_a_kept_change_shares_it() -> None:
    # one event touching two objects can straddle a block boundary
    h = WatchHistory(4, block=1)
    for c in (change(1), change(2, "a"), change(2, "b"), change(3), change(4), change(5)):
        h.append(c)
    assert h.floor == 2
    assert [(c.seq, c.object["metadata"]["name"]) for c in h.after(2)] == [
        (3, "a"),
        (4, "a"),
        (5, "a"),
    ]


def test_at_least_one_change() -> None:
    with pytest.raises(ValueError):
        WatchHistory(0)
