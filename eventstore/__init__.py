"""The JetStream event store: append with optimistic concurrency and idempotency, load one
aggregate, replay ranges, dead letters."""

from eventstore.settings import StreamSettings
from eventstore.store import Appended, ConcurrencyConflict, EventStore, Stored

__all__ = ["Appended", "ConcurrencyConflict", "EventStore", "Stored", "StreamSettings"]
