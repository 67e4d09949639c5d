"""A service's fold and its bookkeeping: the state, the last sequence folded per aggregate
(what an optimistic append expects; a redelivered or caught-up event is not folded
twice), the service's own appends folded before the stream delivered them, and the
appends without a concurrency check still on their way back.

A state that covers the stream up to a sequence (with each aggregate's version) can be
handed in with `start_from`; a catch-up then folds from the next sequence. A reactor whose
state also holds observations (the handler's launchers) can keep `log_only` beside it: the
same events folded into a state no observation touches (what its checkpoints save)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Generic, TypeVar

import structlog

from events import subjects
from events.envelope import Stored
from services.runtime.loop import Restart

S = TypeVar("S")


class Unordered(Restart):
    """The stream holds an event this service never folded before one of its own appends
    that it folded at once. A replicated stream can accept an optimistic append past an
    event that is still being replicated (its expected-last-subject-sequence check runs on
    the leader before replication, per exact subject), so two services' concurrent appends
    to one aggregate can both land. The state misses that event for good; the process
    stops, and its restart folds the stream in order."""


class Ahead:
    """Our own appends to one aggregate folded before the stream delivered them, and the
    last sequence of that aggregate the stream had delivered when the first was folded."""

    __slots__ = ("floor", "seqs")

    def __init__(self, floor: int) -> None:
        self.floor = floor
        self.seqs: set[int] = set()


class Folding(Generic[S]):
    def __init__(
        self, evolve: Callable[[S, Stored], S], state: S, log: structlog.typing.FilteringBoundLogger
    ) -> None:
        self.evolve = evolve
        self.state = state
        self.log = log
        self.versions: dict[str, int] = {}  # aggregate key → last folded sequence
        # every event up to this sequence is folded: an aggregate whose version was
        # forgotten (`forget`) is never folded twice below it
        self.covered = 0
        self.ahead: dict[str, Ahead] = {}  # aggregate key → own appends not yet delivered
        self.last_folded = 0
        # event ids appended without a concurrency check that the consumer has not
        # delivered back yet: deciding again before they are folded repeats them, and a
        # repeat is dropped here instead of at the server
        self.unconfirmed: set[str] = set()
        self.log_only: S | None = None

    def start_from(
        self,
        state: S,
        last_seq: int,
        versions: Mapping[str, int],
        log_only: S | None = None,
        *,
        covered: int = 0,
    ) -> None:
        """Begin from a state that covers the stream up to `last_seq`, with the last
        sequence of each aggregate it folded (a checkpoint: every event up to `covered`
        is in it, and the versions of the aggregates it forgot are not); a catch-up goes
        on from `last_seq + 1`."""
        assert self.last_folded == 0 and not self.ahead, "a state is handed in before folding"
        self.state = state
        self.last_folded = last_seq
        self.versions = dict(versions)
        self.covered = covered
        if log_only is not None:
            self.log_only = log_only

    def fold(self, stored: Stored, *, own: bool = False) -> bool:
        """Fold one event: from the stream (a delivery, a catch-up) or, `own`, our own
        optimistic append as it was acknowledged. False when it was folded already."""
        key = subjects.aggregate_key(stored.subject)
        if self.unconfirmed:
            self.unconfirmed.discard(stored.event.meta.event_id)
        if own:
            if key not in self.ahead:  # all earlier own appends are back: the stream's version
                self.ahead[key] = Ahead(self.versions.get(key, self.covered))
            self.ahead[key].seqs.add(stored.seq)
        else:
            self._in_order(key, stored)
        version = self.versions.get(key, 0)
        if stored.seq <= max(version, self.covered):
            # folded already; an aggregate whose version was forgotten learns it again (a
            # conflict's catch-up reads its events: the next append expects the last)
            if stored.seq > version:
                self.versions[key] = stored.seq
            return False
        if stored.redelivery_of:
            # a retried dead letter: its original was folded; only the version moves
            # (the copy is the aggregate's last event now: OCC appends expect it)
            self.versions[key] = stored.seq
            self.last_folded = max(self.last_folded, stored.seq)
            return False
        self.state = self.evolve(self.state, stored)
        if self.log_only is not None:
            self.log_only = self.evolve(self.log_only, stored)
        self.versions[key] = stored.seq
        self.last_folded = max(self.last_folded, stored.seq)
        return True

    def _in_order(self, key: str, stored: Stored) -> None:
        """An event from the stream must not lie between what we had folded of its
        aggregate and one of our own appends folded since: that event was never folded."""
        ahead = self.ahead.get(key)
        if ahead is None:
            return
        last = max(ahead.seqs)
        if ahead.floor < stored.seq < last and stored.seq not in ahead.seqs:
            self.log.error(
                "an event landed before our own append unseen: stopping to fold again",
                subject=stored.subject,
                seq=stored.seq,
                own=sorted(ahead.seqs),
            )
            raise Unordered(f"{stored.subject} at {stored.seq} lies before our own {last}")
        ahead.floor = max(ahead.floor, stored.seq)
        ahead.seqs = {s for s in ahead.seqs if s > stored.seq}
        if not ahead.seqs:
            del self.ahead[key]

    def forget(self, upto: int, holds: Callable[[str], bool]) -> None:
        """Every event up to `upto` is folded: the versions of aggregates the state no
        longer holds (ended) and that ended by then are forgotten, so the bookkeeping
        grows with what exists, not with every aggregate the log ever named."""
        assert not self.ahead, "only a fold in stream order covers a sequence"
        self.covered = max(self.covered, upto)
        self.versions = {k: v for k, v in self.versions.items() if v > upto or holds(k)}

    def skip(self, seq: int, subject: str) -> None:
        """An event no fold can read: every fold skips it the same way, moving its
        aggregate's version past it, so OCC appends expect the aggregate's real last
        sequence and the aggregate stays operable."""
        key = subjects.aggregate_key(subject)
        self.versions[key] = max(self.versions.get(key, 0), seq)
        self.last_folded = max(self.last_folded, seq)

    def version_of(self, subject: str) -> int:
        return self.versions.get(subjects.aggregate_key(subject), 0)
