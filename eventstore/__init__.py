"""The event log: its port (`port.py`) and the JetStream adapter behind it (`jetstream.py`):
append with optimistic concurrency and idempotency, load one aggregate, replay ranges,
durable consumers, dead letters."""

from eventstore.jetstream import JetStreamStore
from eventstore.port import Consumer, Delivery, EventLog
from eventstore.settings import StreamSettings

__all__ = ["Consumer", "Delivery", "EventLog", "JetStreamStore", "StreamSettings"]
