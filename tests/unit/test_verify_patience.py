"""`virtstream verify` waits through JetStream API timeouts (a meta leader settling after a
failover) for a few seconds, then gives up with the last one."""

from __future__ import annotations

import time

import pytest

from cli.debug import through_timeouts


async def test_a_call_that_times_out_twice_is_answered() -> None:
    calls = 0

    async def flaky() -> str:
        nonlocal calls
        calls += 1
        if calls < 3:
            raise TimeoutError("nats: timeout")
        return "report"

    assert await through_timeouts(flaky, patience=5.0) == "report"
    assert calls == 3


async def test_timeouts_past_the_patience_raise_the_last_one() -> None:
    calls = 0

    async def down() -> str:
        nonlocal calls
        calls += 1
        raise TimeoutError(f"nats: timeout {calls}")

    started = time.monotonic()
    with pytest.raises(TimeoutError, match=r"timeout \d"):
        await through_timeouts(down, patience=1.0)
    assert time.monotonic() - started < 1.5
    assert 2 <= calls <= 4  # backoff, not a busy loop


async def test_another_error_is_not_asked_again() -> None:
    calls = 0

    async def wrong() -> str:
        nonlocal calls
        calls += 1
        raise ValueError("a difference")

    with pytest.raises(ValueError):
        await through_timeouts(wrong, patience=5.0)
    assert calls == 1
