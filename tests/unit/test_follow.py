"""Following the log for good (eventstore/follow.py): a read that ends is run again from
where it stood, with a pause that grows while nothing moves and starts small again once
something did."""

from __future__ import annotations

import asyncio

import pytest

from eventstore import follow


async def test_reads_resume_with_a_backoff_reset_by_progress(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    pauses: list[float] = []
    real_sleep = asyncio.sleep

    async def sleep(seconds: float) -> None:
        pauses.append(seconds)
        await real_sleep(0)

    monkeypatch.setattr(follow.asyncio, "sleep", sleep)
    position = 0
    runs = 0

    async def read() -> None:
        nonlocal position, runs
        runs += 1
        if runs in (1, 2, 3):
            raise ConnectionError("server gone")  # nothing read: the pause grows
        if runs == 4:
            position += 5  # read on, then the read ended: the pause starts small again
            return
        if runs == 6:
            raise asyncio.CancelledError
        raise ConnectionError("gone again")

    with pytest.raises(asyncio.CancelledError):
        await follow.resuming(read, "test reader", lambda: position)
    assert pauses == [0.1, 0.2, 0.4, 0.1, 0.2]
    assert runs == 6
