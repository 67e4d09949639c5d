"""virt-handler's shell: node registration, heartbeats, its node's events, its launchers.

fold → plan → act → append → ack. The state comes from the node's own events (durable
consumer `virt-handler-<node>` filtered server-side to `virt.vmi.*.*.*.<node>` and
`virt.migration.*.*.*.<node>`), the observations from the launchers' sockets; `planner.plan`
turns the two into actions. Launcher reports and a 1 s tick trigger planning too, so a
status change is relayed as soon as it arrives and a lost trigger is caught up on the next
tick.

A restart rebuilds the state from the stream, lists the launcher sockets in the run dir
and re-attaches (Hello + current status); planning then reports whatever changed while
nobody watched. Launchers run in their own sessions (forked by the zygote, setsid), so
neither SIGTERM nor SIGKILL of the handler touches them.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import time
from pathlib import Path

import msgspec
import nats
import structlog
from nats.aio.client import Client as NATS
from nats.aio.msg import Msg
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy
from nats.js.errors import NotFoundError
from nats.js.kv import KeyValue
from prometheus_client import Gauge

from events import subjects
from events.catalog import DomainStopped, Event, StopReason
from events.codec import event_type
from events.envelope import Stored, Undecodable
from events.meta import Kind
from eventstore import heartbeats as heartbeat
from eventstore.jetstream import JetStreamStore, JsDelivery, _stored
from eventstore.pull import Puller
from eventstore.settings import StreamSettings
from services.handler.migration import MigrationDriver
from services.handler.node_info import (
    LaunchSettings,
    NodeConfig,
    destroy_unowned_domains,
    node_joined,
)
from services.handler.planner import (
    Action,
    Append,
    Cleanup,
    Observed,
    Send,
    Spawn,
    handler_meta,
    plan,
    service_name,
)
from services.handler.state import NodeState, evolve, vmi_key
from services.launcher import rundir
from services.launcher.client import LauncherClient, LauncherGone
from services.launcher.domain_xml import DomainType
from services.launcher.protocol import Command, DomainStatus, Shutdown, SoftReboot, Start
from services.launcher.zygote import spawn_launcher, start_zygote
from services.runtime import metrics as m
from services.runtime.shell import connect

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
    heartbeat_interval: float = 5.0
    tick_interval: float = 1.0
    settings: StreamSettings = msgspec.field(default_factory=StreamSettings.from_env)
    launch: LaunchSettings = LaunchSettings()


class Handler:
    def __init__(self, cfg: HandlerConfig, nc: NATS | None = None) -> None:
        self.cfg = cfg
        self.node = cfg.node.name
        self.name = service_name(self.node)
        self.base = Path(cfg.run_dir) / self.node
        self.launchers_dir = self.base / "launchers"
        self.zygote_socket = str(self.base / "zygote.sock")
        self._own_nc = nc is None
        self.nc: NATS | None = nc
        self.store: JetStreamStore | None = None
        self.records: NodeState = {}
        self.observed: dict[str, Observed] = {}
        self.clients: dict[str, LauncherClient] = {}
        self.folded: set[int] = set()
        self.ready = False
        self.last_heartbeat = 0.0
        self.zygote: subprocess.Popen[bytes] | None = None
        self._lock = asyncio.Lock()
        self._stop = asyncio.Event()
        self._dirty: set[str] = set()
        self._wake = asyncio.Event()
        self._tasks: set[asyncio.Task[None]] = set()
        self._closing = False  # close() has begun: connections ending now need no follow-up
        self.log = log.bind(service=self.name, node=self.node)
        self.migrations = MigrationDriver(self)  # live migration jobs (migration.py)

    @property
    def filters(self) -> list[str]:
        return [
            subjects.node_filter(Kind.VMI, self.node),
            subjects.node_filter(Kind.MIGRATION, self.node),
        ]

    # ------------------------------------------------------------------ lifecycle
    async def start(self) -> None:
        self.launchers_dir.mkdir(parents=True, exist_ok=True)
        if self.nc is None:
            self.nc = await connect(self.cfg.nats_url, self.name)
        self.store = JetStreamStore(self.nc, self.cfg.settings)
        await self.store.ensure()
        # In this thread: the zygote dies with the thread that started it (PDEATHSIG).
        self.zygote = start_zygote(self.zygote_socket)
        now = time.time()
        await self.store.append(node_joined(self.cfg.node, now))
        kv = await heartbeat.ensure_bucket(self.store.js)
        await heartbeat.put(kv, self.node, now)
        self.last_heartbeat = now
        LAUNCHERS.labels(self.node).set_function(
            lambda: sum(1 for o in self.observed.values() if o.connected)
        )
        HEARTBEAT_AGE.labels(self.node).set_function(lambda: time.time() - self.last_heartbeat)
        self._spawn_task(self._heartbeats(kv))
        await self._ensure_consumer()
        await self._catch_up()
        await self._discover()
        await self._destroy_unowned_domains()
        async with self._lock:
            for key in list(self.records.keys() | self.observed.keys()):
                await self._reconcile(key)
        await self.migrations.start()
        self._spawn_task(self._worker())
        self.ready = True
        self.log.info("handler started", vmis=len(self.records), launchers=len(self.observed))

    async def run(self) -> None:
        """Start, then consume the node's events until stop()."""
        await self.start()
        assert self.store is not None
        psub = await self.store.js.pull_subscribe_bind(self.name, self.store.stream)
        puller = Puller(psub, 64)  # no stalls on a trickle (see services/runtime/pull.py)
        next_tick = time.monotonic() + self.cfg.tick_interval
        try:
            while not self._stop.is_set():
                if time.monotonic() >= next_tick:
                    await self._tick()
                    next_tick = time.monotonic() + self.cfg.tick_interval
                try:
                    msgs = await puller.fetch(timeout=min(self.cfg.tick_interval, 1.0))
                except (TimeoutError, nats.errors.TimeoutError):
                    continue
                for msg in msgs:
                    await self._handle(msg)
                    if self._stop.is_set():
                        break
        finally:
            await self.close(psub)

    def stop(self) -> None:
        self._stop.set()

    async def close(self, psub: object | None = None) -> None:
        """Leave the launchers running (a handler restart never touches VMs)."""
        self.ready = False
        self._closing = True
        for task in list(self._tasks):
            task.cancel()
        for client in self.clients.values():
            await client.close()
        self.clients.clear()
        if psub is not None:
            with contextlib.suppress(Exception):
                await psub.unsubscribe()  # type: ignore[attr-defined]
        if self.zygote is not None and self.zygote.poll() is None:
            self.zygote.terminate()
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.zygote.wait(5)
        if self._own_nc and self.nc is not None:
            with contextlib.suppress(Exception):
                await self.nc.drain()

    def _spawn_task(self, coro: object) -> None:
        task: asyncio.Task[None] = asyncio.get_running_loop().create_task(coro)  # type: ignore[arg-type]
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _ensure_consumer(self) -> None:
        assert self.store is not None
        js = self.store.js
        try:
            await js.consumer_info(self.store.stream, self.name)
        except NotFoundError:
            await js.add_consumer(
                self.store.stream,
                ConsumerConfig(
                    durable_name=self.name,
                    filter_subjects=self.filters,
                    ack_policy=AckPolicy.EXPLICIT,
                    deliver_policy=DeliverPolicy.ALL,
                    ack_wait=10.0,
                    max_ack_pending=4096,
                    max_deliver=-1,
                ),
            )

    async def _catch_up(self) -> None:
        """Fold the node's history. Bounded by the last matching sequence: an ordered
        consumer whose filter matches nothing may report a delivered sequence anyway, and
        an unbounded replay would then wait for a message that never comes."""
        assert self.store is not None
        last = 0
        for f in self.filters:
            with contextlib.suppress(NotFoundError):
                raw = await self.store.js.get_last_msg(self.store.stream, f)
                last = max(last, int(raw.seq or 0))
        if last == 0:
            return
        async for msg in self.store.replay_msgs(self.filters, start_seq=1, until_seq=last):
            with contextlib.suppress(Undecodable):
                self._fold(_stored(msg))

    async def _heartbeats(self, kv: KeyValue) -> None:
        while True:
            await asyncio.sleep(self.cfg.heartbeat_interval)
            now = time.time()
            try:
                await heartbeat.put(kv, self.node, now)
                self.last_heartbeat = now
            except Exception as e:  # NATS reconnecting: the next beat tries again
                self.log.warning("heartbeat failed", error=repr(e))

    # ------------------------------------------------------------------ folding
    def _fold(self, stored: Stored) -> bool:
        if stored.seq in self.folded or stored.redelivery_of:
            return False  # a retried dead letter's original was folded already
        self.folded.add(stored.seq)
        evolve(self.records, stored.event)
        self.migrations.fold(stored.event)
        return True

    async def _handle(self, msg: Msg) -> None:
        assert self.store is not None
        try:
            stored = _stored(msg)
        except Undecodable as e:
            m.DEAD_LETTERS.labels(self.name).inc()
            await self.store.dead_letter(self.name, JsDelivery(msg), f"undecodable event: {e}")
            await msg.ack()
            return
        started = time.perf_counter()
        etype = event_type(stored.event)
        self._fold(stored)
        if stored.event.meta.aggregate.kind is Kind.VMI:
            async with self._lock:
                await self._reconcile(vmi_key(stored.event))
        await msg.ack()
        m.EVENTS_HANDLED.labels(self.name, etype).inc()
        m.HANDLING_SECONDS.labels(self.name, etype).observe(time.perf_counter() - started)

    # ------------------------------------------------------------------ planning
    def _kick(self, key: str) -> None:
        self._dirty.add(key)
        self._wake.set()

    async def _worker(self) -> None:
        """Plans for keys whose launcher reported something."""
        while True:
            await self._wake.wait()
            self._wake.clear()
            keys, self._dirty = self._dirty, set()
            async with self._lock:
                for key in keys:
                    try:
                        await self._reconcile(key)
                    except (ConnectionError, TimeoutError, nats.errors.Error) as e:
                        self.log.warning("reconcile failed", key=key, error=repr(e))
                        self._dirty.add(key)  # retried on the next tick

    async def _tick(self) -> None:
        for key, o in list(self.observed.items()):
            # a launcher that sent its final report is exiting: its socket is gone, and a
            # reattach would block this loop for the whole connect timeout (1 s)
            if not o.connected and not o.gone and not o.spawning and o.final is None:
                await self._reattach(key, o)
        async with self._lock:
            for key in list(self.records.keys() | self.observed.keys()):
                await self._reconcile(key)
            await self.migrations.tick()

    async def _reconcile(self, key: str) -> None:
        if await self.migrations.reconcile(key):
            return  # a migration owns this VMI on this node right now
        for _ in range(8):  # each pass acts; the next sees the effects, until nothing is left
            actions = plan(
                key, self.records.get(key), self.observed.get(key), self.node, time.time()
            )
            if not actions:
                break
            for action in actions:
                await self._act(action)
        o = self.observed.get(key)
        r = self.records.get(key)
        if o is not None and o.gone and (r is None or r.exited or r.uid != o.uid):
            del self.observed[key]
            client = self.clients.pop(key, None)
            if client is not None:
                await client.close()

    async def _act(self, action: Action) -> None:
        match action:
            case Append(event=event):
                await self._append(event)
            case Spawn(key=key):
                await self._spawn(key)
            case Send(key=key, command=command):
                await self._send(key, command)
            case Cleanup(key=key):
                self.log.info("destroying orphan launcher", key=key)
                o = self.observed[key]
                o.shutdown_grace = 0
                if key in self.clients:
                    await self._send(key, Shutdown(grace_period_seconds=0))
                elif o.pid and rundir.pid_alive(o.pid):
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(o.pid, signal.SIGTERM)

    async def _append(self, event: Event) -> None:
        assert self.store is not None
        ack = await self.store.append(event)
        etype = event_type(event)
        if ack.duplicate:
            m.DUPLICATES.labels(self.name).inc()
        else:
            m.EVENTS_APPENDED.labels(self.name, etype).inc()
        self.log.info("appended", type=etype, key=vmi_key(event), seq=ack.seq)
        self._fold(Stored(seq=ack.seq, subject="", time=event.meta.occurred_at, event=event))

    # ------------------------------------------------------------------ launchers
    def _socket_path(self, key: str) -> str:
        ns, name = key.split("/", 1)
        return str(rundir.launcher_socket_path(self.launchers_dir, f"{ns}_{name}"))

    async def _spawn(self, key: str) -> None:
        r = self.records[key]
        o = Observed(uid=r.uid, spawning=True)
        self.observed[key] = o
        manifest = r.manifest  # a fresh decode: ours to change
        meta = dict(manifest.get("metadata") or {})
        meta.setdefault("namespace", r.namespace)
        meta.setdefault("name", r.name)
        meta["uid"] = r.uid
        manifest["metadata"] = meta
        sock = self._socket_path(key)
        try:
            pid = await asyncio.to_thread(
                spawn_launcher,
                self.zygote_socket,
                msgspec.json.encode(manifest),
                sock,
                **self.cfg.launch.spawn_kwargs(),  # type: ignore[arg-type]
            )
            client = await LauncherClient.connect(sock, timeout=10.0)
        except Exception as e:
            self.log.error("launcher spawn failed", key=key, error=repr(e))
            del self.observed[key]
            await self._append(
                DomainStopped(
                    meta=handler_meta(r, self.node, "DomainStopped", time.time()),
                    reason=StopReason.FAILED,
                    message=f"virt-launcher failed to start: {e}",
                )
            )
            return
        self.log.info("launcher spawned", key=key, pid=pid)
        self._attach(key, client)

    def _attach(self, key: str, client: LauncherClient) -> None:
        hello = client.hello
        o = self.observed.get(key)
        if o is None or o.uid != hello.vmi_uid:
            o = Observed(uid=hello.vmi_uid)
            self.observed[key] = o
        o.spawning = False
        o.connected = True
        o.pid = hello.pid
        o.domain_name = hello.domain_name
        o.domain_pid = hello.domain_pid
        o.domain_type = hello.domain_type
        self.clients[key] = client

        # statuses arrive by callback: no task per launcher (memory per VMI on the node)
        def on_status(status: DomainStatus) -> None:
            o.update(status)
            self._kick(key)

        def on_close() -> None:
            if not self._closing:
                self._spawn_task(self._detached(key, client, o))

        client.subscribe(on_status, on_close)

    async def _detached(self, key: str, client: LauncherClient, o: Observed) -> None:
        o.connected = False
        if self.clients.get(key) is client:
            del self.clients[key]
        # after the final report the launcher exits at once; wait for the process to go
        # (another session's process: nothing to await but polling)
        for _ in range(150 if o.final else 25):
            if not rundir.pid_alive(o.pid):
                break
            await asyncio.sleep(0.02)
        if o.final is not None or not rundir.pid_alive(o.pid):
            o.gone = True
        self._kick(key)

    async def _reattach(self, key: str, o: Observed) -> None:
        if not o.pid or not rundir.pid_alive(o.pid):
            o.gone = True
            return
        with contextlib.suppress(OSError, TimeoutError, LauncherGone):
            self._attach(key, await LauncherClient.connect(self._socket_path(key), timeout=1.0))

    async def _discover(self) -> None:
        """Re-attach to the launchers a previous incarnation left running."""
        by_uid = {r.uid: key for key, r in self.records.items()}
        for entry in rundir.discover_launchers(self.launchers_dir):
            if not entry.alive:
                for path in (entry.socket_path, str(rundir.pidfile_path(entry.socket_path))):
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(path)
                continue
            try:
                client = await LauncherClient.connect(entry.socket_path, timeout=2.0)
            except (OSError, TimeoutError, LauncherGone) as e:
                self.log.warning("cannot re-attach", socket=entry.socket_path, error=repr(e))
                continue
            ns, _, name = entry.domain_name.partition("_")
            key = by_uid.get(client.hello.vmi_uid, f"{ns}/{name}")
            self.log.info("re-attached launcher", key=key, pid=client.hello.pid)
            self._attach(key, client)
        # the snapshots each launcher sends on connect arrive through the readers; give
        # them a moment so the first plan sees current statuses, not "no status yet"
        for _ in range(100):
            if all(o.status is not None for o in self.observed.values() if o.connected):
                break
            await asyncio.sleep(0.01)

    async def _destroy_unowned_domains(self) -> None:
        """qemu mode: a domain on this node's libvirtd with no launcher attached lost its
        launcher while nobody watched (the planner reports the VMI failed); destroy it, or
        a restarted VM of the same name could not start."""
        if self.cfg.launch.domain_type is DomainType.TEST:
            return  # the test driver's domains live inside their launcher's process
        owned = {o.domain_name for o in self.observed.values() if o.domain_name}
        try:
            gone = await asyncio.to_thread(
                destroy_unowned_domains, self.cfg.launch.hypervisor_uri, owned
            )
        except Exception as e:  # libvirtd unreachable: the launchers will report it
            self.log.warning("cannot list the node's domains", error=repr(e))
            return
        for name in gone:
            self.log.warning("destroyed a domain without a launcher", domain=name)

    async def _send(self, key: str, command: Command) -> None:
        o = self.observed[key]
        client = self.clients.get(key)
        if client is None:
            return
        tag = type(command).__name__
        match command:
            case Start():
                o.start_sent = True
            case Shutdown(grace_period_seconds=grace):
                o.shutdown_grace = grace
            case SoftReboot():
                o.reboots_sent += 1
        o.in_flight.add(tag)
        try:
            result = await client.call(command, timeout=10.0)
        except (LauncherGone, TimeoutError, ConnectionError) as e:
            self.log.warning("command failed", key=key, command=tag, error=repr(e))
            return
        finally:
            o.in_flight.discard(tag)
        if result.status is not None:
            o.update(result.status)
        if not result.ok:
            self.log.warning("command rejected", key=key, command=tag, error=result.error)
        elif isinstance(command, SoftReboot):
            o.reboots_ok += 1
        self.log.info("command sent", key=key, command=tag, ok=result.ok)


async def serve(cfg: HandlerConfig) -> None:
    """Run one handler process until SIGTERM/SIGINT, with /metrics when configured."""
    from services.runtime.http import HealthServer

    handler = Handler(cfg)
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, handler.stop)
    health = None
    if cfg.metrics_port is not None:
        health = HealthServer("127.0.0.1", cfg.metrics_port, lambda: handler.ready)
        await health.start()
    try:
        await handler.run()
    finally:
        if health:
            await health.stop()
