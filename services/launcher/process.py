"""virt-launcher: one process per VMI (its "pod"), owning one libvirt domain.

It is not on the NATS bus. It defines the domain, serves its handler on a unix socket
(see protocol.py), pushes a DomainStatus to every connected handler on each lifecycle
event, and exits once the domain is gone and that final status has been delivered.
The handler may die and come back: the launcher and the domain keep running meanwhile,
and a reconnecting handler gets Hello and the current status.

In qemu mode it also prepares the domain's disks (storage.py), reports QEMU's pid, and
live-migrates: the source launcher runs migrateToURI3 on MigrateTo and streams the job's
progress; a launcher started with `migration_target` defines nothing and instead attaches
to the domain that libvirt's migration creates on its node, then watches it as usual.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import socket
import time
from typing import Any

import msgspec

from services.launcher import rundir, storage
from services.launcher.domain_state import ACTIVE_STATES, DomainEvent, DomainState, StateReason
from services.launcher.domain_xml import (
    DEFAULT_DISK_DIR,
    DomainType,
    build_domain_xml,
    domain_name,
    firmware_uuid,
    guest_memory_bytes,
)
from services.launcher.hypervisor import (
    TEST_URI,
    Hypervisor,
    HypervisorError,
    LibvirtHypervisor,
    MigrationOptions,
)
from services.launcher.protocol import (
    AbortMigration,
    Command,
    CommandResult,
    Crash,
    DomainStatus,
    Hello,
    MigrateTo,
    MigrationProgress,
    MigrationResult,
    Pause,
    Report,
    Resume,
    Shutdown,
    SoftReboot,
    Start,
    Status,
    decode_command,
    encode,
)

log = logging.getLogger("virtstream.launcher")

#: KubeVirt re-sends ACPI shutdown at least this often: a booting OS can miss the signal.
ACPI_RESEND_SECONDS = 5.0
DEFAULT_TERMINATION_GRACE_SECONDS = 30

# The state a lifecycle event puts the domain in. Reports use this rather than querying
# libvirt, because events are dispatched after the fact and a query could already show a
# later state, breaking the order of the reported transitions.
_EVENT_STATES = {
    DomainEvent.DEFINED: DomainState.SHUTOFF,
    DomainEvent.UNDEFINED: DomainState.NO_STATE,
    DomainEvent.STARTED: DomainState.RUNNING,
    DomainEvent.SUSPENDED: DomainState.PAUSED,
    DomainEvent.RESUMED: DomainState.RUNNING,
    DomainEvent.STOPPED: DomainState.SHUTOFF,
    DomainEvent.SHUTDOWN: DomainState.SHUTDOWN,
    DomainEvent.PM_SUSPENDED: DomainState.PM_SUSPENDED,
    DomainEvent.CRASHED: DomainState.CRASHED,
}


class LauncherConfig(msgspec.Struct, kw_only=True):
    #: The VirtualMachineInstance in KubeVirt's JSON shape.
    vmi: dict[str, Any]
    socket_path: str
    hypervisor_uri: str = TEST_URI
    domain_type: DomainType = DomainType.TEST
    emulator: str | None = None
    disk_dir: str = DEFAULT_DISK_DIR
    disk_paths: dict[str, str] = {}
    #: With no handler connected when the domain ends, wait this long for one to come back
    #: and collect the final status before exiting anyway.
    final_status_linger_seconds: float = 30.0
    # -- qemu mode --
    #: containerDisk images by name (see storage.py); None: blank disks.
    image_dir: str | None = None
    default_disk_size: str = storage.DEFAULT_DISK_SIZE
    #: The node's QEMU pidfile dir (ops.node_libvirtd.NodeRuntime.qemu_pid_dir).
    qemu_pid_dir: str | None = None
    #: Attach to a domain arriving by live migration instead of defining one.
    migration_target: bool = False
    #: A migration target gives up (and exits) when no domain arrives within this time.
    migration_target_timeout_seconds: float = 600.0


class Launcher:
    def __init__(self, config: LauncherConfig, hypervisor: Hypervisor | None = None) -> None:
        self._config = config
        self._hv: Hypervisor = hypervisor or LibvirtHypervisor(
            config.hypervisor_uri, pid_dir=config.qemu_pid_dir
        )
        self._domain_name = domain_name(config.vmi)
        spec = config.vmi.get("spec") or {}
        grace = spec.get("terminationGracePeriodSeconds")
        self._termination_grace = DEFAULT_TERMINATION_GRACE_SECONDS if grace is None else grace
        self._clients: set[asyncio.StreamWriter] = set()
        self._seq = 0
        self._crash_requested = False
        self._grace_expired = False
        self._shutdown_deadline: float | None = None
        self._shutdown_task: asyncio.Task[None] | None = None
        self._final: DomainStatus | None = None
        # Disks this launcher deletes when its domain ends: not the source's after the guest
        # moved away, not a target's before the guest arrived.
        self._owns_disks = False
        self._migration: MigrateTo | None = None
        self._migration_abort: str | None = None
        #: A domain end seen while the migration call had not returned yet: reported after
        #: the MigrationResult, so the handler learns the outcome before the end.
        self._deferred_finish: tuple[DomainState, StateReason, DomainEvent] | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._serving: set[asyncio.Task[Any]] = set()
        # Created in run() so they bind to the loop that runs the launcher.
        self._shutdown_wakeup: asyncio.Event
        self._domain_gone: asyncio.Event
        self._final_delivered: asyncio.Event

    async def run(self) -> int:
        loop = asyncio.get_running_loop()
        self._shutdown_wakeup = asyncio.Event()
        self._domain_gone = asyncio.Event()
        self._final_delivered = asyncio.Event()
        sock = self._config.socket_path
        self._claim_socket(sock)
        # Listen before the (slower) libvirt setup: a handler connecting meanwhile waits in
        # the backlog and gets its Hello as soon as the domain is defined, instead of
        # polling a socket that does not exist yet.
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        listener.bind(sock)
        os.chmod(sock, 0o600)
        listener.listen(16)
        rundir.write_pidfile(sock, os.getpid())

        server: asyncio.Server | None = None
        failed = False
        try:
            try:
                self._hv.open(self._on_event)
                if self._config.migration_target:
                    self._attach_incoming()
                else:
                    self._hv.define(self._domain_xml())
            except (HypervisorError, ValueError, KeyError, TypeError, OSError) as exc:
                # Stay up long enough to tell the handler why (the VMI fails), then exit.
                log.error("cannot define %s: %s", self._domain_name, exc)
                failed = True
                self._finish(
                    DomainState.SHUTOFF, StateReason.FAILED, None, f"{type(exc).__name__}: {exc}"
                )
            server = await asyncio.start_unix_server(self._serve, sock=listener)
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.add_signal_handler(sig, self._on_signal, sig)
            log.info("launcher %s ready on %s (pid %d)", self._domain_name, sock, os.getpid())
            await self._final_delivered.wait()
        finally:
            # Socket and pidfile go first: a handler listing the run dir must not re-attach
            # to a launcher that is on its way out.
            for path in (sock, rundir.pidfile_path(sock)):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(path)
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.remove_signal_handler(sig)
            if server is not None:
                server.close()
            else:
                listener.close()
            for writer in list(self._clients):
                writer.close()
            # Let connection handlers see the close and end, rather than be cancelled
            # mid-read by asyncio.run (which logs that as an error).
            if self._serving:
                await asyncio.wait(self._serving, timeout=1.0)
            self._hv.close()
            if self._owns_disks:
                storage.remove_disks(self._domain_name, self._config.disk_dir)
        log.info("launcher %s exits: %s", self._domain_name, self._final)
        return 1 if failed else 0

    def _domain_xml(self) -> str:
        config = self._config
        disk_paths = dict(config.disk_paths)
        omit: list[str] = []
        if config.domain_type is not DomainType.TEST:
            prepared = storage.prepare_disks(
                config.vmi,
                self._domain_name,
                config.disk_dir,
                image_dir=config.image_dir,
                default_size=config.default_disk_size,
            )
            self._owns_disks = True
            disk_paths = prepared | disk_paths
            omit = storage.skipped_disks(config.vmi, disk_paths)
        return build_domain_xml(
            config.vmi,
            domain_type=config.domain_type,
            emulator=config.emulator,
            disk_dir=config.disk_dir,
            disk_paths=disk_paths,
            omit_disks=omit,
        )

    def _attach_incoming(self) -> None:
        if self._hv.attach(firmware_uuid(self._config.vmi)):
            state, reason = self._hv.state()
            if state in ACTIVE_STATES and reason is not StateReason.MIGRATION:
                self._owns_disks = True  # the migration has already completed
            return
        self._spawn(self._give_up_waiting(self._config.migration_target_timeout_seconds))

    async def _give_up_waiting(self, timeout: float) -> None:
        await asyncio.sleep(timeout)
        if self._hv.state()[0] is DomainState.NO_STATE and self._final is None:
            self._finish(
                DomainState.NO_STATE,
                StateReason.FAILED,
                None,
                f"no domain arrived by migration within {timeout}s",
            )

    # -- events ---------------------------------------------------------------------------

    def _on_event(self, event: DomainEvent, reason: StateReason) -> None:
        if self._final is not None:
            return  # the domain is already reported gone (e.g. Undefined during cleanup)
        state = _EVENT_STATES[event]
        if event is DomainEvent.STOPPED and self._crash_requested:
            reason = StateReason.CRASHED
        if event is DomainEvent.DEFINED and self._active():
            return  # a running domain's definition was saved (a migration's target does)
        if event is DomainEvent.STARTED and reason is StateReason.MIGRATED:
            # An incoming migration: QEMU exists on the target but the guest runs only once
            # the migration completes (Resumed/Migrated).
            state, reason = DomainState.PAUSED, StateReason.MIGRATION
        elif self._config.migration_target and event is DomainEvent.RESUMED:
            self._owns_disks = True  # the guest now lives here
        if event in (DomainEvent.STOPPED, DomainEvent.UNDEFINED, DomainEvent.CRASHED):
            if self._migration is not None:
                self._deferred_finish = (state, reason, event)
                return
            self._finish(state, reason, event)
        else:
            self._broadcast(self._status(state, reason, event))

    def _finish(
        self,
        state: DomainState,
        reason: StateReason,
        event: DomainEvent | None,
        message: str | None = None,
    ) -> None:
        final = self._status(state, reason, event)
        final.final = True
        final.message = message
        final.grace_period_expired = self._grace_expired
        self._final = final
        self._domain_gone.set()
        log.info("domain %s gone: %s/%s", self._domain_name, state, reason)
        self._spawn(self._deliver_final(final))

    async def _deliver_final(self, final: DomainStatus) -> None:
        delivered = False
        for writer in list(self._clients):
            self._send(writer, final)
            with contextlib.suppress(ConnectionError):
                await writer.drain()
                delivered = True
        if not delivered:
            # Nobody is listening: give a restarting handler time to come and collect it
            # (_serve sets _final_delivered when it hands the final status over).
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(
                    self._final_delivered.wait(), self._config.final_status_linger_seconds
                )
        self._final_delivered.set()

    def _status(
        self, state: DomainState, reason: StateReason, event: DomainEvent | None = None
    ) -> DomainStatus:
        self._seq += 1
        return DomainStatus(
            state=state,
            reason=reason,
            event=event,
            seq=self._seq,
            observed_at=time.time(),
            domain_pid=self._hv.pid() if state in ACTIVE_STATES else None,
        )

    def _snapshot(self) -> DomainStatus:
        if self._final is not None:
            return self._final
        state, reason = self._hv.state()
        if self._crash_requested and state is DomainState.SHUTOFF:
            reason = StateReason.CRASHED
        return self._status(state, reason)

    # -- clients --------------------------------------------------------------------------

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if task is not None:
            self._serving.add(task)
            task.add_done_callback(self._serving.discard)
        self._send(writer, self._hello())
        if self._final is not None:
            self._send(writer, self._final)
            with contextlib.suppress(ConnectionError):
                await writer.drain()
                self._final_delivered.set()
            writer.close()
            return
        self._send(writer, self._snapshot())
        self._clients.add(writer)
        try:
            while line := await reader.readline():
                if not line.strip():
                    continue
                try:
                    command = decode_command(line)
                except (msgspec.DecodeError, msgspec.ValidationError) as exc:
                    self._send(writer, CommandResult(id=0, ok=False, error=f"bad command: {exc}"))
                    continue
                self._send(writer, self._execute(command))
        except (ConnectionError, ValueError):
            pass  # the handler went away or sent garbage; the launcher carries on
        finally:
            self._clients.discard(writer)
            writer.close()

    def _hello(self) -> Hello:
        meta = self._config.vmi.get("metadata") or {}
        return Hello(
            vmi_uid=str(meta.get("uid") or ""),
            domain_name=self._domain_name,
            pid=os.getpid(),
            domain_pid=self._hv.pid(),
            hypervisor_uri=self._hv.uri,
            domain_type=str(self._config.domain_type),
            migration_target=self._config.migration_target,
        )

    def _broadcast(self, report: Report) -> None:
        for writer in list(self._clients):
            self._send(writer, report)

    def _send(self, writer: asyncio.StreamWriter, report: Report) -> None:
        if writer.is_closing():
            self._clients.discard(writer)
            return
        writer.write(encode(report))

    # -- commands -------------------------------------------------------------------------

    def _execute(self, command: Command) -> CommandResult:
        try:
            match command:
                case Start(paused=paused):
                    if self._shutdown_deadline is not None or self._final is not None:
                        raise HypervisorError("the domain is shutting down")
                    if not self._active():
                        self._hv.start(paused)
                case Pause():
                    self._hv.pause()
                case Resume():
                    self._hv.resume()
                case SoftReboot():
                    self._hv.soft_reboot()
                case Shutdown(grace_period_seconds=grace):
                    self._request_shutdown(grace)
                case Crash():
                    if not self._active():
                        raise HypervisorError("the domain is not running")
                    self._crash_requested = True
                    self._hv.destroy()
                case Status():
                    pass
                case MigrateTo():
                    self._start_migration(command)
                case AbortMigration():
                    self._abort_migration("aborted on request")
        except HypervisorError as exc:
            return CommandResult(id=command.id, ok=False, error=str(exc), status=self._snapshot())
        return CommandResult(id=command.id, ok=True, status=self._snapshot())

    def _active(self) -> bool:
        return self._hv.state()[0] in ACTIVE_STATES

    # -- live migration (qemu mode) --------------------------------------------------------

    def _start_migration(self, command: MigrateTo) -> None:
        if self._config.domain_type is DomainType.TEST:
            raise HypervisorError("the test driver cannot migrate (test mode simulates it)")
        if self._migration is not None:
            raise HypervisorError("a migration is already running")
        if self._shutdown_deadline is not None or self._final is not None:
            raise HypervisorError("the domain is shutting down")
        if not self._active():
            raise HypervisorError("the domain is not running")
        self._migration = command
        self._migration_abort = None
        self._spawn(self._migrate(command))

    def _abort_migration(self, why: str) -> None:
        if self._migration is None:
            raise HypervisorError("no migration is running")
        self._migration_abort = why
        self._hv.abort_job()

    async def _migrate(self, command: MigrateTo) -> None:
        loop = asyncio.get_running_loop()
        options = MigrationOptions(
            migration_uri=command.migration_uri,
            bandwidth_bytes_per_second=command.bandwidth_bytes_per_second,
            allow_auto_converge=command.allow_auto_converge,
            allow_post_copy=command.allow_post_copy,
        )
        started = loop.time()
        gib = max(1.0, guest_memory_bytes(self._config.vmi) / 2**30)
        completion_deadline = (
            started + command.completion_timeout_per_gib * gib
            if command.completion_timeout_per_gib > 0
            else None
        )
        mode = "PreCopy"
        least_remaining: int | None = None
        last_progress = started
        # migrateToURI3 blocks for the whole migration: a worker thread runs it while the
        # loop keeps serving the socket, libvirt's events and the progress polls.
        job = asyncio.ensure_future(
            asyncio.to_thread(self._hv.migrate, command.target_uri, options)
        )
        while not job.done():
            await asyncio.wait({job}, timeout=command.progress_interval_seconds)
            if job.done():
                break
            try:
                progress = await asyncio.to_thread(self._hv.job_progress)
            except HypervisorError:
                continue  # the job may be finishing right now
            if not progress.active:
                continue
            self._broadcast(
                MigrationProgress(
                    migration_uid=command.migration_uid,
                    processed=progress.data_processed,
                    remaining=progress.data_remaining,
                    total=progress.data_total,
                    elapsed_ms=progress.elapsed_ms,
                    dirty_rate=progress.dirty_rate,
                    iterations=progress.iterations,
                    mode=mode,
                )
            )
            now = loop.time()
            if least_remaining is None or progress.data_remaining < least_remaining:
                least_remaining, last_progress = progress.data_remaining, now
            if self._migration_abort is not None or mode == "PostCopy":
                continue
            try:
                timeout = command.progress_timeout_seconds
                if timeout > 0 and now - last_progress > timeout:
                    self._abort_migration(f"no progress for {timeout}s (progressTimeout)")
                elif completion_deadline is not None and now > completion_deadline:
                    if command.allow_post_copy:
                        self._hv.switch_to_post_copy()
                        mode = "PostCopy"
                    else:
                        self._abort_migration(
                            f"not completed within {command.completion_timeout_per_gib}s "
                            "per GiB (completionTimeoutPerGiB)"
                        )
            except HypervisorError as exc:
                log.warning("migration of %s: %s", self._domain_name, exc)
        error: str | None = None
        try:
            job.result()
        except HypervisorError as exc:
            error = self._migration_abort or str(exc)
        ok = error is None
        if ok:
            self._owns_disks = False  # the target's launcher owns them now
        log.info("migration of %s to %s: %s", self._domain_name, command.target_uri, error or "ok")
        self._broadcast(
            MigrationResult(
                migration_uid=command.migration_uid,
                ok=ok,
                aborted=not ok and self._migration_abort is not None,
                error=error,
                duration_seconds=loop.time() - started,
                mode=mode,
            )
        )
        self._migration = None
        if self._deferred_finish is not None:
            state, reason, event = self._deferred_finish
            self._deferred_finish = None
            self._finish(state, reason, event)

    def _on_signal(self, sig: int) -> None:
        log.info("signal %s: graceful shutdown, grace %ss", sig, self._termination_grace)
        self._request_shutdown(self._termination_grace)

    def _request_shutdown(self, grace: float) -> None:
        if self._migration is not None and self._migration_abort is None:
            # A guest being stopped does not move; the stop proceeds once it is back.
            with contextlib.suppress(HypervisorError):
                self._abort_migration("the VMI is being stopped")
        # A later request may shorten the grace period, never extend it (as in KubeVirt).
        deadline = asyncio.get_running_loop().time() + max(0.0, grace)
        if self._shutdown_deadline is None or deadline < self._shutdown_deadline:
            self._shutdown_deadline = deadline
            self._shutdown_wakeup.set()
        if self._shutdown_task is None:
            self._shutdown_task = self._spawn(self._graceful_shutdown())

    async def _graceful_shutdown(self) -> None:
        loop = asyncio.get_running_loop()
        acpi_sent = False
        while not self._domain_gone.is_set():
            if not self._active():
                # Never started (or already off without an event): nothing to wait for.
                state, reason = self._hv.state()
                self._finish(state, reason, None)
                return
            assert self._shutdown_deadline is not None
            remaining = self._shutdown_deadline - loop.time()
            if remaining <= 0:
                # Only a guest that was asked and did not comply "ran out" of grace;
                # a zero grace period is a deliberate immediate stop.
                self._grace_expired = acpi_sent
                with contextlib.suppress(HypervisorError):  # it may have just stopped
                    self._hv.destroy()
                await self._domain_gone.wait()
                return
            try:
                self._hv.shutdown()
                acpi_sent = True
            except HypervisorError as exc:
                log.warning("ACPI shutdown of %s failed: %s", self._domain_name, exc)
            self._shutdown_wakeup.clear()
            await _wait_any(
                (self._domain_gone, self._shutdown_wakeup), min(ACPI_RESEND_SECONDS, remaining)
            )

    def _spawn(self, coro: Any) -> asyncio.Task[None]:
        task: asyncio.Task[None] = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)  # keep a reference: the loop holds tasks only weakly
        task.add_done_callback(self._tasks.discard)
        return task

    @staticmethod
    def _claim_socket(sock: str) -> None:
        pid = rundir.read_pid(rundir.pidfile_path(sock))
        if pid is not None and pid != os.getpid() and rundir.pid_alive(pid):
            raise RuntimeError(f"launcher pid {pid} already serves {sock}")
        with contextlib.suppress(FileNotFoundError):
            os.unlink(sock)  # stale, from a launcher that died without cleaning up


async def _wait_any(events: tuple[asyncio.Event, ...], timeout: float) -> None:
    waiters = [asyncio.ensure_future(event.wait()) for event in events]
    try:
        await asyncio.wait(waiters, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for waiter in waiters:
            waiter.cancel()


def configure_logging() -> None:
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s", force=True
    )


def run_launcher(config: LauncherConfig) -> int:
    """Run one launcher to completion in this process; returns the exit code."""
    return asyncio.run(Launcher(config).run())
