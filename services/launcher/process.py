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

The rules live in lifecycle.py, a pure state machine; this module is its shell: it turns
the socket, libvirt's events, timers and signals into the machine's inputs (each with the
time and the domain's queried state) and performs the actions it returns.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import socket
import time
from collections import deque
from typing import Any, assert_never

import msgspec

from events.catalog import Attachment
from host import pod_network
from services.launcher import lifecycle as lc
from services.launcher import rundir, storage
from services.launcher.domain_state import DomainEvent, DomainState, StateReason
from services.launcher.domain_xml import (
    DEFAULT_DISK_DIR,
    DomainType,
    attachments_of,
    build_domain_xml,
    disk_xml_of,
    domain_name,
    firmware_uuid,
    guest_memory_bytes,
    hotplug_disk_xml,
    pod_address_of,
    pod_interface,
)
from services.launcher.guest_network import guest_interfaces, taps
from services.launcher.hypervisor import (
    TEST_URI,
    Hypervisor,
    HypervisorError,
    LibvirtHypervisor,
    MigrationOptions,
)
from services.launcher.protocol import (
    CommandResult,
    Hello,
    Report,
    decode_command,
    encode,
)

log = logging.getLogger("virtstream.launcher")

# Where the setup's failure is reported instead of raised (the VMI fails, with this message).
_SETUP_ERRORS = (HypervisorError, ValueError, KeyError, TypeError, OSError)
_LOG_LEVELS = {"info": logging.INFO, "warning": logging.WARNING, "error": logging.ERROR}
#: How often the guest agent is asked for the guest's addresses while it is connected.
INTERFACE_POLL_SECONDS = 3.0


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
    #: The image catalogue (images.py); None: its default dir.
    image_dir: str | None = None
    default_disk_size: str = storage.DEFAULT_DISK_SIZE
    #: The node's QEMU pidfile dir (ops.node_libvirtd.NodeRuntime.qemu_pid_dir).
    qemu_pid_dir: str | None = None
    #: Attach to a domain arriving by live migration instead of defining one.
    migration_target: bool = False
    #: The cluster's pod network (host/pod_network.py: its dir) and this node's name in it;
    #: with `pod_address` (the VMI's, from its scheduling event) the guest's NIC is a tap
    #: on the node's bridge. None: QEMU's user-mode networking.
    pod_network_dir: str | None = None
    node: str = ""
    pod_address: str = ""
    #: the VMI's addresses on secondary networks (its scheduling event's): each of their
    #: interfaces is a tap on that network's bridge in the pod network's namespace
    attachments: tuple[Attachment, ...] = ()
    #: A migration target gives up (and exits) when no domain arrives within this time.
    migration_target_timeout_seconds: float = 600.0
    #: The socket, already bound and listening, inherited from the zygote (see
    #: `listen_on`); None: the launcher claims and binds `socket_path` itself.
    listen_fd: int | None = None


def listen_on(sock: str) -> socket.socket:
    """Claim `sock` (refused while a live launcher serves it), bind and listen. A handler
    connecting before the launcher is ready waits in the backlog for its Hello instead of
    polling for a socket that does not exist yet."""
    pid = rundir.read_pid(rundir.pidfile_path(sock))
    if pid is not None and pid != os.getpid() and rundir.pid_alive(pid):
        raise RuntimeError(f"launcher pid {pid} already serves {sock}")
    with contextlib.suppress(FileNotFoundError):
        os.unlink(sock)  # stale, from a launcher that died without cleaning up
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        listener.bind(sock)
        os.chmod(sock, 0o600)
        listener.listen(16)
    except BaseException:
        listener.close()
        raise
    return listener


class Launcher:
    def __init__(self, config: LauncherConfig, hypervisor: Hypervisor | None = None) -> None:
        self._config = config
        self._hv: Hypervisor = hypervisor or LibvirtHypervisor(
            config.hypervisor_uri, pid_dir=config.qemu_pid_dir
        )
        self._domain_name = domain_name(config.vmi)
        self._state = lc.initial(self._settings())
        self._inbox: deque[lc.Input] = deque()
        self._stepping = False
        self._writers: dict[int, asyncio.StreamWriter] = {}
        #: The handlers that get broadcasts (connected while the domain was not gone).
        self._subscribed: set[int] = set()
        self._next_client = 0
        self._timers: dict[lc.Timer, asyncio.TimerHandle] = {}
        self._disks_prepared = False
        self._exit_code: int | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._serving: set[asyncio.Task[Any]] = set()
        self._plugging = asyncio.Lock()
        self._attached: dict[str, str] = {}  # network → definition, of the taps plugged
        # Created in run() so it binds to the loop that runs the launcher.
        self._exited: asyncio.Event

    def _settings(self) -> lc.Settings:
        config = self._config
        spec = config.vmi.get("spec") or {}
        grace = spec.get("terminationGracePeriodSeconds")
        meta = config.vmi.get("metadata") or {}
        try:
            memory: int | None = guest_memory_bytes(config.vmi)
        except (ValueError, TypeError):
            memory = None  # the define fails and reports it; no migration can start
        return lc.Settings(
            domain_name=self._domain_name,
            hello=Hello(
                vmi_uid=str(meta.get("uid") or ""),
                domain_name=self._domain_name,
                pid=os.getpid(),
                hypervisor_uri=self._hv.uri,
                domain_type=str(config.domain_type),
                migration_target=config.migration_target,
            ),
            termination_grace_seconds=(
                lc.DEFAULT_TERMINATION_GRACE_SECONDS if grace is None else grace
            ),
            final_status_linger_seconds=config.final_status_linger_seconds,
            migration_target=config.migration_target,
            migration_target_timeout_seconds=config.migration_target_timeout_seconds,
            test_driver=config.domain_type is DomainType.TEST,
            guest_memory_bytes=memory,
        )

    async def run(self) -> int:
        loop = asyncio.get_running_loop()
        self._exited = asyncio.Event()
        sock = self._config.socket_path
        if self._config.listen_fd is not None:  # bound by the zygote
            listener = socket.socket(fileno=self._config.listen_fd)
        else:
            # Listen before the (slower) libvirt setup, as the zygote does for its children.
            listener = listen_on(sock)
        # The zygote writes it as it forks; here only if it has not (yet), in case the
        # zygote died in between (a handler's fence kills the zygote, then every launcher
        # with a pidfile). A read is cheaper than writing again: a rename takes the run
        # dir's lock, which every launcher starting on the node contends for.
        if rundir.read_pid(rundir.pidfile_path(sock)) != os.getpid():
            rundir.write_pidfile(sock, os.getpid())

        server: asyncio.Server | None = None
        try:
            self._feed(lc.Boot())  # connects and defines (or attaches) synchronously
            if self._config.domain_type is not DomainType.TEST:
                self._spawn(self._poll_interfaces())
            server = await asyncio.start_unix_server(self._serve, sock=listener)
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.add_signal_handler(sig, self._on_signal, sig)
            log.info("launcher %s ready on %s (pid %d)", self._domain_name, sock, os.getpid())
            await self._exited.wait()
        finally:
            # Socket and pidfile go first: a handler listing the run dir must not re-attach
            # to a launcher that is on its way out.
            for path in (sock, rundir.pidfile_path(sock)):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(path)
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.remove_signal_handler(sig)
            for handle in self._timers.values():
                handle.cancel()
            if server is not None:
                server.close()
            else:
                listener.close()
            for writer in list(self._writers.values()):
                writer.close()
            # Let connection handlers see the close and end, rather than be cancelled
            # mid-read by asyncio.run (which logs that as an error).
            if self._serving:
                await asyncio.wait(self._serving, timeout=1.0)
            self._hv.close()
            self._unplug()
            if self._state.owns_disks:
                storage.remove_disks(self._domain_name, self._config.disk_dir)
        log.info("launcher %s exits: %s", self._domain_name, self._state.final)
        return self._exit_code or 0

    # -- the machine ----------------------------------------------------------------------

    def _feed(self, inp: lc.Input) -> None:
        """Step the machine and perform its actions, run to completion: inputs that arise
        meanwhile (a hypervisor call's outcome) queue up and are stepped in order."""
        self._inbox.append(inp)
        if self._stepping:
            return
        self._stepping = True
        try:
            while self._inbox:
                self._state, actions = lc.step(self._state, self._inbox.popleft())
                for action in actions:
                    self._perform(action)
        finally:
            self._stepping = False
            self._inbox.clear()  # only non-empty when a step raised

    def _seen(self) -> lc.Seen:
        try:
            state, reason = self._hv.state()
        except HypervisorError:
            state, reason = DomainState.NO_STATE, StateReason.UNKNOWN  # gone under us
        return lc.Seen(state=state, reason=reason, pid=self._hv.pid(), wall=time.time())

    @staticmethod
    def _now() -> float:
        return asyncio.get_running_loop().time()

    def _perform(self, action: lc.Action) -> None:
        match action:
            case lc.DefineDomain() | lc.AttachIncoming():
                self._set_up(action)
            case (
                lc.StartDomain()
                | lc.SuspendDomain()
                | lc.ResumeDomain()
                | lc.RebootDomain()
                | lc.ShutdownDomain()
                | lc.DestroyDomain()
                | lc.AttachDisk()
                | lc.DetachDisk()
                | lc.AbortJob()
                | lc.SwitchToPostCopy()
            ):
                self._call(action)
            case lc.MigrateDomain():
                self._spawn(self._migrate(action))
            case lc.PollMigration():
                self._spawn(self._poll_migration(action))
            case lc.ReportTo(client=client, report=report):
                self._send(client, report)
            case lc.Broadcast(report=report):
                for client in list(self._subscribed):
                    self._send(client, report)
            case lc.Subscribe(client=client):
                self._subscribed.add(client)
            case lc.DeliverFinal():
                self._spawn(self._deliver_final(action))
            case lc.ArmTimer(timer=timer, at=at):
                if (pending := self._timers.pop(timer, None)) is not None:
                    pending.cancel()
                self._timers[timer] = asyncio.get_running_loop().call_at(at, self._fire, timer)
            case lc.Log(level=level, message=message):
                log.log(_LOG_LEVELS[level], "%s", message)
            case lc.Exit(code=code):
                self._exit_code = code
                self._exited.set()
            case _:
                assert_never(action)

    # -- hypervisor -----------------------------------------------------------------------

    def _set_up(self, action: lc.DefineDomain | lc.AttachIncoming) -> None:
        error: lc.CallError | None = None
        arrived = False
        try:
            self._hv.open(self._on_event)
            self._hv.watch_agent(self._on_agent)
            if isinstance(action, lc.AttachIncoming):
                arrived = self._hv.attach(firmware_uuid(self._config.vmi))
                if arrived:  # it ran here before this launcher saw it: its tap is to plug
                    self._spawn(self._plug(routed=True))
            else:
                self._hv.define(self._domain_xml())
        except _SETUP_ERRORS as exc:
            error = lc.CallError(type(exc).__name__, str(exc))
        self._feed(
            lc.SetupDone(
                now=self._now(),
                seen=self._seen(),
                error=error,
                disks_prepared=self._disks_prepared,
                arrived=arrived,
            )
        )

    def _domain_xml(self) -> str:
        config = self._config
        disk_paths = dict(config.disk_paths)
        omit: list[str] = []
        kernel_boot = None
        console_log = None
        if config.domain_type is not DomainType.TEST:
            kernel_boot = storage.kernel_boot(config.vmi, config.image_dir)
            console_log = str(rundir.console_log_path(config.socket_path))
            prepared = storage.prepare_disks(
                config.vmi,
                self._domain_name,
                config.disk_dir,
                image_dir=config.image_dir,
                default_size=config.default_disk_size,
            )
            self._disks_prepared = True
            disk_paths = prepared | disk_paths
            omit = storage.skipped_disks(config.vmi, disk_paths)
        return build_domain_xml(
            config.vmi,
            domain_type=config.domain_type,
            emulator=config.emulator,
            disk_dir=config.disk_dir,
            disk_paths=disk_paths,
            omit_disks=omit,
            kernel_boot=kernel_boot,
            console_log=console_log,
            pod_address=config.pod_address if config.pod_network_dir else "",
            attachments=config.attachments if config.pod_network_dir else (),
        )

    def _call(self, call: lc.HypervisorCall) -> None:
        hv = self._hv
        error: lc.CallError | None = None
        result = ""
        try:
            match call:
                case lc.StartDomain(paused=paused):
                    hv.start(paused)
                case lc.SuspendDomain():
                    hv.pause()
                case lc.ResumeDomain():
                    hv.resume()
                case lc.RebootDomain():
                    hv.soft_reboot()
                case lc.ShutdownDomain():
                    hv.shutdown()
                case lc.DestroyDomain():
                    hv.destroy()
                case lc.AttachDisk(volume=volume, disk=disk):
                    result = self._attach(volume, disk)
                case lc.DetachDisk(target=target):
                    found = disk_xml_of(hv.live_xml(), target)
                    if found is not None:
                        hv.detach_device(found)
                case lc.AbortJob():
                    hv.abort_job()
                case lc.SwitchToPostCopy():
                    hv.switch_to_post_copy()
                case _:
                    assert_never(call)
        except (HypervisorError, ValueError, OSError) as exc:
            error = lc.CallError(type(exc).__name__, str(exc))
        self._feed(lc.CallReturned(call=call, error=error, result=result, seen=self._seen()))

    def _attach(self, volume: dict[str, Any], disk: dict[str, Any]) -> str:
        """Prepare a hot-plugged volume's file and attach it; returns its target."""
        config = self._config
        path = storage.hotplug_volume(
            config.vmi, volume, self._domain_name, config.disk_dir,
            default_size=config.default_disk_size,
        )  # fmt: skip
        xml, target = hotplug_disk_xml(disk, path, self._hv.live_xml())
        self._hv.attach_device(xml)
        return target

    def _on_event(self, event: DomainEvent, reason: StateReason) -> None:
        arrived = event is DomainEvent.RESUMED and (
            reason is StateReason.MIGRATED or self._config.migration_target  # or post-copy's
        )
        if self._config.pod_network_dir is not None and (event is DomainEvent.STARTED or arrived):
            # An incoming guest's tap joins the bridge at once; its address is routed here
            # only once it runs here (RESUMED: after the migration, or at post-copy's switch).
            incoming = event is DomainEvent.STARTED and reason is StateReason.MIGRATED
            self._spawn(self._plug(routed=not incoming))
        stuck = self._hv.stuck() if event is DomainEvent.SUSPENDED else None
        self._feed(lc.DomainEventSeen(event=event, reason=reason, seen=self._seen(), stuck=stuck))
        if event is DomainEvent.RESUMED and reason is StateReason.MIGRATED:
            # arrived by migration: the agent's channel may be up already (no event for it)
            self._on_agent(self._hv.agent_connected())

    def _on_agent(self, connected: bool) -> None:
        self._feed(lc.AgentSeen(connected=connected, seen=self._seen()))

    async def _plug(self, routed: bool) -> None:
        """Put the guest's tap on this node's pod network bridge (and route its address
        here): `host/pod_network.py`. A failure is logged; the guest then has no network."""
        config = self._config
        if config.pod_network_dir is None or config.domain_type is DomainType.TEST:
            return
        async with self._plugging:  # one at a time: a start's and a resume's may overlap
            await self._plug_once(config.pod_network_dir, routed)

    async def _plug_once(self, network_dir: str, routed: bool) -> None:
        config = self._config
        uid = str((config.vmi.get("metadata") or {}).get("uid") or "")
        try:
            xml = await asyncio.to_thread(self._hv.live_xml)
            address, found = pod_address_of(xml), taps(xml)
            net = await asyncio.to_thread(pod_network.load, network_dir)
            tap = found.get(pod_interface(config.vmi) or "")
            if address and tap is not None:
                await asyncio.to_thread(
                    pod_network.plug, net, config.node, tap[0], uid, tap[1], address, routed
                )
                log.info("pod network: %s at %s on %s", tap[1], address, config.node)
        except (HypervisorError, OSError, pod_network.PodNetworkUnavailable, KeyError) as e:
            log.warning("pod network: the guest's tap not plugged: %s", e)
            return
        for a in attachments_of(xml):
            if (tap := found.get(a.network)) is None or not a.address:
                continue
            try:
                await asyncio.to_thread(
                    pod_network.attach,
                    net,
                    config.node,
                    tap[0],
                    uid,
                    tap[1],
                    **msgspec.structs.asdict(a),
                )
            except (OSError, pod_network.PodNetworkUnavailable) as e:
                log.warning("network %s: the guest's tap not plugged: %s", a.network, e)
                continue
            self._attached[a.network] = a.definition
            log.info("network %s (%s): %s at %s", a.network, a.definition, tap[1], a.address)

    def _unplug(self) -> None:
        config = self._config
        if config.pod_network_dir is None:
            return
        uid = str((config.vmi.get("metadata") or {}).get("uid") or "")
        with contextlib.suppress(OSError):
            net = pod_network.load(config.pod_network_dir)
            if config.pod_address:
                pod_network.unplug(net, config.node, uid)
            for network, definition in self._attached.items():
                pod_network.detach(net, config.node, uid, network, definition)

    async def _poll_interfaces(self) -> None:
        """While the guest agent is connected, what it says of the guest's NICs (KubeVirt's
        virt-launcher polls its agent as well: no event says an address came)."""
        while not self._exited.is_set():
            await asyncio.sleep(INTERFACE_POLL_SECONDS)
            if not self._state.agent_connected or self._state.final is not None:
                continue
            try:
                xml = await asyncio.to_thread(self._hv.live_xml)
                found = await asyncio.to_thread(self._hv.guest_addresses)
            except HypervisorError:
                continue  # the agent went away, or the domain: its events say so
            interfaces = guest_interfaces(xml, found)
            self._feed(lc.InterfacesSeen(interfaces=interfaces, seen=self._seen()))

    async def _migrate(self, action: lc.MigrateDomain) -> None:
        command = action.command
        options = MigrationOptions(
            migration_uri=command.migration_uri,
            bandwidth_bytes_per_second=command.bandwidth_bytes_per_second,
            allow_auto_converge=command.allow_auto_converge,
            allow_post_copy=command.allow_post_copy,
        )
        error: str | None = None
        # migrateToURI3 blocks for the whole migration: a worker thread runs it while the
        # loop keeps serving the socket, libvirt's events and the progress polls.
        try:
            await asyncio.to_thread(self._hv.migrate, command.target_uri, options)
        except HypervisorError as exc:
            error = str(exc)
        self._feed(
            lc.MigrationEnded(
                now=self._now(), migration=action.migration, error=error, seen=self._seen()
            )
        )

    async def _poll_migration(self, action: lc.PollMigration) -> None:
        progress: lc.JobProgress | None = None
        try:
            job = await asyncio.to_thread(self._hv.job_progress)
        except HypervisorError:
            pass  # the job may be finishing right now
        else:
            progress = lc.JobProgress(
                active=job.active,
                processed=job.data_processed,
                remaining=job.data_remaining,
                total=job.data_total,
                elapsed_ms=job.elapsed_ms,
                dirty_rate=job.dirty_rate,
                iterations=job.iterations,
            )
        self._feed(
            lc.MigrationPolled(now=self._now(), migration=action.migration, progress=progress)
        )

    # -- timers and signals ---------------------------------------------------------------

    def _fire(self, timer: lc.Timer) -> None:
        self._timers.pop(timer, None)
        self._feed(lc.TimerFired(now=self._now(), timer=timer, seen=self._seen()))

    def _on_signal(self, sig: int) -> None:
        self._feed(lc.Signalled(now=self._now(), signal=signal.Signals(sig).name))

    # -- clients --------------------------------------------------------------------------

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if task is not None:
            self._serving.add(task)
            task.add_done_callback(self._serving.discard)
        client = self._next_client = self._next_client + 1
        self._writers[client] = writer
        self._feed(lc.Connected(client=client, seen=self._seen()))
        if client not in self._subscribed:
            return  # the domain is gone: it got the final status and is hung up
        try:
            while line := await reader.readline():
                if not line.strip():
                    continue
                try:
                    command = decode_command(line)
                except (msgspec.DecodeError, msgspec.ValidationError) as exc:
                    self._send(client, CommandResult(id=0, ok=False, error=f"bad command: {exc}"))
                    continue
                self._feed(
                    lc.CommandReceived(
                        now=self._now(), client=client, command=command, seen=self._seen()
                    )
                )
        except (ConnectionError, ValueError):
            pass  # the handler went away or sent garbage; the launcher carries on
        finally:
            self._subscribed.discard(client)
            self._writers.pop(client, None)
            writer.close()

    def _send(self, client: int, report: Report) -> bool:
        writer = self._writers.get(client)
        if writer is None:
            return False
        if writer.is_closing():
            self._subscribed.discard(client)
            return False
        writer.write(encode(report))
        return True

    async def _deliver_final(self, action: lc.DeliverFinal) -> None:
        clients = list(self._subscribed) if action.client is None else [action.client]
        delivered = False
        for client in clients:
            writer = self._writers.get(client)
            if writer is None or not self._send(client, action.status):
                continue
            with contextlib.suppress(ConnectionError):
                await writer.drain()
                delivered = True
        # A handler that connected after the end has what it came for.
        if action.client is not None and (writer := self._writers.pop(action.client, None)):
            writer.close()
        self._feed(lc.FinalDelivered(now=self._now(), delivered=delivered, client=action.client))

    def _spawn(self, coro: Any) -> asyncio.Task[None]:
        task: asyncio.Task[None] = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)  # keep a reference: the loop holds tasks only weakly
        task.add_done_callback(self._tasks.discard)
        return task


def configure_logging() -> None:
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s", force=True
    )


def run_launcher(config: LauncherConfig) -> int:
    """Run one launcher to completion in this process; returns the exit code."""
    return asyncio.run(Launcher(config).run())
