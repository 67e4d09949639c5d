"""A tick that fails is not a retry loop. A tick decides over everything, so one that fails
(a decision that keeps conflicting, a decider that raises) fails again at the next; the
shell's timer ticked on at its interval (a controller whose append conflicted for good
made 8 conflicting appends a second, a "tick failed" line each, and the user saw nothing).
Now each failure in a row doubles the wait before the next tick, a success brings the
interval back, and a give-up on conflicts is dead-lettered once per streak of failures."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from events import subjects
from events.catalog import VMIPauseRequested
from events.envelope import Context, Decision, Stored
from events.meta import Aggregate, Kind
from eventstore.memory import MemoryLog
from services.runtime.appends import MAX_CONFLICT_RETRIES
from services.runtime.shell import ServiceShell
from services.runtime.tick_failures import MAX_BACKOFF, TickFailures
from tests.factories import meta

INTERVAL = 0.01
STUCK = Aggregate(Kind.VMI, "default", "stuck")


class Failing:
    """A reactor whose tick raises, or (`conflicting`) appends to an aggregate that exists
    expecting it new: a conflict at every attempt, then the shell gives up. `healthy`: the
    tick decides nothing. Each tick's time (the shell's clock) is kept."""

    name = "failing"

    def __init__(self, *, conflicting: bool = False) -> None:
        self.conflicting = conflicting
        self.healthy = False
        self.ticks: list[float] = []
        self.failed: list[float] = []

    def filters(self) -> Sequence[str]:
        return [subjects.kind_filter(Kind.VMI)]

    def initial_state(self) -> int:
        return 0

    def holds(self, state: int, key: str) -> bool:
        return True

    def evolve(self, state: int, stored: Stored) -> int:
        return state + 1

    def react(self, state: int, stored: Stored, ctx: Context) -> Sequence[Decision]:
        return []

    def tick(self, state: int, ctx: Context) -> Sequence[Decision]:
        self.ticks.append(ctx.now)
        if self.healthy:
            return []
        if self.conflicting:
            return [Decision(VMIPauseRequested(meta=ctx.meta(STUCK)), expected=0)]
        self.failed.append(ctx.now)
        raise RuntimeError("the decider raises")


async def eventually(cond: Callable[[], bool], timeout: float = 10.0) -> None:
    async with asyncio.timeout(timeout):
        while not cond():  # noqa: ASYNC110
            await asyncio.sleep(0.005)


async def running(shell: ServiceShell[Any, Any, Any], body: Callable[[], Awaitable[None]]) -> None:
    task = asyncio.create_task(shell.run())
    try:
        await eventually(lambda: shell.ready or task.done())
        await body()
    finally:
        shell.stop()
        async with asyncio.timeout(10):
            await task


def test_each_failure_in_a_row_doubles_the_wait_up_to_the_cap() -> None:
    f = TickFailures(1.0)
    assert f.delay == 1.0
    assert [f.failed() for _ in range(8)] == [2.0, 4.0, 8.0, 16.0, 32.0, MAX_BACKOFF, 60.0, 60.0]
    f.succeeded()
    assert f.delay == 1.0 and f.failed() == 2.0
    assert TickFailures(90.0).failed() == 90.0  # never sooner than the interval


def test_a_kind_is_news_once_per_streak() -> None:
    f = TickFailures(1.0)
    f.failed()
    assert f.news("a")
    f.told("a")
    f.failed()
    assert not f.news("a") and f.news("b")
    f.succeeded()
    assert f.news("a")


async def test_a_tick_that_keeps_failing_comes_later_and_later() -> None:
    """Each gap at least the interval doubled once per failure before it (a lower bound:
    a wait never ends early); the old timer ticked again after one interval."""
    reactor = Failing()
    shell = ServiceShell(reactor, MemoryLog(), tick_interval=INTERVAL)

    async def five_failures() -> None:
        await eventually(lambda: len(reactor.failed) >= 5)

    await running(shell, five_failures)
    times = reactor.failed[:5]
    gaps = [b - a for a, b in itertools.pairwise(times)]
    for n, gap in enumerate(gaps, start=1):
        assert gap >= 0.9 * INTERVAL * 2**n, (n, gaps)
    assert shell.tick_failures.streak >= 5


class Waking(Failing):
    """A reactor with an observer whose wakeup is always due (the controller's, while a
    timeout it waits for has passed): a failing tick must not be asked for at once."""

    def observe(self, state: int, obs: None) -> int:
        return state

    def respond(self, state: int, obs: None, ctx: Context) -> Sequence[Decision]:
        return []

    def wakeup(self, state: int) -> float | None:
        return 0.0


async def test_a_wakeup_does_not_ask_for_a_failing_tick_sooner() -> None:
    reactor = Waking()
    reactor.healthy = True  # the first tick, before the shell is ready, succeeds
    shell: ServiceShell[int, Any, None] = ServiceShell(
        reactor, MemoryLog(), tick_interval=INTERVAL, observer=reactor
    )

    async def five_failures() -> None:
        reactor.healthy = False
        await eventually(lambda: len(reactor.failed) >= 5)

    await running(shell, five_failures)
    gaps = [b - a for a, b in itertools.pairwise(reactor.failed[:5])]
    for n, gap in enumerate(gaps, start=1):
        assert gap >= 0.9 * INTERVAL * 2**n, (n, gaps)


async def test_a_tick_that_succeeds_brings_the_interval_back() -> None:
    reactor = Failing()
    shell = ServiceShell(reactor, MemoryLog(), tick_interval=INTERVAL)

    async def fail_then_heal() -> None:
        await eventually(lambda: shell.tick_failures.streak >= 3)
        reactor.healthy = True
        await eventually(lambda: shell.tick_failures.streak == 0)
        healed = len(reactor.ticks)
        assert shell.tick_failures.delay == INTERVAL
        # ticking at the interval again: more ticks come than a backoff would allow
        await eventually(lambda: len(reactor.ticks) >= healed + 10)

    await running(shell, fail_then_heal)


async def test_a_give_up_on_a_tick_is_dead_lettered_once_per_streak() -> None:
    log = MemoryLog()
    await log.append(VMIPauseRequested(meta=meta(Kind.VMI, STUCK.name)))
    reactor = Failing(conflicting=True)
    shell = ServiceShell(reactor, log, tick_interval=INTERVAL)

    async def streaks() -> None:
        await eventually(lambda: shell.tick_failures.streak >= 4)
        (dead,) = log.dead_letters  # four ticks gave up: one record
        error = dead.headers["Virt-Error"]
        assert error == (
            f"GaveUp on a tick: failing: gave up after {MAX_CONFLICT_RETRIES} conflicts"
            f" on {STUCK.kind}/default/stuck"
        )
        assert "Virt-Original-Subject" not in dead.headers and dead.data == b""
        reactor.healthy = True  # the streak ends
        await eventually(lambda: shell.tick_failures.streak == 0)
        reactor.healthy = False  # a new streak: recorded again, once
        await eventually(lambda: shell.tick_failures.streak >= 3)
        assert len(log.dead_letters) == 2

    await running(shell, streaks)


async def test_a_stop_ends_the_shell_while_its_tick_backs_off() -> None:
    reactor = Failing()
    shell = ServiceShell(reactor, MemoryLog(), tick_interval=5.0)

    async def one_failure() -> None:
        await eventually(lambda: shell.tick_failures.streak == 1)  # next tick in 10 s

    async with asyncio.timeout(5):
        await running(shell, one_failure)
    assert len(reactor.failed) == 1
