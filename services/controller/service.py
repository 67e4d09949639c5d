"""Running virt-controller: the generic service shell plus the heartbeat watch.

Heartbeats are not events, so the shell alone cannot feed them: a task beside it watches
the KV bucket and records each heartbeat into the reactor's state between reactions (one
event loop, so no locking)."""

from __future__ import annotations

import asyncio
import contextlib

from eventstore import heartbeats
from eventstore.jetstream import JetStreamStore
from eventstore.settings import StreamSettings
from services.controller.reactor import Controller
from services.controller.state import ControllerState
from services.runtime import metrics as m
from services.runtime.shell import ServiceShell, run_process


class ControllerService:
    def __init__(
        self,
        controller: Controller,
        store: JetStreamStore,
        *,
        bucket: str = heartbeats.BUCKET,
        tick_interval: float = 1.0,
        ack_wait: float = 10.0,
    ) -> None:
        self.controller = controller
        self.store = store
        self.bucket = bucket
        self.shell: ServiceShell[ControllerState] = ServiceShell(
            controller, store, tick_interval=tick_interval, ack_wait=ack_wait
        )

    @property
    def ready(self) -> bool:
        return self.shell.ready

    async def run(self) -> None:
        m.HEARTBEATS.timeout = self.controller.node_timeout
        ttl = max(heartbeats.DEFAULT_TTL, 5 * self.controller.node_timeout)
        kv = await heartbeats.ensure_bucket(
            self.store.js, self.bucket, ttl=ttl, replicas=self.store.settings.replicas
        )
        # until the watch has delivered the latest heartbeats, nobody may time out
        self.shell.state.heartbeats_since = self.shell.clock()
        watching = asyncio.create_task(self._watch(kv))
        try:
            await self.shell.run()
        finally:
            watching.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await watching

    async def _watch(self, kv: heartbeats.KeyValue) -> None:
        while True:
            try:
                async for node, at in heartbeats.watch(kv):
                    self.controller.record_heartbeat(self.shell.state, node, at)
                    m.HEARTBEATS.record(node, at)
            except asyncio.CancelledError:
                raise
            except Exception as e:  # a broken watch (reconnect): start a new one
                self.shell.log.warning("heartbeat watch failed", error=repr(e))
                await asyncio.sleep(1.0)

    def stop(self) -> None:
        self.shell.stop()


async def serve(
    controller: Controller,
    nats_url: str,
    *,
    metrics_port: int | None = None,
    settings: StreamSettings | None = None,
    bucket: str = heartbeats.BUCKET,
) -> None:
    """The controller's service process: the shell plus the heartbeat watch."""
    await run_process(
        controller.name,
        nats_url,
        lambda store: ControllerService(controller, store, bucket=bucket),
        metrics_port=metrics_port,
        settings=settings,
    )
