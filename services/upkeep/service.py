"""The upkeep service: keeps the debugging index (`eventstore/index.py`), owns the archive
(`eventstore/archive.py`) and retires ended aggregates from the hot log (`retire.py`).

None of it answers a user, so none of it runs in the api, whose fold and watches a burst of
events must reach first. Several may run (one per host, as controllers do); only the holder
of the `virt-upkeep` lease works, the others wait for it (`eventstore/lease.py:
while_holding`). A holder that loses the lease stops at once and its process exits
(`LeaseLost`), to come back as a standby. A restart resumes where the work stood: the
index after its last entry, the retirement from the recorded floor and the pending work
recorded with it."""

from __future__ import annotations

import asyncio

from eventstore import archive
from eventstore.index import Indexer
from eventstore.jetstream import JetStreamStore
from eventstore.lease import Lease, while_holding
from eventstore.tasks import finish
from services.upkeep import metrics as m
from services.upkeep.retire import INTERVAL, STEP, WINDOW, LoadedViews, Retirer

NAME = "virt-upkeep"


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
            await self._run_active()
        else:
            await while_holding(self.lease, self._stopping, self._run_active, self.stop)

    async def _run_active(self) -> None:
        s = self.store.settings
        if s.archive:
            await archive.ensure(self.store.js, s.name, replicas=s.replicas, storage=s.storage)
        await self.indexer.start()
        retiring = s.archive and await self.retirer.start()
        self.active = True
        m.ACTIVE.set(1)
        reporting = asyncio.create_task(self._report(), name="upkeep-metrics")
        try:
            await self._stopping.wait()  # a stop, or the lease lost
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
