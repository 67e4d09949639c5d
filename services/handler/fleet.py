"""The launchers of one node, as an executor: spawns them (through the zygote), holds one
connection to each, sends them commands, destroys orphans, drives a launcher's live
migration, and reports each launcher whenever it changes (`LauncherSeen` with a new
`Observed`: one it has reported is never changed, so a decider may keep it).

Launchers run in their own sessions (forked by the zygote, setsid), so neither SIGTERM nor
SIGKILL of the handler touches them. `open` re-attaches to the sockets a previous
incarnation left in `<run-dir>/<node>/launchers/`. A connection that ends: the launcher is
gone once its process is (another session's: polled), else it is re-attached later.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any, assert_never

import structlog
from msgspec.structs import replace

from services.handler.effects import (
    Cleanup,
    FleetAction,
    Launch,
    LauncherSeen,
    Migrate,
    MigrationCalled,
    MigrationReported,
    Observation,
    Observed,
    Relay,
    Release,
    Send,
)
from services.handler.host import destroy_unowned_domains
from services.handler.node_info import LaunchSettings
from services.handler.planner import rejected, service_name
from services.handler.spawn_queue import SpawnQueue
from services.launcher import rundir
from services.launcher.client import LauncherClient, LauncherGone
from services.launcher.domain_xml import DomainType
from services.launcher.protocol import (
    Command,
    CommandResult,
    DomainStatus,
    MigrationResult,
    Shutdown,
    SoftReboot,
    Start,
)
from services.launcher.zygote import spawn_launcher, start_zygote

log = structlog.get_logger()

COMMAND_TIMEOUT = 10.0
#: Spawns in flight per node (fork → Hello); more wait in a queue, in order.
MAX_CONCURRENT_SPAWNS = 2


FENCE_SECOND_SWEEP = 1.0  # s: a launcher forked as the zygote died has written its pidfile


class LauncherFleet:
    def __init__(
        self,
        node: str,
        run_dir: Path,
        launch: LaunchSettings,
        report: Callable[[Observation], None],
        *,
        reattach_interval: float = 1.0,
        max_spawns: int = MAX_CONCURRENT_SPAWNS,
    ) -> None:
        base = run_dir / node
        self.launchers_dir = base / "launchers"
        self.zygote_socket = str(base / "zygote.sock")
        self.launch = launch
        self.report = report
        self.reattach_interval = reattach_interval
        self.observed: dict[str, Observed] = {}
        self.clients: dict[str, LauncherClient] = {}
        self.zygote: subprocess.Popen[bytes] | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._spawns: SpawnQueue[Launch] = SpawnQueue(max_spawns)
        self._closing = False  # close() has begun: connections ending now need no follow-up
        self.log = log.bind(service=service_name(node), node=node)

    @property
    def connected(self) -> int:
        return sum(1 for o in self.observed.values() if o.connected)

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> None:
        """In the thread that runs the handler: the zygote dies with the thread that
        started it (PDEATHSIG)."""
        self.launchers_dir.mkdir(parents=True, exist_ok=True)
        self.zygote = start_zygote(self.zygote_socket)

    async def open(self, known: dict[str, str]) -> None:
        """Re-attach to the launchers a previous incarnation left running (`known`: VMI
        uid → key), and destroy what no launcher owns."""
        await self._discover(known)
        await self._destroy_unowned_domains()
        self._spawn_task(self._reattaching())

    async def close(self) -> None:
        """Leave the launchers running (a handler restart never touches VMs)."""
        self._closing = True
        for task in list(self._tasks):
            task.cancel()
        for client in self.clients.values():
            await client.close()
        self.clients.clear()
        if self.zygote is not None and self.zygote.poll() is None:
            self.zygote.terminate()
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.zygote.wait(5)

    async def fence(self) -> int:
        """Stop every VM of this node now, NATS or not: SIGKILL every launcher (a test
        domain dies with it) and, in qemu mode, destroy every domain of the node's
        libvirtd. Returns how many launchers there were."""
        self._closing = True
        # The zygote first, so no spawn in flight forks a launcher after the sweep. A fork
        # it made is in the sweep by its pidfile (the zygote writes it as it forks; the
        # launcher as it starts if the zygote had not: the second sweep catches that).
        if self.zygote is not None and self.zygote.poll() is None:
            self.zygote.kill()
            await asyncio.to_thread(self.zygote.wait)
        return await fence_node(self.launchers_dir, self.launch)

    def _spawn_task(self, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _set(self, key: str, o: Observed | None) -> None:
        if o is None:
            self.observed.pop(key, None)
        else:
            self.observed[key] = o
        self.report(LauncherSeen(key, o))

    # ------------------------------------------------------------------ actions
    async def execute(self, action: FleetAction) -> None:
        match action:
            case Launch():
                await self._launch(action)
            case Send(key=key, command=command, cause=cause):
                await self._send(key, command, cause)
            case Cleanup(key=key):
                await self._cleanup(key)
            case Release(key=key):
                await self._release(key)
            case Migrate():
                await self._migrate(action)
            case Relay():
                self._relay(action)
            case _:
                assert_never(action)

    def _socket_path(self, key: str) -> str:
        ns, name = key.split("/", 1)
        return str(rundir.launcher_socket_path(self.launchers_dir, f"{ns}_{name}"))

    async def _launch(self, a: Launch) -> None:
        """Reported as spawning at once (so no decision launches it twice), admitted to the
        spawn queue; the handler decides on other VMIs while it waits and spawns."""
        self._set(a.key, Observed(uid=a.uid, spawning=True))
        if (admitted := self._spawns.offer(a)) is not None:
            self._spawn_task(self._spawning(admitted))

    async def _spawning(self, a: Launch) -> None:
        try:
            o = self.observed.get(a.key)
            if o is not None and o.spawning and o.uid == a.uid:  # not released meanwhile
                await self._spawn(a)
        finally:
            if not self._closing and (after := self._spawns.done()) is not None:
                self._spawn_task(self._spawning(after))

    async def _spawn(self, a: Launch) -> None:
        key = a.key
        sock = self._socket_path(key)
        if self._closing:  # fenced or stopping: no new VM on this node
            return
        try:
            pid = await asyncio.to_thread(
                spawn_launcher,
                self.zygote_socket,
                a.manifest,
                sock,
                migration_target=a.migration_target,
                pod_address=a.pod_address,
                attachments=a.attachments,
                **self.launch.spawn_kwargs(),  # type: ignore[arg-type]
            )
            if self._closing:  # the fence came while the zygote forked: it must not run
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
                return
            client = await LauncherClient.connect(sock, timeout=10.0)
        except Exception as e:
            self.log.error("launcher spawn failed", key=key, error=repr(e))
            failed = Observed(
                uid=a.uid, gone=True, spawn_error=str(e) or type(e).__name__, ended_at=time.time()
            )
            self._set(key, failed)
            return
        self.log.info("launcher spawned", key=key, pid=pid, migration_target=a.migration_target)
        self._attach(key, client)

    async def _send(self, key: str, command: Command, cause: str = "") -> None:
        o = self.observed.get(key)
        client = self.clients.get(key)
        if o is None or client is None:
            return
        tag = type(command).__name__
        sent = replace(o, in_flight=o.in_flight | {tag})
        match command:
            case Start():
                sent = replace(sent, start_sent=True)
            case Shutdown(grace_period_seconds=grace):
                sent = replace(sent, shutdown_grace=grace)
            case SoftReboot():
                sent = replace(sent, reboots_sent=sent.reboots_sent + 1)
        self._set(key, sent)
        result: CommandResult | None = None
        error = ""
        try:
            result = await client.call(command, timeout=COMMAND_TIMEOUT)
        except TimeoutError:
            error = f"no answer within {COMMAND_TIMEOUT:.0f}s"
            self.log.warning("command failed", key=key, command=tag, error=error)
        except (LauncherGone, ConnectionError) as e:
            self.log.warning("command failed", key=key, command=tag, error=repr(e))
        if result is not None and not result.ok:
            error = result.error or "refused"
        now = self.observed.get(key)
        if now is not None and now.uid == o.uid:
            done = replace(now, in_flight=now.in_flight - {tag})
            if result is not None and result.status is not None:
                done = done.updated(result.status, time.time())
            if result is not None and result.ok and isinstance(command, SoftReboot):
                done = replace(done, reboots_ok=done.reboots_ok + 1)
            if error:
                streak = rejected(done.rejected, tag, cause, error, time.time())
                done = replace(done, rejected=streak)
            elif result is not None:
                done = replace(done, rejected=None)
            self._set(key, done)
        if result is None:
            return
        if not result.ok:
            self.log.warning("command rejected", key=key, command=tag, error=result.error)
        self.log.info("command sent", key=key, command=tag, ok=result.ok)

    async def _cleanup(self, key: str) -> None:
        """An orphan (its VMI is gone, or is a newer VMI of the same name): destroy it."""
        o = self.observed.get(key)
        if o is None:
            return
        self.log.info("destroying orphan launcher", key=key)
        self._set(key, replace(o, shutdown_grace=0))
        if key in self.clients:
            await self._send(key, Shutdown(grace_period_seconds=0))
        elif o.pid and rundir.pid_alive(o.pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(o.pid, signal.SIGTERM)

    async def _release(self, key: str) -> None:
        client = self.clients.pop(key, None)
        self._set(key, None)
        if client is not None:
            await client.close()

    async def _migrate(self, a: Migrate) -> None:
        tag = type(a.command).__name__
        client = self.clients.get(a.key)
        if client is None:
            self.report(MigrationCalled(a.migration, tag, ok=False, error="not connected"))
            return
        try:
            result = await client.call(a.command, timeout=COMMAND_TIMEOUT)
            ok, error = result.ok, result.error or ""
        except (LauncherGone, TimeoutError, ConnectionError) as e:
            ok, error = False, repr(e)
        self.log.info("migration command sent", key=a.key, command=tag, ok=ok, error=error)
        self.report(MigrationCalled(a.migration, tag, ok=ok, error=error))

    def _relay(self, a: Relay) -> None:
        client = self.clients.get(a.key)
        if client is None:
            self.report(MigrationReported(a.migration, None))
            return
        self._spawn_task(self._relaying(a.migration, client))

    async def _relaying(self, migration: str, client: LauncherClient) -> None:
        while True:
            try:
                report = await client.next_migration_report()
            except LauncherGone:
                self.report(MigrationReported(migration, None))
                return
            self.report(MigrationReported(migration, report))
            if isinstance(report, MigrationResult):
                return

    # ------------------------------------------------------------------ connections
    def _attach(self, key: str, client: LauncherClient) -> None:
        hello = client.hello
        o = self.observed.get(key)
        if o is None or o.uid != hello.vmi_uid:
            o = Observed(uid=hello.vmi_uid)
        self.clients[key] = client
        self._set(
            key,
            replace(
                o,
                spawning=False,
                connected=True,
                pid=hello.pid,
                domain_name=hello.domain_name,
                domain_pid=hello.domain_pid,
                domain_type=hello.domain_type,
                hypervisor_uri=hello.hypervisor_uri,
            ),
        )

        # statuses arrive by callback: no task per launcher (memory per VMI on the node)
        def on_status(status: DomainStatus) -> None:
            current = self.observed.get(key)
            if self.clients.get(key) is client and current is not None:
                self._set(key, current.updated(status, time.time()))

        def on_close() -> None:
            if not self._closing:
                self._spawn_task(self._detached(key, client))

        client.subscribe(on_status, on_close)

    async def _detached(self, key: str, client: LauncherClient) -> None:
        if self.clients.get(key) is not client:
            return  # released, or replaced by a newer connection
        del self.clients[key]
        o = self.observed.get(key)
        if o is None:
            return
        o = replace(o, connected=False)
        self._set(key, o)
        # after the final report the launcher exits at once; wait for the process to go
        # (another session's process: nothing to await but polling)
        for _ in range(150 if o.final else 25):
            if not rundir.pid_alive(o.pid):
                break
            await asyncio.sleep(0.02)
        now = self.observed.get(key)
        if now is None or now.uid != o.uid or now.connected or now.gone:
            return  # re-attached, released or replaced meanwhile
        if now.final is not None or not rundir.pid_alive(now.pid):
            self._set(key, _gone(now))

    async def _reattaching(self) -> None:
        while True:
            await asyncio.sleep(self.reattach_interval)
            for key, o in list(self.observed.items()):
                # a launcher that sent its final report is exiting: its socket is gone,
                # and a re-attach would wait the whole connect timeout (1 s) for nothing
                if not o.connected and not o.gone and not o.spawning and o.final is None:
                    await self._reattach(key)

    async def _reattach(self, key: str) -> None:
        o = self.observed.get(key)
        if o is None:
            return
        if not o.pid or not rundir.pid_alive(o.pid):
            self._set(key, _gone(o))
            return
        try:
            client = await LauncherClient.connect(self._socket_path(key), timeout=1.0)
        except (OSError, TimeoutError, LauncherGone):
            return
        if self.observed.get(key) is not o:
            await client.close()  # it changed while we connected: that one decides
            return
        self._attach(key, client)

    async def _discover(self, known: dict[str, str]) -> None:
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
            key = known.get(client.hello.vmi_uid, f"{ns}/{name}")
            self.log.info("re-attached launcher", key=key, pid=client.hello.pid)
            self._attach(key, client)
        # the snapshots each launcher sends on connect arrive by callback; give them a
        # moment so the first decision sees current statuses, not "no status yet"
        for _ in range(100):
            if all(o.status is not None for o in self.observed.values() if o.connected):
                break
            await asyncio.sleep(0.01)

    async def _destroy_unowned_domains(self) -> None:
        """qemu mode: a domain on this node's libvirtd with no launcher attached lost its
        launcher while nobody watched (the planner reports the VMI failed); destroy it, or
        a restarted VM of the same name could not start."""
        if self.launch.domain_type is DomainType.TEST:
            return  # the test driver's domains live inside their launcher's process
        owned = {o.domain_name for o in self.observed.values() if o.domain_name}
        try:
            gone = await asyncio.to_thread(
                destroy_unowned_domains, self.launch.hypervisor_uri, owned
            )
        except Exception as e:  # libvirtd unreachable: the launchers will report it
            self.log.warning("cannot list the node's domains", error=repr(e))
            return
        for name in gone:
            self.log.warning("destroyed a domain without a launcher", domain=name)


def _gone(o: Observed) -> Observed:
    return replace(o, gone=True, ended_at=time.time() if o.ended_at is None else o.ended_at)


async def fence_node(launchers_dir: Path, launch: LaunchSettings) -> int:
    """Stop every VM of the node: SIGKILL every launcher its pidfiles name (a test domain
    dies with it) and, in qemu mode, destroy every domain of the node's libvirtd. Returns
    how many launchers there were."""
    killed: set[int] = set()
    for sweep in range(2):
        if sweep:
            await asyncio.sleep(FENCE_SECOND_SWEEP)
        killed |= _kill_launchers(launchers_dir)
    if launch.domain_type is not DomainType.TEST:
        await asyncio.to_thread(destroy_unowned_domains, launch.hypervisor_uri, set())
    return len(killed)


def _kill_launchers(launchers_dir: Path) -> set[int]:
    killed = set()
    for pidfile in launchers_dir.glob("*.pid"):
        if (pid := rundir.read_pid(pidfile)) and rundir.pid_alive(pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            killed.add(pid)
    return killed
