"""A service's reads ride out the event log's failover: a pull or a consumer bind answered
"unavailable" (a stream or consumer leader being elected after a server of the cluster
died) is asked again after a growing wait, instead of stopping the process; past the bound
the error stands, so a log that stays away still stops the service (no retry loop)."""

from __future__ import annotations

from typing import Any

import pytest
import structlog

from eventstore.port import Refused, TimedOut, Unavailable
from services.runtime import failover
from services.runtime.failover import riding_out

log = structlog.get_logger()


class Flaky:
    def __init__(self, failures: int, error: Exception | None = None) -> None:
        self.failures = failures
        self.error = error or Unavailable("no responders")
        self.calls = 0

    async def __call__(self) -> str:
        self.calls += 1
        if self.calls <= self.failures:
            raise self.error
        return "read"


@pytest.fixture(autouse=True)
def short_waits(monkeypatch: Any) -> None:
    monkeypatch.setattr(failover, "FIRST", 0.001)
    monkeypatch.setattr(failover, "LONGEST", 0.004)


async def test_an_election_passes_and_the_read_is_answered() -> None:
    read = Flaky(3, TimedOut("nats: timeout"))
    assert await riding_out(read, log, "pull") == "read"
    assert read.calls == 4


async def test_a_log_that_stays_away_is_given_up_on() -> None:
    read = Flaky(10**6)
    with pytest.raises(Unavailable):
        await riding_out(read, log, "pull", within=0.05)
    assert 1 < read.calls < 100  # waited between tries, not spun


async def test_a_refusal_is_never_asked_again() -> None:
    read = Flaky(1, Refused("stream not found"))
    with pytest.raises(Refused):
        await riding_out(read, log, "consumer")
    assert read.calls == 1
