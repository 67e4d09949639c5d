"""What-if: the log replayed through a controller decider in a sandbox, its decisions
compared with the ones the log records.

The sandbox folds every event of the log once, in stream order (the live controller's
own decisions included, where they landed: the sandbox's state is the cluster the live
one saw, not one its changed decisions would have made), and decides once on each event
of the window with a `Context` built from that event, as the shell builds it (the cause,
its server time as `now`): the ids a decision gets are the live one's. Nothing is
appended anywhere: a decision is only compared.

Matching, by event id: every controller decision's id is derived from the state it
answers (services/controller/emit.py), not from when or through which cause it was
reached, so the same decision has the same id whether the live controller made it on
the event, on a later one or on a tick (a repeat is a duplicate JetStream dropped).
- an id both decided: a difference when the events differ (`occurred_at` and the
  causation fields aside: they say when and through which cause, not what);
- an id only the live controller recorded, for a cause in the window: `live` only;
  recorded for a tick (no cause: `causation_seq` 0) it is left out (the sandbox does not
  tick: the time of a tick is not in the log) and counted;
- an id only the sandbox decided: `whatif` only (unless the log recorded it before the
  window).
A change of the cluster's own objects (`--migration-policy`: a MigrationPolicy as if it
had been created when the window began) is a `prelude`: events folded into the sandbox's
state just before the window's first event, made from the state as it stands there.
Pure: no I/O; `feed` is O(decisions of one event), the bookkeeping is one entry per
decision id."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any, Protocol

import msgspec

from events.catalog import Event, PodScheduled
from events.codec import event_type
from events.envelope import Context, Decision, Stored
from events.subjects import event_subject
from services.controller import scheduler
from services.controller.reactor import NAME


class Decider(Protocol):
    """What a what-if replays: a controller decider (ControllerReactor's shape)."""

    name: str

    def initial_state(self) -> Any: ...

    def evolve(self, state: Any, stored: Stored) -> Any: ...

    def react(self, state: Any, stored: Stored, ctx: Context) -> Sequence[Decision]: ...


class Side(msgspec.Struct, frozen=True, omit_defaults=True):
    """One side of a difference: what was decided (None: nothing)."""

    type: str
    node: str = ""
    seq: int = 0  # where the log holds it (live); 0: not in the log
    fields: list[str] = []  # the fields that differ from the other side's


class Difference(msgspec.Struct, frozen=True):
    aggregate: str
    seq: int  # the live decision's sequence, or (a what-if only one) its cause's
    cause: int  # the sequence of the event decided on (0: a tick)
    id: str
    live: Side | None
    whatif: Side | None


class Summary(msgspec.Struct, frozen=True):
    window: list[int]  # first and last sequence decided on
    change: str
    live_decisions: int  # recorded for the window's events and ticks
    reproduced: int  # decided alike by both
    ticks_left_out: int  # recorded for a tick, not decided by the sandbox
    placements: dict[str, dict[str, int]]  # "live" / "whatif" → node → VMIs placed
    first_divergence: dict[str, Any] | None


class Report(msgspec.Struct, frozen=True):
    events: int
    decisions: int
    differences: list[Difference]
    summary: Summary


def normal(ev: Event) -> Event:
    """The decision without when and why it was made (see the module doc)."""
    m = msgspec.structs.replace(
        ev.meta, occurred_at=0.0, correlation_id="", causation_id="", causation_seq=0
    )
    return msgspec.structs.replace(ev, meta=m)


def _flat(ev: Event) -> dict[str, Any]:
    """The event's fields, its metadata's as `meta.<field>`."""
    out: dict[str, Any] = msgspec.to_builtins(ev)
    out.update({f"meta.{k}": v for k, v in out.pop("meta").items()})
    return out


def side(ev: Event, seq: int = 0, other: Event | None = None) -> Side:
    fields: list[str] = []
    if other is not None and type(other) is type(ev):
        a, b = _flat(normal(ev)), _flat(normal(other))
        fields = sorted(k for k in a.keys() | b.keys() if a.get(k) != b.get(k))
    node = ev.node if isinstance(ev, PodScheduled) else ev.meta.node
    return Side(type=event_type(ev), node=node, seq=seq, fields=fields)


def scheduler_change(policy: str, weights: str) -> str:
    """How a report names a scheduler change ("none" for none), the CLI's and the api's alike."""
    if not policy and not weights:
        return "none"
    return f"scheduler policy {policy or scheduler.SPREAD}" + (
        f" weights {weights}" if weights else ""
    )


class WhatIf:
    """Feed it the log in stream order (`feed`, `skip`); `report` compares."""

    def __init__(
        self,
        decider: Decider,
        *,
        since: int = 1,
        until: int | None = None,
        change: str = "none",
        service: str = NAME,
        prelude: Callable[[Any, Stored], Sequence[Event]] | None = None,
    ) -> None:
        self.decider = decider
        self.prelude = prelude  # what the change adds to the cluster at the window's start
        self.state = decider.initial_state()
        self.since = since
        self.until = until
        self.change = change
        self.service = service  # whose events in the log are the live decisions
        self.events = 0
        self.first = 0
        self.last = 0
        self.before: set[str] = set()  # ids the log recorded before the window
        self.matched: set[str] = set()
        self.live: dict[str, tuple[int, int, Event]] = {}  # id → (seq, cause, event)
        self.whatif: dict[str, tuple[int, Event]] = {}  # id → (cause, event)
        self.differences: list[Difference] = []
        self.live_decisions = 0
        self.reproduced = 0
        self.decided: set[str] = set()
        self.placements: dict[str, Counter[str]] = {"live": Counter(), "whatif": Counter()}

    # --------------------------------------------------------------- the log
    def feed(self, stored: Stored) -> None:
        ev = stored.event
        meta = ev.meta
        if meta.actor.service == self.service and not stored.redelivery_of:
            self._recorded(stored)
        if self.until is not None and stored.seq > self.until:
            return  # past the window: only the live decisions of its causes are read
        if self.prelude is not None and stored.seq >= self.since:
            for ev in self.prelude(self.state, stored):
                m = ev.meta
                at = Stored(
                    stored.seq, event_subject(m.aggregate, event_type(ev), m.node), stored.time, ev
                )
                self.state = self.decider.evolve(self.state, at)
            self.prelude = None
        if not stored.redelivery_of:
            self.state = self.decider.evolve(self.state, stored)
        if stored.seq < self.since:
            return
        self.events += 1
        self.first = self.first or stored.seq
        self.last = stored.seq
        ctx = Context(self.service, "", stored.time, stored)
        for d in self.decider.react(self.state, stored, ctx):
            self._decided(stored.seq, d.event)

    def skip(self, seq: int, subject: str) -> None:
        """An undecodable event: no fold reads it, no decider is given it."""

    def _recorded(self, stored: Stored) -> None:
        ev = stored.event
        eid, cause = ev.meta.event_id, ev.meta.causation_seq
        if (cause and cause < self.since) or (not cause and stored.seq < self.since):
            # decided for an event before the window: not compared, also when the sandbox
            # reached it from an event of the window before it landed
            self.before.add(eid)
            self.whatif.pop(eid, None)
            return
        if self.until is not None and cause > self.until:
            return
        if self.until is not None and not cause and stored.seq > self.until:
            return
        self.live_decisions += 1
        if isinstance(ev, PodScheduled):
            self.placements["live"][ev.node] += 1
        if eid in self.whatif:
            _, wev = self.whatif.pop(eid)
            self._compare(eid, stored.seq, cause, ev, wev)
        elif eid not in self.matched:
            self.live[eid] = (stored.seq, cause, ev)

    def _decided(self, cause: int, ev: Event) -> None:
        eid = ev.meta.event_id
        if eid in self.decided or eid in self.before:
            return
        self.decided.add(eid)
        if isinstance(ev, PodScheduled):
            self.placements["whatif"][ev.node] += 1
        if eid in self.live:
            seq, lcause, lev = self.live.pop(eid)
            self._compare(eid, seq, lcause, lev, ev)
        else:
            self.whatif[eid] = (cause, ev)

    def _compare(self, eid: str, seq: int, cause: int, live: Event, whatif: Event) -> None:
        self.matched.add(eid)
        if normal(live) == normal(whatif):
            self.reproduced += 1
            return
        self.differences.append(
            Difference(
                aggregate=live.meta.aggregate.key,
                seq=seq,
                cause=cause,
                id=eid,
                live=side(live, seq, whatif),
                whatif=side(whatif, 0, live),
            )
        )

    # ------------------------------------------------------------ the report
    def report(self) -> Report:
        diffs = list(self.differences)
        ticks = 0
        for eid, (seq, cause, ev) in self.live.items():
            if not cause:
                ticks += 1
                continue
            diffs.append(Difference(ev.meta.aggregate.key, seq, cause, eid, side(ev, seq), None))
        for eid, (cause, ev) in self.whatif.items():
            diffs.append(Difference(ev.meta.aggregate.key, cause, cause, eid, None, side(ev)))
        diffs.sort(key=lambda d: (d.cause or d.seq, d.seq, d.id))
        first = None
        if diffs:
            d = diffs[0]
            first = {"cause": d.cause, "aggregate": d.aggregate, "id": d.id}
        placements = {k: dict(sorted(c.items())) for k, c in self.placements.items()}
        return Report(
            events=self.events,
            decisions=len(self.decided),
            differences=diffs,
            summary=Summary(
                window=[self.first, self.last],
                change=self.change,
                live_decisions=self.live_decisions,
                reproduced=self.reproduced,
                ticks_left_out=ticks,
                placements=placements,
                first_divergence=first,
            ),
        )
