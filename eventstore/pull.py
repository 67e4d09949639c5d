"""Pulling from a durable consumer with a standing request, not one request per message.

nats-py's `fetch` sends a pull request for every call, and a caught-up service fetched one
message at a time (a larger batch stalls on an idle consumer: the request left behind by a
fetch that timed out takes the next message, and the following fetch waits for a batch
that comes only at its expiry). So each event a service was delivered cost a request, a
delivery and an ack: a third of the controller's and the handlers' messages to nats-server
were pull requests.

Here, as nats.go's `Consume` does, the consumer keeps requests standing at the server for
up to `batch` messages, each expiring after `EXPIRES`, and asks again once less than half
of that is left (an expiry the server tells leaves none at rest: one request and one
status per `EXPIRES`); a fetch returns whatever the subscription holds as soon as one
message is there. The server's status messages keep the account: a request that ends (408
on expiry, 409 on a leadership change or a deleted consumer) says how many of its messages
it will no longer send (`Nats-Pending-Messages`; without it, every request is taken as
gone, and asked again after `GAP`). A reconnect, or an expiry with no word from
the server, drops every request too, so the worst a lost status costs is one `EXPIRES`."""

from __future__ import annotations

import contextlib
import time

import msgspec
import nats
from nats.aio.msg import Msg
from nats.js.client import JetStreamContext
from nats.js.errors import APIError

from eventstore.reply import position

EXPIRES = 5.0  # a request's life at the server: a consumer at rest asks this often
GRACE = 1.0  # past the last expiry with no status from the server: its requests are gone
GAP = 0.1  # a request refused at once (409, no count) is asked again this much later
_GONE = ("404", "408", "409")  # a request ended (what nats-py's fetch takes as a timeout)
_HEARTBEAT = "100"
_STATUS = "Status"
_LEFT = "Nats-Pending-Messages"


class Puller:
    def __init__(self, psub: JetStreamContext.PullSubscription, batch: int) -> None:
        self.psub = psub
        self.batch = max(1, batch)
        self.pending = 0  # the consumer's backlog as of the last message fetched
        self.credit = 0  # messages the standing requests may still deliver
        self.ends = 0.0  # when the last request expires at the server (monotonic)
        self.reconnects = -1  # the connection's reconnect count when it was asked
        self.refused = -GAP  # when a request was last ended without a count (monotonic)
        self.failed: APIError | None = None  # an error status, raised after what came before

    async def fetch(self, timeout: float) -> list[Msg]:
        """The messages there are, at least one; raises TimeoutError (nats' or asyncio's)
        when none came within `timeout`."""
        deadline = time.monotonic() + timeout
        while True:
            if self.failed is not None:
                failed, self.failed = self.failed, None
                raise failed
            await self._ask()
            msgs = self._take([])
            if msgs:
                return self._fetched(msgs)
            if self.failed is not None:
                continue
            now = time.monotonic()
            if now >= deadline:
                self.pending = 0
                raise TimeoutError
            wake = self.ends + GRACE if self.credit else self.refused + GAP
            wait = min(deadline, wake) - now
            try:
                msg = await self.psub._sub.next_msg(timeout=max(wait, 0.001))
            except (TimeoutError, nats.errors.TimeoutError):
                continue
            if self._data(msg):
                return self._fetched(self._take([msg]))
            # a status: accounted for, or an error raised at the top

    async def _ask(self) -> None:
        """Keep about `batch` messages asked for, and a request standing."""
        nc = self.psub._nc
        now = time.monotonic()
        if nc.stats["reconnects"] != self.reconnects or now > self.ends + GRACE:
            self.credit = 0  # the server forgot them (or we lost its word that it did)
            self.reconnects = nc.stats["reconnects"]
        if self.credit > self.batch // 2:
            return
        if not self.credit and now < self.refused + GAP:
            return  # refused a moment ago: not a loop of requests
        n = self.batch - self.credit
        request = {"batch": n, "expires": int(EXPIRES * 1e9)}
        await nc.publish(self.psub._nms, msgspec.json.encode(request), self.psub._deliver)
        self.credit += n
        self.ends = now + EXPIRES

    def _take(self, msgs: list[Msg]) -> list[Msg]:
        """`msgs` and the data messages queued behind them, up to a batch, at once."""
        sub = self.psub._sub
        queue = sub._pending_queue
        while len(msgs) < self.batch and not queue.empty() and self.failed is None:
            msg = queue.get_nowait()
            queue.task_done()
            sub._pending_size -= len(msg.data)
            if self._data(msg):
                msgs.append(msg)
        return msgs

    def _data(self, msg: Msg) -> bool:
        """Whether it is a message of the stream; a status is accounted for (an error
        the server answered a request with is kept, to be raised as nats-py's fetch raises
        it once the messages that came before it are handed over)."""
        status = msg.headers.get(_STATUS) if msg.headers else None
        if status is None:
            self.credit = max(self.credit - 1, 0)
            return True
        if status == _HEARTBEAT:
            return False
        if status not in _GONE:
            self.failed = APIError.from_msg(msg)
            self.credit, self.refused = 0, time.monotonic()
            return False
        left = msg.headers.get(_LEFT) if msg.headers else None
        if left and left.isdigit():
            self.credit = max(self.credit - int(left), 0)
        else:
            self.credit, self.refused = 0, time.monotonic()
        return False

    def _fetched(self, msgs: list[Msg]) -> list[Msg]:
        self.pending = 0
        with contextlib.suppress(Exception):  # a message without JetStream metadata
            self.pending = position(msgs[-1]).pending
        return msgs
