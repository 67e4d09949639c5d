"""The event log: its port and errors (`port.py`), the JetStream adapter behind it
(`jetstream.py`) and the in-memory one (`memory.py`): append with optimistic concurrency
and idempotency, load one aggregate, replay ranges, durable consumers, dead letters.
Importing the package loads no adapter: a process that runs on memory loads no nats."""
