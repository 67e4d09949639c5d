"""Running virt-controller: the generic service shell plus the heartbeat watch, behind a
lease (active/standby).

Heartbeats are not events: a task beside the shell watches the KV bucket and puts each
heartbeat into the shell's inbox as an observation, which the shell folds before its next
decision, as it folds a handler's observations of its launchers.

Several controllers may run; only the holder of the `virt-controller` lease
(eventstore/lease.py) consumes and decides. The others wait for it; a holder that loses
it stops at once and its process exits (`LeaseLost`), to come back as a standby."""

from __future__ import annotations

import asyncio
from typing import Never

from eventstore import heartbeats
from eventstore.jetstream import JetStreamStore
from eventstore.lease import Lease, while_holding
from eventstore.settings import StreamSettings
from eventstore.tasks import finish
from services.controller.checkpoint import ControllerCodec
from services.controller.node_health import HeartbeatSeen, Observation, WatchStarted
from services.controller.reactor import ControllerReactor
from services.controller.state import ControllerState
from services.runtime import metrics as m
from services.runtime.checkpointing import Checkpointer
from services.runtime.inbox import Inbox
from services.runtime.metrics_access import MetricsAccess
from services.runtime.shell import ServiceShell, run_process

# deliveries whose appends may be in flight at once: the controller decides on every event
# of the cluster, and waiting for each fsync'd append in turn capped it near 40 VMs/s
WINDOW = 64


class ControllerService:
    def __init__(
        self,
        controller: ControllerReactor,
        store: JetStreamStore,
        *,
        bucket: str = heartbeats.BUCKET,
        tick_interval: float = 1.0,
        ack_wait: float = 10.0,
        window: int = WINDOW,
        identity: str = "",
        lease_ttl: float = 0.0,
    ) -> None:
        self.controller = controller
        self.store = store
        self.bucket = bucket
        # the timeout its node health applies, on /metrics from the start (a standby's too:
        # the dashboards and the unresponsive-node alert compare heartbeat ages with it)
        m.HEARTBEATS.timeout = controller.node_timeout
        self.heartbeats: Inbox[Observation] = Inbox()
        self.shell: ServiceShell[ControllerState, Never, Observation] = ServiceShell(
            controller,
            store,
            tick_interval=tick_interval,
            ack_wait=ack_wait,
            window=window,
            observer=controller,
            inbox=self.heartbeats,
            checkpoints=Checkpointer(store, controller.name, ControllerCodec()),
        )
        # no identity: the only controller, no lease (tests that run one in-process)
        self.lease = (
            Lease(
                store.js,
                controller.name,
                identity,
                ttl=lease_ttl or 5.0,
                replicas=store.settings.replicas,
            )
            if identity
            else None
        )
        self._stopping = asyncio.Event()

    @property
    def ready(self) -> bool:
        return self.shell.ready

    async def run(self) -> None:
        if self.lease is None:
            return await self._run_active()
        return await while_holding(self.lease, self._stopping, self._run_active, self.shell.stop)

    async def _run_active(self) -> None:
        if self._stopping.is_set():
            return
        ttl = max(heartbeats.DEFAULT_TTL, 5 * self.controller.node_timeout)
        kv = await heartbeats.ensure_bucket(
            self.store.js, self.bucket, ttl=ttl, replicas=self.store.settings.replicas
        )
        # until the watch has delivered the latest heartbeats, nobody may time out
        self.heartbeats.put(WatchStarted(self.shell.clock()))
        watching = asyncio.create_task(self._watch(kv))
        try:
            await self.shell.run()
        finally:
            await finish(watching)

    async def _watch(self, kv: heartbeats.KeyValue) -> None:
        while True:
            try:
                async for node, at in heartbeats.watch(kv):
                    self.heartbeats.put(HeartbeatSeen(node, at))
                    m.HEARTBEATS.record(node, at)
            except asyncio.CancelledError:
                raise
            except Exception as e:  # a broken watch (reconnect): start a new one
                self.shell.log.warning("heartbeat watch failed", error=repr(e))
                await asyncio.sleep(1.0)

    def stop(self) -> None:
        self._stopping.set()
        self.shell.stop()


async def serve(
    controller: ControllerReactor,
    nats_url: str,
    *,
    metrics_port: int | None = None,
    settings: StreamSettings | None = None,
    bucket: str = heartbeats.BUCKET,
    identity: str = "",
    lease_ttl: float = 5.0,
    metrics_access: MetricsAccess | None = None,
) -> None:
    """The controller's service process: the shell plus the heartbeat watch, active only
    while it holds the lease (with an identity)."""
    await run_process(
        controller.name,
        nats_url,
        lambda store: ControllerService(
            controller, store, bucket=bucket, identity=identity, lease_ttl=lease_ttl
        ),
        metrics_port=metrics_port,
        settings=settings,
        metrics_access=metrics_access,
    )
