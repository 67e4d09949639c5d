"""Admission of launcher spawns on one node: at most `limit` run at once, the rest wait in
arrival order.

A spawn is a fork in the zygote and the launcher's start-up (libvirt connect, define), all
CPU. A burst of creates started all at once would share the CPU between every spawn and
finish none early: each would wait for the slowest. Bounded and first-come-first-served,
each spawn gets the CPU it needs and the burst drains in order, while the handler keeps
deciding on its other VMIs meanwhile. Pure bookkeeping; the fleet runs what it admits."""

from __future__ import annotations

from collections import deque
from typing import Generic, TypeVar

T = TypeVar("T")


class SpawnQueue(Generic[T]):
    __slots__ = ("limit", "running", "waiting")

    def __init__(self, limit: int) -> None:
        if limit < 1:
            raise ValueError("the spawn limit must be at least 1")
        self.limit = limit
        self.running = 0
        self.waiting: deque[T] = deque()

    def offer(self, item: T) -> T | None:
        """The item, when it may start now; None when it waits its turn."""
        if self.running < self.limit and not self.waiting:
            self.running += 1
            return item
        self.waiting.append(item)
        return None

    def done(self) -> T | None:
        """One admitted item finished: the next to start in its place, if one waits."""
        if self.running < 1:
            raise ValueError("done() without a running item")
        if self.waiting:
            return self.waiting.popleft()  # takes over the finished one's slot
        self.running -= 1
        return None

    def __len__(self) -> int:
        """Items waiting (not running)."""
        return len(self.waiting)
