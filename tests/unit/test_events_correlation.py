"""`virtstream events --correlation`: which events belong to one request (readside/
correlation.py), on the scripted lifecycle; the read itself on the in-memory log, which
keeps no index (the scan every log falls back to)."""

from __future__ import annotations

from events.meta import Aggregate, Kind
from eventstore.memory import MemoryLog
from projections.replay import Point
from readside.correlation import events_of, matcher, merged
from tests.debug_scenario import NS, lifecycle

VMI1 = Aggregate(kind=Kind.VMI, namespace=NS, name="vm1")
START = [4, 5, 6, 7, 8, 9]  # VMStartRequested (req-2) and what it caused


def test_a_correlation_is_the_request_and_every_reaction_to_it() -> None:
    stored = lifecycle().stored()
    assert [s.seq for s in stored if matcher("req-2")(s)] == START
    assert [s.seq for s in stored if matcher("req-2", agg=VMI1)(s)] == [5, 7, 8, 9]
    assert [s.seq for s in stored if matcher("req-2", etype="PodScheduled")(s)] == [7]
    assert [s.seq for s in stored if matcher("req-2", since=Point(seq=7))(s)] == [7, 8, 9]
    at_8 = stored[7].time
    assert [s.seq for s in stored if matcher("req-2", since=Point(time=at_8))(s)] == [8, 9]
    assert not [s for s in stored if matcher("req-404")(s)]


def test_indexed_and_tail_meet_at_upto_once_each_in_order() -> None:
    stored = {s.seq: s for s in lifecycle().stored()}
    # the index wrote 9 after `upto` was read: the tail (read from after `upto`) has it
    indexed = [stored[n] for n in (4, 5, 9, 6, 8)]
    tail = [stored[n] for n in (9, 12)]
    assert [s.seq for s in merged(indexed, tail, upto=8)] == [4, 5, 6, 8, 9, 12]
    assert merged([], [], upto=8) == []


async def test_the_in_memory_logs_index_finds_a_correlations_events() -> None:
    log = MemoryLog()
    for ev in lifecycle().events:
        await log.append(ev)
    assert [s.seq for s in await events_of(log, "req-2")] == START
    assert [s.seq for s in await events_of(log, "req-2", agg=VMI1, etype="DomainStarted")] == [9]
    assert await events_of(log, "req-404") == []
