"""A shadow controller's process: another version of the controller's decider on the live
stream (services/controller/shadow.py), appending nothing.

It starts from the live controller's newest checkpoint when the decider folds the same
state (else from the log's first event), reads on to the log's end folding only, and
compares every decision from there on. Each divergence is counted
(`virtstream_shadow_divergence_total{service,reason}`), logged as one line with both
decisions, and kept among the latest few in a bucket (eventstore/shadows.py), where the api reads
them for the web console. Its NATS user reads the log and writes that bucket; it cannot
publish an event (ops/nats_auth.py: `shadow_user`)."""

from __future__ import annotations

import asyncio
import time
from collections import deque
from typing import Any

import msgspec
import structlog

from eventstore import follow, shadows
from eventstore.port import Bucket, EventLog
from eventstore.tasks import finish
from services.controller.checkpoint import ControllerCodec
from services.controller.reactor import NAME as CONTROLLER
from services.controller.shadow import GRACE, Divergence, Shadow
from services.controller.state import ControllerState
from services.controller.whatif import Decider
from services.runtime.checkpointing import Checkpointer
from services.shadow import metrics as m

LATEST = 50  # divergences kept for the web console
PUBLISH_EVERY = 1.0  # seconds between writes of the latest divergences (when changed)
log = structlog.get_logger("virtstream.shadow")


class Latest(msgspec.Struct, frozen=True):
    """What the bucket holds under the live service's name."""

    name: str  # the shadow's
    service: str  # the live one it shadows
    decider: str
    since: int  # the first sequence compared
    upto: int  # the last one read
    decided: int
    reproduced: int
    ticks: int
    divergences: list[Divergence]  # newest first


class ShadowService:
    def __init__(
        self,
        store: EventLog,
        decider: Decider,
        spec: str,
        *,
        name: str = "shadow",
        grace: float = GRACE,
    ) -> None:
        self.store = store
        self.name = name
        self.decider = decider
        self.spec = spec  # as given: controller=MODULE:FACTORY
        self.grace = grace
        self.service = CONTROLLER
        self.shadow: Shadow | None = None
        self.upto = 0
        self.latest: deque[Divergence] = deque(maxlen=LATEST)
        self.changed = False
        self.counted = 0  # reproduced decisions on the metric
        self._stopping = asyncio.Event()
        self.log = log.bind(shadow=name, service=self.service, decider=spec)

    @property
    def ready(self) -> bool:
        return self.shadow is not None and not self._stopping.is_set()

    async def run(self) -> None:
        state, self.upto = await self._start()
        since = await self.store.stream_last_seq() + 1
        self.shadow = Shadow(
            self.decider, since=since, state=state, service=self.service, grace=self.grace
        )
        m.start(self.service)
        self.log.info("shadow following", checkpoint=self.upto, since=since)
        bucket = await shadows.bucket(self.store)
        tasks = [
            asyncio.create_task(follow.resuming(self._read, "shadow follow", lambda: self.upto)),
            asyncio.create_task(self._expire_and_publish(bucket)),
        ]
        try:
            await self._stopping.wait()
        finally:
            for t in tasks:
                await finish(t)

    async def _start(self) -> tuple[Any, int]:
        """The live controller's newest checkpoint, when the decider folds its state."""
        if type(self.decider.initial_state()) is not ControllerState:
            return None, 0
        loaded = await Checkpointer(self.store, CONTROLLER, ControllerCodec()).load()
        return (loaded.state, loaded.upto) if loaded is not None else (None, 0)

    async def _read(self) -> None:
        assert self.shadow is not None
        async for stored in self.store.replay(
            None, start_seq=self.upto + 1, follow=True, raw=True, on_skip=self._skip
        ):
            for d in self.shadow.feed(stored):
                self._diverged(d)
            self.upto = stored.seq
            m.FOLLOWED.set(stored.seq)
            self._count_reproduced()

    def _skip(self, seq: int, _subject: str) -> None:
        self.upto = seq  # undecodable: no decider is given it, live or shadow

    def _count_reproduced(self) -> None:
        assert self.shadow is not None
        if new := self.shadow.reproduced - self.counted:
            m.REPRODUCED.labels(self.service).inc(new)
            self.counted += new
            self.changed = True

    async def _expire_and_publish(self, bucket: Bucket) -> None:
        assert self.shadow is not None
        while True:
            await asyncio.sleep(min(self.grace, PUBLISH_EVERY) / 2)
            for d in self.shadow.expire(time.time()):
                self._diverged(d)
            if self.changed:
                self.changed = False
                await self._publish(bucket)

    async def _publish(self, bucket: Bucket) -> None:
        assert self.shadow is not None
        s = self.shadow
        value = Latest(
            name=self.name,
            service=self.service,
            decider=self.spec,
            since=s.since,
            upto=self.upto,
            decided=s.decided,
            reproduced=s.reproduced,
            ticks=s.ticks,
            divergences=list(reversed(self.latest)),
        )
        try:
            await bucket.put(self.name, msgspec.json.encode(value))
        except Exception as e:  # the console's copy only: the metric and the log have it
            self.log.warning("shadow could not record its latest divergences", error=repr(e))
            self.changed = True

    def _diverged(self, d: Divergence) -> None:
        m.DIVERGENCE.labels(self.service, d.reason).inc()
        self.latest.append(d)
        self.changed = True
        some = d.live_event or d.shadow_event or {}
        meta = some.get("meta", {})
        self.log.warning(
            "shadow divergence",
            reason=d.reason,
            aggregate=d.aggregate,
            cause_seq=d.cause,
            event_id=d.id,
            correlation_id=meta.get("correlationId", ""),
            causation_id=meta.get("causationId", ""),
            live=d.live_event,
            shadow=d.shadow_event,
        )

    def stop(self) -> None:
        self._stopping.set()
