"""Running virt-handler: the node's decider in the service shell, the launcher fleet as its
executor, and the heartbeat beside them.

Start: the fleet's zygote (in this thread: it dies with the thread that started it), a
heartbeat into the KV bucket `virt-heartbeats` (heartbeats are not events), then the
shell: catch-up fold of the node's events, the fleet re-attaches to the launchers a
previous incarnation left, the first decision over everything (NodeJoined with the
probed capacity, what changed while nobody watched), ready. From then on the shell decides
on the node's events, the fleet's observations and ticks, one at a time. SIGTERM and
SIGKILL leave the launchers running.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Coroutine
from pathlib import Path

import msgspec
import structlog
from prometheus_client import Gauge

from events.catalog import MigrationScheduled
from events.meta import Aggregate, Kind
from eventstore import heartbeats as heartbeat
from eventstore.connection import connect_service
from eventstore.jetstream import JetStreamStore
from eventstore.settings import StreamSettings
from eventstore.tasks import finish
from projections.evolve import evolve_migration
from projections.views import MigrationView
from services.handler.checkpoint import HandlerCodec
from services.handler.console_server import ConsoleServer
from services.handler.effects import Action, MigrationRead, ReadMigration
from services.handler.fence_clock import FenceClock
from services.handler.fleet import LauncherFleet, fence_node
from services.handler.host import capacity, labels, system_info
from services.handler.importer import run_import
from services.handler.imports import ImportDone, ImportProgress, RunImport
from services.handler.migration import MigrationState
from services.handler.node_info import LaunchSettings, NodeConfig
from services.handler.planner import service_name
from services.handler.reactor import HandlerReactor, HandlerState, Input
from services.handler.reclaim import DeleteDisk, DiskDeleted
from services.handler.state import NodeState
from services.handler.volume_copy import copy_volumes
from services.handler.volumes import CopyVolumes, VolumesCopyDone
from services.launcher.domain_xml import DomainType
from services.launcher.storage import claim_path
from services.runtime.checkpointing import Checkpointer
from services.runtime.inbox import Inbox
from services.runtime.metrics_access import MetricsAccess
from services.runtime.mtls import TlsFiles
from services.runtime.shell import ServiceShell, run_process

log = structlog.get_logger()

LAUNCHERS = Gauge("virtstream_handler_launchers", "Launchers this handler is attached to", ["node"])
HEARTBEAT_AGE = Gauge(
    "virtstream_handler_heartbeat_age_seconds",
    "Seconds since this handler's last successful heartbeat",
    ["node"],
)


class HandlerConfig(msgspec.Struct, kw_only=True):
    node: NodeConfig
    nats_url: str = "nats://127.0.0.1:4222"
    run_dir: str = "/tmp/virtstream"
    metrics_port: int | None = None
    metrics_access: MetricsAccess | None = None
    #: the console server's mutual TLS (qemu mode; None: plain, on loopback)
    console_tls: TlsFiles | None = None
    heartbeat_interval: float = 5.0
    #: no successful heartbeat for this long: stop every VM here and exit (0: never);
    #: strictly shorter than the controller's node timeout (services/runtime/timeouts.py)
    fence_timeout: float = 0.0
    tick_interval: float = 1.0
    settings: StreamSettings = msgspec.field(default_factory=StreamSettings.from_env)
    launch: LaunchSettings = LaunchSettings()


async def read_migration(
    store: JetStreamStore, agg: Aggregate
) -> tuple[MigrationView | None, MigrationScheduled | None]:
    """A migration aggregate, whole (None when gone or a newer one took the name)."""
    view: MigrationView | None = None
    scheduled: MigrationScheduled | None = None
    for s in await store.load(Aggregate(Kind.MIGRATION, agg.namespace, agg.name)):
        view = evolve_migration(view, s)
        if isinstance(s.event, MigrationScheduled):
            scheduled = s.event
    if view is not None and agg.uid and view.uid and view.uid != agg.uid:
        return None, None
    return view, scheduled


class HandlerEffects:
    """The handler's executor: the fleet, reads of migration aggregates, volume copies."""

    def __init__(
        self,
        fleet: LauncherFleet,
        store: JetStreamStore,
        inbox: Inbox[Input],
        records: Callable[[], NodeState],
    ) -> None:
        self.fleet = fleet
        self.store = store
        self.inbox = inbox
        self.records = records  # the caught-up state's: which VMI a launcher runs
        self._reads: set[asyncio.Task[None]] = set()

    async def open(self) -> None:
        await self.fleet.open({r.uid: key for key, r in self.records().items()})

    async def execute(self, action: Action) -> None:
        """The node's jobs beside the launchers, each in a task of its own (their outcomes
        come back to the inbox); the launchers' actions to the fleet."""
        match action:
            case CopyVolumes():
                self._spawn(self._copy(action))
            case RunImport():
                self._spawn(self._import(action))
            case ReadMigration():
                self._spawn(self._read(action))
            case DeleteDisk():
                self._spawn(self._delete_disk(action))
            case _:
                await self.fleet.execute(action)

    def _spawn(self, work: Coroutine[None, None, None]) -> None:
        task = asyncio.create_task(work)
        self._reads.add(task)
        task.add_done_callback(self._reads.discard)

    async def _copy(self, action: CopyVolumes) -> None:
        launch = self.fleet.launch
        error = await asyncio.to_thread(
            copy_volumes, action, launch.disk_dir, launch.hypervisor_uri
        )
        self.inbox.put(VolumesCopyDone(action.key, error))

    async def _import(self, action: RunImport) -> None:
        """A DataVolume's import in a thread; its progress comes back to the inbox from
        that thread through the loop."""
        loop = asyncio.get_running_loop()
        launch = self.fleet.launch

        def report(percent: float) -> None:
            loop.call_soon_threadsafe(self.inbox.put, ImportProgress(action.key, percent))

        error = await asyncio.to_thread(
            run_import, action, launch.disk_dir, launch.image_dir, report
        )
        self.inbox.put(ImportDone(action.key, error))

    async def _delete_disk(self, action: DeleteDisk) -> None:
        """A reclaimed volume's disk, deleted in a thread (a disk already gone is fine)."""
        path = claim_path(self.fleet.launch.disk_dir, action.namespace, action.claim)
        try:
            await asyncio.to_thread(path.unlink, missing_ok=True)
        except OSError as e:
            error = f"unable to delete {path}: {e.strerror or e}"
            log.warning("volume disk not deleted", volume=action.volume.name, error=error)
            self.inbox.put(DiskDeleted(action.volume, action.cause, error))
            return
        log.info("volume disk deleted", volume=action.volume.name, path=str(path))
        self.inbox.put(DiskDeleted(action.volume, action.cause))

    async def _read(self, action: ReadMigration) -> None:
        try:
            view, scheduled = await read_migration(self.store, action.migration)
        except Exception as e:  # NATS away: the job reads again a little later
            log.warning("cannot read the migration", migration=action.key, error=repr(e))
            self.inbox.put(MigrationRead(action.key, None, None, time.time(), error=repr(e)))
            return
        self.inbox.put(MigrationRead(action.key, view, scheduled, time.time()))

    def close(self) -> None:
        for task in list(self._reads):
            task.cancel()


class Fenced(RuntimeError):
    """The handler lost the bus past its fence timeout and stopped its node's VMs."""


class Handler:
    """One node's virt-handler (`store`: run on it; else connect to the config's NATS URL
    and close the connection at the end)."""

    def __init__(
        self,
        cfg: HandlerConfig,
        *,
        store: JetStreamStore | None = None,
        clock: FenceClock | None = None,
    ) -> None:
        self.cfg = cfg
        self.clock = clock or FenceClock(Path(cfg.run_dir) / cfg.node.name)
        self.node = cfg.node.name
        self.name = service_name(self.node)
        self.store = store
        self.shell: ServiceShell[HandlerState, Action, Input] | None = None
        self.fleet: LauncherFleet | None = None
        self.last_heartbeat = 0.0
        self.fenced = False
        self._stopped = False
        self.log = log.bind(service=self.name, node=self.node)

    @property
    def ready(self) -> bool:
        return self.shell is not None and self.shell.ready

    @property
    def state(self) -> HandlerState:
        assert self.shell is not None, "not running"
        return self.shell.state

    @property
    def records(self) -> NodeState:
        return self.state.records

    @property
    def migrations(self) -> MigrationState:
        return self.state.migrations

    def stop(self) -> None:
        self._stopped = True
        if self.shell is not None:
            self.shell.stop()

    async def run(self) -> None:
        """Run until stop()."""
        own = self.store is None
        if self.store is None:
            nc = await connect_service(self.cfg.nats_url, self.name)
            self.store = JetStreamStore(nc, self.cfg.settings)
        store = self.store
        cfg = self.cfg
        inbox: Inbox[Input] = Inbox()
        fleet = LauncherFleet(
            self.node,
            Path(cfg.run_dir),
            cfg.launch,
            inbox.put,
            reattach_interval=cfg.tick_interval,
        )
        self.fleet = fleet
        node = cfg.node
        consoles: ConsoleServer | None = None
        if cfg.node.hypervisor == "qemu":  # bound before NodeJoined, which carries its port
            consoles = ConsoleServer(
                cfg.launch.hypervisor_uri,
                "127.0.0.1",
                node.console_port,
                cfg.console_tls,
                pod_network_dir=cfg.launch.pod_network_dir if node.pod_cidr else None,
                launchers_dir=Path(cfg.run_dir) / cfg.node.name / "launchers",
            )
            node = msgspec.structs.replace(node, console_port=await consoles.start())
        decider = HandlerReactor(
            node,
            capacity=capacity(node),
            labels=labels(node),
            info=system_info(node),
            qemu=cfg.launch.domain_type is not DomainType.TEST,
            hypervisor_uri=cfg.launch.hypervisor_uri,
        )
        effects = HandlerEffects(fleet, store, inbox, lambda: self.records)
        shell: ServiceShell[HandlerState, Action, Input] = ServiceShell(
            decider,
            store,
            node=self.node,
            batch=64,
            tick_interval=cfg.tick_interval,
            observer=decider,
            executor=effects,
            inbox=inbox,
            checkpoints=Checkpointer(store, decider.name, HandlerCodec(), apart=True),
        )
        self.shell = shell
        heartbeats: asyncio.Task[None] | None = None
        fencing: asyncio.Task[None] | None = None
        try:  # the streams: ensured by the shell's run
            fleet.start()
            kv = await heartbeat.ensure_bucket(store.js, replicas=store.settings.replicas)
            self.last_heartbeat = time.time()
            await heartbeat.put(kv, self.node, self.last_heartbeat)
            self.clock.confirmed(self.last_heartbeat)
            LAUNCHERS.labels(self.node).set_function(lambda: fleet.connected)
            HEARTBEAT_AGE.labels(self.node).set_function(lambda: time.time() - self.last_heartbeat)
            heartbeats = asyncio.create_task(self._heartbeats(kv))
            if cfg.fence_timeout:
                fencing = asyncio.create_task(self._fence_watch(fleet))
                fencing.add_done_callback(lambda _: shell.stop())
                self.clock.watched = True  # (the watch before this one ends)
            if self._stopped:
                return
            await shell.run(
                started=lambda: self.log.info(
                    "handler started", vmis=len(shell.state.records), launchers=len(fleet.observed)
                )
            )
        finally:
            for task in (heartbeats, fencing):
                if task is not None:
                    task.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await task
            effects.close()
            if consoles is not None:
                await consoles.close()
            await fleet.close()
            if own:
                with contextlib.suppress(Exception):
                    await store.nc.drain()
        if self.fenced:
            raise Fenced(f"{self.node}: fenced after {self.cfg.fence_timeout}s off the bus")

    async def _fence_watch(self, fleet: LauncherFleet) -> None:
        """Self-fencing: once no heartbeat has succeeded for the fence timeout, the
        controller may soon declare this node unresponsive and start its VMs elsewhere;
        stop them here first, then end the handler (its next incarnation starts from the
        log, which by then says what became of them)."""
        while True:
            await asyncio.sleep(min(0.5, self.cfg.fence_timeout / 10))
            lost_for = time.time() - self.last_heartbeat
            if lost_for > self.cfg.fence_timeout:
                self.fenced = True
                n = await fleet.fence()
                self.log.error(
                    "fenced: no heartbeat reached the bus, stopped every VM of the node",
                    seconds=round(lost_for, 1),
                    launchers=n,
                )
                return

    async def _heartbeats(self, kv: heartbeat.KeyValue) -> None:
        while True:
            await asyncio.sleep(self.cfg.heartbeat_interval)
            now = time.time()
            if self.cfg.fence_timeout and now - self.last_heartbeat > self.cfg.fence_timeout:
                return  # too late (a process paused, a bus away): the fence acts, not a beat
            try:
                await heartbeat.put(kv, self.node, now)
                self.last_heartbeat = now
                self.clock.confirmed(now)
            except Exception as e:  # NATS reconnecting: the next beat tries again
                self.log.warning("heartbeat failed", error=repr(e))


async def serve(cfg: HandlerConfig) -> None:
    """Run one handler process until SIGTERM/SIGINT, with /metrics when configured. Until
    its handler runs (connected, a heartbeat confirmed), the node is fenced by the clock
    its earlier incarnations kept (`fence_clock.py`)."""
    clock = FenceClock(Path(cfg.run_dir) / cfg.node.name)
    clock.started(time.time())
    early = asyncio.create_task(_fence_until_running(cfg, clock)) if cfg.fence_timeout else None
    try:
        await run_process(
            service_name(cfg.node.name),
            cfg.nats_url,
            lambda store: Handler(cfg, store=store, clock=clock),
            metrics_port=cfg.metrics_port,
            settings=cfg.settings,
            metrics_access=cfg.metrics_access,
        )
    finally:
        if early is not None:
            await finish(early)


#: a starting handler's fence comes later than a running one's (x this), its first beat
#: being a connect and a bucket lookup away; still well before the node timeout (x 2)
STARTING_FENCE = 1.5


async def _fence_until_running(cfg: HandlerConfig, clock: FenceClock) -> None:
    """A handler starting while cut off from the bus (its connection failing, restarted
    again and again) stops its node's VMs when the last confirmed heartbeat is a fence
    timeout old, as a running one does."""
    launchers_dir = Path(cfg.run_dir) / cfg.node.name / "launchers"
    while not clock.watched:
        if time.time() > clock.due(cfg.fence_timeout * STARTING_FENCE):
            n = await fence_node(launchers_dir, cfg.launch)
            if n:
                log.error(
                    "fenced while starting: no heartbeat reached the bus, stopped every VM "
                    "of the node",
                    node=cfg.node.name,
                    launchers=n,
                )
            return
        await asyncio.sleep(min(0.5, cfg.fence_timeout / 10))
