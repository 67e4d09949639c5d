"""Taking the next message of an ordered push consumer without a task per message.

nats-py's `next_msg` makes a task, a uuid and an `asyncio.wait_for` for every message, even
when the message has been in the subscription's queue for a while: reading the log, that
was a third of the reader's CPU (profiled on a 100,000-event replay; the event loop ran five
times a message). Here a message already queued is taken at once, with the bookkeeping
`next_msg` would have done (the queue's accounting, the pending size, and the flow control
reply once the queue is empty, which is what bounds a reader slower than the server); only
an empty queue waits, through `next_msg`, which a closed connection or an unsubscribe
wakes. A subscription of another shape (nats-py's internals moved) always goes through
`next_msg`."""

from __future__ import annotations

from typing import Any

from nats.aio.msg import Msg
from nats.js.client import JetStreamContext


def _queued(sub: JetStreamContext.PushSubscription) -> tuple[Msg, Any] | None:
    """The message at the head of the queue and the subscription's JetStream state."""
    inner = getattr(sub, "_sub", None)
    queue = getattr(inner, "_pending_queue", None)
    jsi = getattr(inner, "_jsi", None)
    if queue is None or jsi is None or queue.empty() or not hasattr(jsi, "_fcr"):
        return None
    msg: Msg = queue.get_nowait()
    queue.task_done()
    inner._pending_size -= len(msg.data)  # type: ignore[union-attr]
    return msg, jsi


async def next_msg(sub: JetStreamContext.PushSubscription, timeout: float | None) -> Msg:
    """The subscription's next message: `sub.next_msg(timeout)`, cheaper when one waits."""
    queued = _queued(sub)
    if queued is None:
        return await sub.next_msg(timeout)
    msg, jsi = queued
    jsi._active = True
    if jsi.get_js_delivered() >= jsi._fciseq and jsi._fcr:
        # the queue is empty: the server may send more (as `next_msg` would answer)
        reply, jsi._fcr = jsi._fcr, None
        await sub._conn.publish(reply)
    return msg
