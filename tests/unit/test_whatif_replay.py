"""A what-if read in this process and decided in a forked child (services/whatif/replay.py)
reports what the same sandbox reports fed in one process; a decider's failure and a
read's failure each end it with that failure, the child gone."""

from __future__ import annotations

import os
import time
from collections.abc import AsyncGenerator, Sequence

import pytest

from events.codec import encode
from events.envelope import Context, Decision, Stored
from eventstore.memory import MemoryLog
from eventstore.port import Record, Unavailable
from services.controller import scheduler
from services.controller.reactor import ControllerReactor
from services.controller.state import ControllerState
from services.controller.whatif import Report, WhatIf
from services.whatif import replay
from tests.unit.test_whatif import history


def logged() -> tuple[MemoryLog, list[Stored]]:
    """The log of a live controller's history, and a message no version can read."""
    log = history().log
    at = [0.0]
    store = MemoryLog(clock=lambda: at[0])
    for s in log:
        at[0] = s.time
        store.store_raw(s.subject, encode(s.event))
    store.store_raw("virt.vm.default.junk.VMCreated", b"{not an event")
    return store, log


def fed(log: list[Stored], sandbox: WhatIf) -> Report:
    for s in log:
        sandbox.feed(s)
    sandbox.skip(len(log) + 1, "virt.vm.default.junk.VMCreated")
    return sandbox.report()


async def test_a_forked_what_if_reports_what_one_process_does() -> None:
    store, log = logged()
    for policy in (scheduler.SPREAD, scheduler.PACK):
        here = fed(log, WhatIf(ControllerReactor(node_timeout=1e9, scheduler_policy=policy)))
        there = await replay.replay(
            store, WhatIf(ControllerReactor(node_timeout=1e9, scheduler_policy=policy))
        )
        assert there == here
    assert here.differences  # pack placed elsewhere: the comparison has something to say


class Broken(ControllerReactor):
    def react(self, state: ControllerState, stored: Stored, ctx: Context) -> Sequence[Decision]:
        if stored.seq == 20:
            raise KeyError("no such node")
        return super().react(state, stored, ctx)


@pytest.fixture
def forked(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The pids the replay forks (to see that each was waited for)."""
    pids: list[int] = []
    fork = os.fork

    def recorded() -> int:
        pid = fork()
        pids.append(pid)
        return pid

    monkeypatch.setattr(os, "fork", recorded)
    return pids


def waited(pids: list[int]) -> bool:
    for pid in pids:
        with pytest.raises(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)
    return bool(pids)


async def test_a_deciders_failure_is_raised_with_its_error(forked: list[int]) -> None:
    store, _ = logged()
    with pytest.raises(replay.DeciderFailed, match="KeyError: 'no such node'"):
        await replay.replay(store, WhatIf(Broken(node_timeout=1e9)))
    # and when the reader still has more than the pipe holds to write after the failure
    log = history().log
    while sum(len(m.data) for m in store.messages) < 4 * replay.PIPE_BYTES:
        for s in log:
            store.store_raw(s.subject, encode(s.event))
    with pytest.raises(replay.DeciderFailed, match="KeyError: 'no such node'"):
        await replay.replay(store, WhatIf(Broken(node_timeout=1e9)))
    assert waited(forked)


class Cut(MemoryLog):
    """A log whose connection goes away after `CUT` records (a frame or more sent)."""

    async def records(
        self, *, start_seq: int = 1, follow: bool = False, as_archived: bool = False
    ) -> AsyncGenerator[Record, None]:
        n = 0
        async for r in super().records(start_seq=start_seq, follow=follow):
            n += 1
            if n > CUT:
                raise Unavailable("the log went away")
            yield r


CUT = replay.BATCH + 10  # past a frame: the child has begun


async def test_a_reads_failure_is_raised_and_the_child_is_gone(forked: list[int]) -> None:
    store = Cut()
    log = history().log
    while len(store.messages) <= CUT:  # (the same history again: it is cut before its end)
        for s in log:
            store.store_raw(s.subject, encode(s.event))
    started = time.monotonic()
    with pytest.raises(Unavailable, match="went away"):
        await replay.replay(store, WhatIf(ControllerReactor(node_timeout=1e9)))
    assert time.monotonic() - started < 10
    assert waited(forked)
