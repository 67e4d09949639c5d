"""The api's effectful shell around the pure intents: decide on the projection, append
with optimistic concurrency, wait until the projection has folded the append
(read-your-writes), retry once on a conflict."""

from __future__ import annotations

import secrets
import string
import time
from collections.abc import Callable

from events.codec import event_type
from events.envelope import ConcurrencyConflict
from eventstore.port import EventLog
from kinds.registry import REGISTRY, Registry
from projections.cluster import Cluster
from readside.runner import ProjectionRunner
from services.api.errors import internal, stale, timeout
from services.api.ids import new_id
from services.api.intents import Outcome, RequestContext
from services.api.metrics import APPENDS, CONFLICTS

ALNUM = string.ascii_lowercase + string.digits
WAIT_SECONDS = 10.0


def random_suffix(n: int = 5) -> str:
    return "".join(secrets.choice(ALNUM) for _ in range(n))


def request_context(correlation_id: str) -> RequestContext:
    return RequestContext(
        now=time.time(),
        correlation_id=correlation_id,
        new_id=new_id,
        suffix=random_suffix,
    )


class ApiService:
    """Holds the store (None on a read replica) and the projection it answers from."""

    def __init__(
        self, runner: ProjectionRunner, store: EventLog | None, kinds: Registry = REGISTRY
    ) -> None:
        self.runner = runner
        self.store = store
        self.kinds = kinds

    @property
    def cluster(self) -> Cluster:
        return self.runner.cluster

    async def execute(
        self, decide: Callable[[Cluster, RequestContext], Outcome], correlation_id: str
    ) -> Outcome:
        """Decide and append. On a conflict: wait for the projection to fold the winner,
        decide again once (the preconditions may now answer with a better message), and
        answer 409 if the second append conflicts too."""
        assert self.store is not None
        for attempt in range(2):
            outcome = decide(self.cluster, request_context(correlation_id))
            try:
                last = await self._append(outcome)
            except ConcurrencyConflict as exc:
                CONFLICTS.inc()
                if attempt:
                    res = self.kinds.of(outcome.kind).resource
                    raise stale(res, outcome.key.rsplit("/", 1)[-1]) from None
                actual = exc.actual if exc.actual > 0 else await self.store.stream_last_seq()
                await self.runner.wait_for(actual, WAIT_SECONDS)
                continue
            if last and not await self.runner.wait_for(last, WAIT_SECONDS):
                raise timeout("the event was appended but the projection has not caught up yet")
            return outcome
        raise internal("unreachable")

    async def _append(self, outcome: Outcome) -> int:
        assert self.store is not None
        last = 0
        for append in outcome.appends:
            ack = await self.store.append(append.event, expected=append.expected)
            APPENDS.labels(event_type(append.event)).inc()
            last = max(last, ack.seq)
        return last
