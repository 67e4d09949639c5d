"""What travels between the event log and a pure core: the stored envelope around an event,
an append's outcome, a decision to append, and the context a decider is given.

Pure: no I/O and no clock. Time and ids reach a decider only through `Context`, which the
shell builds; the same cause always yields the same ids, so a repeated decision is a
duplicate append that JetStream drops."""

from __future__ import annotations

import uuid

import msgspec

from events.catalog import Event
from events.meta import Actor, Aggregate, Meta

_UID_NS = uuid.UUID("6a1f1c3e-6d2b-4c56-9d0e-7a7e2b9e8f10")


class Stored(msgspec.Struct, frozen=True):
    """An event as stored: its stream sequence, subject and server timestamp.

    `redelivery_of` > 0 marks a dead letter re-appended by `virtstream dead-letters --retry`:
    the original (at that sequence) was folded already, so folds only advance the
    aggregate's version past the copy and services react to it again."""

    seq: int
    subject: str
    time: float
    event: Event
    redelivery_of: int = 0


class Appended(msgspec.Struct, frozen=True):
    seq: int
    duplicate: bool = False


class Decision(msgspec.Struct, frozen=True):
    """An event to append. `occ`: append only if the aggregate is still at the version
    this service last saw (the decision was made on that state). `expected`: the version
    to expect instead, when the decider read the aggregate beyond the service's filters."""

    event: Event
    occ: bool = True
    expected: int | None = None


def seq_hint(event_id: str) -> int | None:
    """The cause's stream sequence in an effect's id (`<service>/<seq>/<n>`, as `Context`
    writes it when no key names the decision), if any."""
    parts = event_id.rsplit("/", 2)
    if len(parts) == 3 and parts[1].isdigit() and parts[2].isdigit() and int(parts[1]) > 0:
        return int(parts[1])
    return None


class Context:
    """Per-reaction context. Event ids derive from the cause (its stream sequence, the
    service, the output index), so a redelivered cause yields the same ids and JetStream
    drops the duplicate appends."""

    def __init__(self, service: str, node: str, now: float, cause: Stored | None) -> None:
        self.service = service
        self.node = node
        self.now = now
        self.cause = cause
        self._n = 0

    def meta(self, aggregate: Aggregate, *, node: str = "", key: str | None = None) -> Meta:
        """Metadata for the next output. `key` names a cause that is not an event (timers):
        the same key gives the same id."""
        if key is not None:
            event_id = f"{self.service}/{key}"
        elif self.cause is not None:
            event_id = f"{self.service}/{self.cause.seq}/{self._n}"
        else:
            event_id = f"{self.service}/{self.now:.6f}/{self._n}"
        self._n += 1
        cm = self.cause.event.meta if self.cause else None
        return Meta(
            event_id=event_id,
            aggregate=aggregate,
            occurred_at=self.now,
            correlation_id=cm.correlation_id if cm else event_id,
            causation_id=cm.event_id if cm else "",
            causation_seq=self.cause.seq if self.cause else 0,
            actor=Actor(service=self.service, node=self.node),
            node=node,
        )

    def uid(self, label: str) -> str:
        """A new object uid, deterministic for this cause (a replayed decision creates the
        same VMI uid, not a second VMI)."""
        basis = f"{self.service}/{self.cause.seq if self.cause else self.now}/{label}"
        return str(uuid.uuid5(_UID_NS, basis))
