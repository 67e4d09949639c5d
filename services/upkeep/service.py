"""The upkeep service: keeps the debugging index (`eventstore/index.py`), owns the archive
(`eventstore/archive.py`) and retires ended aggregates from the hot log (`retire.py`).

None of it answers a user, so none of it runs in the api, whose fold and watches a burst of
events must reach first. Several may run (one per host, as controllers do); only the holder
of the `virt-upkeep` lease (`eventstore/lease.py`) works, the others wait for it. A holder
that loses the lease stops at once and its process exits (`LeaseLost`), to come back as a
standby. A restart resumes where the work stood: the index after its last entry, the
retirement from the recorded floor and the pending work recorded with it."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import structlog

from eventstore import archive
from eventstore.index import Indexer
from eventstore.jetstream import JetStreamStore
from eventstore.lease import Lease
from eventstore.tasks import finish
from services.upkeep import metrics as m
from services.upkeep.retire import INTERVAL, STEP, WINDOW, LoadedViews, Retirer

NAME = "virt-upkeep"
log = structlog.get_logger()  # bound per use: binding at import would fix its config first


class LeaseLost(RuntimeError):
    """This upkeep process was active and no longer is: it stopped working."""


class UpkeepService:
    def __init__(
        self,
        store: JetStreamStore,
        *,
        identity: str = "",
        lease_ttl: float = 5.0,
        window: int = WINDOW,
        interval: float = INTERVAL,
        step: int = STEP,
    ) -> None:
        self.store = store
        self.indexer = Indexer(store)
        self.retirer = Retirer(
            store,
            LoadedViews(store, lambda: self.indexer.upto),
            window=window,
            interval=interval,
            step=step,
        )
        # no identity: the only one, no lease (tests that run one in-process)
        self.lease = (
            Lease(store.js, NAME, identity, ttl=lease_ttl, replicas=store.settings.replicas)
            if identity
            else None
        )
        self.active = False
        self._stopping = asyncio.Event()

    @property
    def ready(self) -> bool:
        """Healthy while connected, active or standing by."""
        return not self._stopping.is_set()

    async def run(self) -> None:
        await self.store.ensure()
        if self.lease is None:
            await self._run_active(None)
            return
        bound = log.bind(service=NAME, identity=self.lease.identity)
        bound.info("standby: waiting for the lease", holder=await self.lease.holder())
        if not await self.lease.acquire(self._stopping):
            return
        bound.info("active: holding the lease", ttl=self.lease.ttl)
        keeping = asyncio.create_task(self.lease.keep(), name="upkeep-lease")
        try:
            await self._run_active(keeping)
        finally:
            lost = keeping.done() and not keeping.cancelled()
            await finish(keeping)
            if not lost:
                await self.lease.release()
        if lost:
            raise LeaseLost(f"{self.lease.identity} lost the lease {self.lease.key}")

    async def _run_active(self, keeping: asyncio.Task[None] | None) -> None:
        s = self.store.settings
        if s.archive:
            await archive.ensure(self.store.js, s.name, replicas=s.replicas, storage=s.storage)
        await self.indexer.start()
        retiring = s.archive and await self.retirer.start()
        self.active = True
        m.ACTIVE.set(1)
        reporting = asyncio.create_task(self._report(), name="upkeep-metrics")
        try:
            stopping = asyncio.ensure_future(self._stopping.wait())
            waits: list[asyncio.Future[Any]] = [stopping]
            if keeping is not None:
                waits.append(keeping)  # done: the lease is lost
            await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
            stopping.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await stopping
        finally:
            self.active = False
            m.ACTIVE.set(0)
            await finish(reporting)
            await self.indexer.stop()
            if retiring:
                await self.retirer.stop()

    async def _report(self) -> None:
        """The gauges, from what the workers hold (no request of their own)."""
        retired = 0
        while True:
            m.INDEXED.set(self.indexer.upto)
            m.FLOOR.set(self.retirer.floor)
            m.PENDING.set(len(self.retirer.pending))
            m.RETIRED.inc(self.retirer.retired - retired)
            retired = self.retirer.retired
            await asyncio.sleep(5.0)

    def stop(self) -> None:
        self._stopping.set()
