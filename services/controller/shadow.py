"""Shadow: a second version of the controller's decider on the live stream, each of its
decisions compared with the one the live controller recorded for the same cause (pure).

Fed the log in stream order (`feed`), it folds every event and, from `since` on, decides on
each as the live shell does (the cause, its server time as `now`), so its decisions get the
live one's ids (services/controller/emit.py derives them from the state answered). What it
decides is only held, never appended. A divergence is one of:
- `differs`: both decided the id, the events differ (when and through which cause aside,
  as in what-if: whatif.py);
- `live-only`: the live controller recorded a decision for a cause the shadow has decided
  on, and the shadow did not make it. Known as soon as the live decision is read: both read
  one stream in order, so the shadow has decided on the cause before the decision on it lands;
- `shadow-only`: the shadow decided an id the live controller has not recorded within
  `grace` seconds of its cause (`expire`: with each event's time, and the shell's clock
  while the log is quiet).
A live decision made on a tick (no cause) is not compared, only counted: the shadow does not
tick (when a tick ran is not in the log). Costs per event are the live controller's; the
ids remembered are those of the last `memory` seconds of the log, so memory does not grow
with the log's age."""

from __future__ import annotations

from typing import Any, Literal

import msgspec

from events.catalog import Event
from events.codec import event_type
from events.envelope import Context, Stored
from services.controller.reactor import NAME
from services.controller.whatif import Decider, Side, normal, side

Reason = Literal["differs", "live-only", "shadow-only"]
REASONS: tuple[Reason, ...] = ("differs", "live-only", "shadow-only")
GRACE = 5.0
MEMORY = 600.0


class Divergence(msgspec.Struct, frozen=True):
    reason: Reason
    aggregate: str
    cause: int  # the sequence of the event decided on
    at: float  # its time
    id: str
    live: Side | None
    shadow: Side | None
    live_event: dict[str, Any] | None = None  # the decisions themselves, for the log line
    shadow_event: dict[str, Any] | None = None


class Shadow:
    """`feed` the log from where `state` stands; decisions are compared from `since` on."""

    def __init__(
        self,
        decider: Decider,
        *,
        since: int,
        state: Any = None,
        service: str = NAME,
        grace: float = GRACE,
        memory: float = MEMORY,
    ) -> None:
        self.decider = decider
        self.state = decider.initial_state() if state is None else state
        self.since = since
        self.service = service  # whose events in the log are the live decisions
        self.grace = grace
        self.memory = memory
        self.pending: dict[str, tuple[int, float, Event]] = {}  # id → cause, its time, decision
        self.live_seen: dict[str, float] = {}  # id → when the live decision landed
        self.shadow_seen: dict[str, float] = {}  # id → its cause's time
        self.decided = 0
        self.reproduced = 0
        self.ticks = 0  # live decisions made on a tick: not compared

    def feed(self, stored: Stored) -> list[Divergence]:
        out = self.expire(stored.time)
        if stored.redelivery_of:
            return out  # a copy of a message folded where it first landed
        if stored.event.meta.actor.service == self.service:
            out += self._recorded(stored)
        self.state = self.decider.evolve(self.state, stored)
        if stored.seq < self.since:
            return out
        ctx = Context(self.service, "", stored.time, stored)
        for d in self.decider.react(self.state, stored, ctx):
            self._decided(stored, d.event)
        return out

    def expire(self, now: float) -> list[Divergence]:
        """Shadow decisions the live controller has not made within `grace` of their cause;
        forgets ids older than `memory`."""
        out = []
        for eid, (cause, at, ev) in _older(self.pending, now - self.grace, lambda v: v[1]):
            del self.pending[eid]
            out.append(_divergence("shadow-only", cause, at, eid, None, ev))
        for seen in (self.live_seen, self.shadow_seen):
            for eid, _ in _older(seen, now - self.memory, lambda t: t):
                del seen[eid]
        return out

    def _recorded(self, stored: Stored) -> list[Divergence]:
        ev = stored.event
        eid, cause = ev.meta.event_id, ev.meta.causation_seq
        if eid in self.live_seen:
            return []
        self.live_seen[eid] = stored.time
        if eid in self.pending:
            cause, at, shadow = self.pending.pop(eid)
            if normal(ev) == normal(shadow):
                self.reproduced += 1
                return []
            return [_divergence("differs", cause, at, eid, ev, shadow, stored.seq)]
        if not cause:
            self.ticks += 1
            return []
        if cause < self.since or eid in self.shadow_seen:
            return []  # decided before the shadow began, or compared already
        return [_divergence("live-only", cause, stored.time, eid, ev, None, stored.seq)]

    def _decided(self, cause: Stored, ev: Event) -> None:
        eid = ev.meta.event_id
        if eid in self.shadow_seen:
            return  # decided again: the log holds such a repeat once
        self.shadow_seen[eid] = cause.time
        self.decided += 1
        if eid not in self.live_seen:  # else made first by the live one (on a tick)
            self.pending[eid] = (cause.seq, cause.time, ev)


def _older(d: dict[str, Any], before: float, when: Any) -> list[tuple[str, Any]]:
    """The oldest entries of an insertion-ordered dict while older than `before` (a list:
    the caller deletes them)."""
    found = []
    for k, v in d.items():
        if when(v) >= before:
            break
        found.append((k, v))
    return found


def _divergence(
    reason: Reason,
    cause: int,
    at: float,
    eid: str,
    live: Event | None,
    shadow: Event | None,
    seq: int = 0,
) -> Divergence:
    some = live if live is not None else shadow
    assert some is not None
    return Divergence(
        reason=reason,
        aggregate=some.meta.aggregate.key,
        cause=cause,
        at=at,
        id=eid,
        live=side(live, seq, shadow) if live is not None else None,
        shadow=side(shadow, 0, live) if shadow is not None else None,
        live_event=_builtins(live) if live is not None else None,
        shadow_event=_builtins(shadow) if shadow is not None else None,
    )


def _builtins(ev: Event) -> dict[str, Any]:
    out: dict[str, Any] = {"type": event_type(ev)}
    out.update(msgspec.to_builtins(ev))
    return out
