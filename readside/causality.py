"""`virtstream why`: the causal chain behind an object's current state.

The anchor is the last event that visibly changed the rendered object (a VM's status
changes with its VMI's events, so that is usually a handler's or the controller's event).
From there causation ids lead back to the user's request. Finding a cause:

1. the events already read for the object (its aggregate and the related ones);
2. the cause's stream sequence the effect carries: its `causation_seq` (every effect
   written since the field exists: events/envelope.py `Context`, the handler's records),
   else the one an id names (`<service>/<cause seq>/<n>`, as `Context` writes ids); one
   direct message get, checked against the causation id;
3. for an event written before `causation_seq` existed: the id entries an index written
   by earlier code holds (`eventstore/index.py`: event id → sequence), then that get;
4. otherwise a scan of the stream backwards in widening time windows before the effect
   (a minute, an hour, everything), indexing every event id it passes.

A chain whose causes all sit in the object's related aggregates (the usual case) needs no
lookup at all: at 1,000,000 events (bench/bench_history.py) `why` of one VM took ~13 ms,
its aggregates read with two direct gets each (`eventstore/direct.py`); any other cause
written with its sequence is one get more. A full scan reads ~24k events/s
(bench/bench_replay.py), which is why 4. widens in steps.

Timer decisions have no causation (a node's silence is not an event). For those the chain
is linked by what the decision was about: a `VMIFailed(NodeUnresponsive)` to the latest
`NodeUnresponsive` of the node the VMI ran on, and a `NodeUnresponsive` to the node's last
heartbeat (its `last_heartbeat`), so "why is this VMI Failed" ends at "node-2 stopped
heartbeating at T"."""

from __future__ import annotations

import msgspec

from events import subjects
from events.catalog import NodeUnresponsive, VMIFailed
from events.envelope import Stored, seq_hint
from events.meta import CLUSTER_SCOPE, Aggregate, Kind
from eventstore.port import EventLog
from projections.cluster import Cluster
from projections.replay import (
    actor_of,
    replay_steps,
    summarize,
    view_key,
)
from readside.timetravel import read, related

MAX_HOPS = 200
SCAN_WINDOWS = (60.0, 3600.0, None)  # seconds before the effect; None = from the start


class Hop(msgspec.Struct, frozen=True):
    """One link of the chain, oldest first. `latency` = this hop's occurred_at - the previous
    hop's (None for the first). `seq` 0 marks a hop that is not an event (a heartbeat)."""

    seq: int
    at: float
    type: str
    actor: str
    aggregate: str
    detail: str
    link: str  # how it was found from the next hop: causation | inferred | heartbeat | anchor
    event_id: str = ""
    latency: float | None = None


class Chain(msgspec.Struct, frozen=True):
    target: str
    hops: list[Hop]
    complete: bool  # reached an event without a cause (the request, or a timer decision)
    correlation_id: str = ""
    missing: str = ""  # the causation id that could not be found

    @property
    def slowest(self) -> int | None:
        """Index of the hop with the largest latency."""
        best: int | None = None
        for i, h in enumerate(self.hops):
            if h.latency is not None and (
                best is None or h.latency > (self.hops[best].latency or 0)
            ):
                best = i
        return best

    @property
    def total(self) -> float:
        return self.hops[-1].at - self.hops[0].at if self.hops else 0.0


def _hop(s: Stored, link: str) -> Hop:
    line = summarize(s)
    return Hop(
        seq=s.seq,
        at=s.event.meta.occurred_at,
        type=line.type,
        actor=actor_of(s.event),
        aggregate=line.aggregate,
        detail=line.fields,
        link=link,
        event_id=s.event.meta.event_id,
    )


def with_latencies(hops: list[Hop]) -> list[Hop]:
    out: list[Hop] = []
    for i, h in enumerate(hops):
        lat = None if i == 0 else max(0.0, h.at - hops[i - 1].at)
        out.append(msgspec.structs.replace(h, latency=lat))
    return out


def cause_seqs(effect: Stored) -> list[int]:
    """Where the effect says its cause is stored, best first: its `causation_seq`, then the
    sequence its id names. Only sequences before the effect's own."""
    meta = effect.event.meta
    said = [meta.causation_seq, seq_hint(meta.event_id) or 0]
    return [seq for seq in said if 0 < seq < effect.seq]


class EventIndex:
    """Events by id, filled from what was read and from lookups in the stream."""

    def __init__(self, store: EventLog, events: list[Stored]) -> None:
        self.store = store
        self.by_id: dict[str, Stored] = {s.event.meta.event_id: s for s in events}
        self.scanned_from: float | None = None  # earliest time a scan covered

    async def find(self, event_id: str, effect: Stored) -> Stored | None:
        if event_id in self.by_id:
            return self.by_id[event_id]
        for seq in dict.fromkeys(cause_seqs(effect)):
            s = await self._get(seq)
            if s is not None and s.event.meta.event_id == event_id:
                self.by_id[event_id] = s
                return s
        indexed = await self._indexed(event_id)
        if indexed is not None:
            return indexed
        for window in SCAN_WINDOWS:
            start = None if window is None else effect.time - window
            if self.scanned_from is not None and start is not None and start >= self.scanned_from:
                continue
            await self._scan(start, effect.seq)
            if event_id in self.by_id:
                return self.by_id[event_id]
            if start is None:
                break
        return None

    async def _indexed(self, event_id: str) -> Stored | None:
        """The id entries an older index holds (`eventstore/index.py`): one get for the
        sequence, one for the event."""
        index = self.store.index()
        if index is None:
            return None
        seq = await index.seq_of(event_id)
        s = await self._get(seq) if seq else None
        if s is not None and s.event.meta.event_id == event_id:
            self.by_id[event_id] = s
            return s
        return None

    async def _get(self, seq: int) -> Stored | None:
        return await self.store.get(seq)

    async def _scan(self, start_time: float | None, until_seq: int) -> None:
        start = None if start_time is None else max(start_time, 0.0)
        async for s in self.store.replay(start_time=start, until_seq=until_seq, raw=True):
            self.by_id.setdefault(s.event.meta.event_id, s)
        self.scanned_from = 0.0 if start_time is None else start_time


def anchor_of(events: list[Stored], agg: Aggregate) -> Stored | None:
    """The last event that visibly changed the object, else its last own event."""
    last_change: Stored | None = None
    last_own: Stored | None = None
    for step in replay_steps(events, agg):
        if step.changes:
            last_change = step.stored
        if step.own:
            last_own = step.stored
    return last_change or last_own


async def _node_unresponsive(
    store: EventLog, events: list[Stored], failed: Stored
) -> Stored | None:
    """The NodeUnresponsive behind a VMIFailed(NodeUnresponsive) that names no cause: the
    latest one, up to the failure, of the node the VMI was on."""
    cluster = Cluster()
    for s in events:
        if s.seq >= failed.seq:
            break
        cluster.apply(s)
    agg = failed.event.meta.aggregate
    vmi = cluster.vmis.get(view_key(agg))
    if vmi is None or not vmi.node:
        return None
    node_events = await store.load(
        Aggregate(kind=Kind.NODE, namespace=CLUSTER_SCOPE, name=vmi.node)
    )
    found = None
    for s in node_events:
        if s.seq < failed.seq and isinstance(s.event, NodeUnresponsive):
            found = s
    return found


def _heartbeat(s: Stored) -> Hop | None:
    ev = s.event
    if not isinstance(ev, NodeUnresponsive) or ev.last_heartbeat <= 0:
        return None
    node = ev.meta.aggregate.name
    return Hop(
        seq=0,
        at=ev.last_heartbeat,
        type="Heartbeat",
        actor=f"handler@{node}",
        aggregate=f"node/{node}",
        detail=f"last heartbeat of {node}; silent since",
        link="heartbeat",
    )


async def why(store: EventLog, agg: Aggregate, *, anchor_seq: int | None = None) -> Chain:
    """The chain behind `agg`'s state (or behind the event at `anchor_seq`)."""
    if agg.kind == Kind.NODE:
        events = await read(store, [subjects.aggregate_filter(Kind.NODE, CLUSTER_SCOPE, agg.name)])
    else:
        events = await related(store, agg)
    target = agg.key
    if anchor_seq is not None:
        anchor = next((s for s in events if s.seq == anchor_seq), None)
        index = EventIndex(store, events)
        if anchor is None:
            anchor = await index._get(anchor_seq)
    else:
        anchor = anchor_of(events, agg)
        index = EventIndex(store, events)
    if anchor is None:
        return Chain(target=target, hops=[], complete=False)
    chain: list[Hop] = [_hop(anchor, "anchor")]
    seen = {anchor.event.meta.event_id}
    cur = anchor
    complete = False
    missing = ""
    while len(chain) < MAX_HOPS:
        meta = cur.event.meta
        cause: Stored | None = None
        link = "causation"
        if meta.causation_id:
            cause = await index.find(meta.causation_id, cur)
            if cause is None:
                missing = meta.causation_id
                break
        elif isinstance(cur.event, VMIFailed) and cur.event.reason == "NodeUnresponsive":
            cause = await _node_unresponsive(store, events, cur)
            link = "inferred"
        if cause is None:
            hb = _heartbeat(cur)
            if hb is not None:
                chain.append(hb)
            complete = True
            break
        if cause.event.meta.event_id in seen:  # a cycle would be a bug upstream; stop
            break
        seen.add(cause.event.meta.event_id)
        chain.append(_hop(cause, link))
        cur = cause
    hops = with_latencies(list(reversed(chain)))
    return Chain(
        target=target,
        hops=hops,
        complete=complete,
        correlation_id=anchor.event.meta.correlation_id,
        missing=missing,
    )


def explain(chain: Chain) -> str:
    """A one-line reading of the chain's root and end, for the top of the output."""
    if not chain.hops:
        return f"{chain.target}: no events"
    first, last = chain.hops[0], chain.hops[-1]
    head = f"{chain.target}: {last.type}"
    if last.detail:
        head += f" ({last.detail})"
    return f"{head} ← … ← {first.type} by {first.actor}, {chain.total:.3f}s end to end"
