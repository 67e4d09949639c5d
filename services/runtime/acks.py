"""How a delivery ends, the same in both delivery loops of the shell: acked once its
decision's appends landed (with its metrics), or parked as a dead letter (then acked) when
it cannot be handled. A failure that is not the message's fault (`STOPS`: the event log or
a connection away, an `Unordered` fold) ends it neither way: the process stops and the
delivery comes again, after a reconnect or to the next incarnation."""

from __future__ import annotations

import time
import traceback
from typing import Any

from events.codec import event_type
from events.envelope import Stored
from eventstore.port import Delivery as Message
from eventstore.port import EventLog, Refused, Unavailable
from services.runtime import metrics as m
from services.runtime.folding import Unordered

# not the message's fault (the executor's connections included)
INFRASTRUCTURE = (TimeoutError, ConnectionError, Unavailable, Refused)
STOPS = (*INFRASTRUCTURE, Unordered)


class Acks:
    def __init__(self, name: str, store: EventLog, log: Any) -> None:
        self.name = name
        self.store = store
        self.log = log

    async def acked(self, msg: Message, stored: Stored, started: float) -> None:
        """Ack a handled delivery; `started` is when it was handed over (perf_counter)."""
        await msg.ack()
        etype = event_type(stored.event)
        m.EVENTS_HANDLED.labels(self.name, etype).inc()
        m.HANDLING_SECONDS.labels(self.name, etype).observe(time.perf_counter() - started)

    async def refused(self, msg: Message, stored: Stored, e: Exception) -> None:
        """The reaction to `stored` raised `e`: a dead letter with the traceback."""
        self.log.error("reaction failed", type=event_type(stored.event), error=repr(e))
        trace = "".join(traceback.format_exception(e))
        await self.dead_letter(msg, f"{type(e).__name__}: {e}\n{trace}")

    async def dead_letter(self, msg: Message | None, error: str) -> None:
        """Park `msg` with `error`, then ack it; None: a failure no delivery had (a tick's),
        parked as the error alone."""
        m.DEAD_LETTERS.labels(self.name).inc()
        subject = msg.subject if msg is not None else None
        self.log.warning("dead letter", subject=subject, error=error.splitlines()[0])
        await self.store.dead_letter(self.name, msg, error)
        if msg is not None:
            await msg.ack()
