"""What travels between the event log and a pure core: the stored envelope around an event,
an append's outcome, a decision to append, and the context a decider is given.

Pure: no I/O and no clock. Time and ids reach a decider only through `Context`, which the
shell builds; the same cause always yields the same ids, so a repeated decision is a
duplicate append that JetStream drops."""

from __future__ import annotations

import uuid
from typing import NamedTuple

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


class Cause(NamedTuple):
    """What an output answers: the user request it belongs to (its correlation id), the
    event that caused it, and that event's stream sequence (0: not known)."""

    correlation_id: str
    event_id: str = ""
    seq: int = 0


def output_meta(
    service: str,
    node: str,
    aggregate: Aggregate,
    key: str,
    now: float,
    cause: Cause | None = None,
    route: str = "",
) -> Meta:
    """The metadata of a service's output: its id `<service>/<key>` (the same decision,
    the same id: a repeat is a duplicate), its actor, and its cause (none: the output
    starts a chain of its own, correlated by its own id). Every output's metadata is built
    here, by `Context.meta` or by a shell that decides on observations."""
    event_id = f"{service}/{key}"
    return Meta(
        event_id=event_id,
        aggregate=aggregate,
        occurred_at=now,
        correlation_id=cause.correlation_id if cause is not None else event_id,
        causation_id=cause.event_id if cause is not None else "",
        causation_seq=cause.seq if cause is not None else 0,
        actor=Actor(service=service, node=node),
        node=route,
    )


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
        if key is None:
            key = f"{self.cause.seq if self.cause else f'{self.now:.6f}'}/{self._n}"
        self._n += 1
        cause = None
        if self.cause is not None:
            cm = self.cause.event.meta
            cause = Cause(cm.correlation_id, cm.event_id, self.cause.seq)
        return output_meta(self.service, self.node, aggregate, key, self.now, cause, node)

    def uid(self, label: str) -> str:
        """A new object uid, deterministic for this cause (a replayed decision creates the
        same VMI uid, not a second VMI)."""
        basis = f"{self.service}/{self.cause.seq if self.cause else self.now}/{label}"
        return str(uuid.uuid5(_UID_NS, basis))
