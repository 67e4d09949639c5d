"""The handler's spawn admission: bounded, first come first served."""

import pytest

from services.handler.spawn_queue import SpawnQueue


def test_admits_up_to_the_limit_then_queues_in_arrival_order() -> None:
    q: SpawnQueue[str] = SpawnQueue(2)
    assert q.offer("a") == "a"
    assert q.offer("b") == "b"
    assert q.offer("c") is None
    assert q.offer("d") is None
    assert (q.running, len(q)) == (2, 2)
    assert q.done() == "c"  # the oldest waiting one takes the freed slot
    assert q.done() == "d"
    assert (q.running, len(q)) == (2, 0)
    assert q.done() is None
    assert q.done() is None
    assert q.running == 0


def test_a_newcomer_never_overtakes_a_waiting_item() -> None:
    q: SpawnQueue[int] = SpawnQueue(1)
    assert q.offer(1) == 1
    assert q.offer(2) is None
    assert q.done() == 2
    assert q.offer(3) is None  # a slot is taken by 2: 3 waits behind nobody but must wait
    assert q.done() == 3
    assert q.done() is None
    assert q.offer(4) == 4


def test_rejects_a_limit_below_one_and_an_unmatched_done() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        SpawnQueue(0)
    with pytest.raises(ValueError, match="without a running item"):
        SpawnQueue[int](1).done()
