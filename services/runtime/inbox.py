"""The queue an executor's observations come back through to the shell (asyncio's, so it
lives apart from the pure types in reactor.py)."""

from __future__ import annotations

import asyncio
from collections import deque
from typing import Generic

from typing_extensions import TypeVar

Ob = TypeVar("Ob")


class Inbox(Generic[Ob]):
    """Observations in the order they were made. The shell folds them all before each
    decision, in this order: a snapshot never overtakes a newer one."""

    __slots__ = ("_items", "_ready")

    def __init__(self) -> None:
        self._items: deque[Ob] = deque()
        self._ready = asyncio.Event()

    def put(self, obs: Ob) -> None:
        self._items.append(obs)
        self._ready.set()

    def take(self) -> list[Ob]:
        items = list(self._items)
        self._items.clear()
        self._ready.clear()
        return items

    async def wait(self) -> None:
        await self._ready.wait()
