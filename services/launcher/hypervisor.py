"""The launcher's hypervisor port and its libvirt adapter.

`LibvirtHypervisor` serves both modes: `test:///default` (the embedded test driver: in memory,
private to this process, no daemon; connected as `TEST_NODE_XML`'s empty host) and `qemu`
(a node's libvirtd, e.g. `qemu+unix:///system?socket=<dir>/libvirt-sock`); only the connect
URI differs. Live migration (`migrate`, `job_progress`, `abort_job`) needs the QEMU driver:
the test driver has none, so in test mode the choreography simulates it.

Lifecycle events are delivered on the asyncio loop through libvirt-python's `libvirtaio`
event implementation, so callbacks never race with the launcher's own calls (no thread).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import urllib.parse
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

import libvirt
import libvirtaio
import msgspec

from services.launcher.domain_state import DomainEvent, DomainState, StateReason
from services.launcher.uris import TEST_URI

#: What a connection to TEST_URI opens: the test driver with the host this file describes,
#: and nothing on it. test:///default builds a whole fake host per connection (a running
#: domain, a network, a storage pool, interfaces, ~1 ms of CPU) that no launcher uses.
TEST_NODE_XML = Path(__file__).with_name("test_node.xml")


def connect_uri(uri: str) -> str:
    """The URI libvirt opens for `uri` (TEST_URI stays the mode's name everywhere else)."""
    if uri == TEST_URI:
        return "test://" + urllib.parse.quote(str(TEST_NODE_XML))
    return uri


EventCallback = Callable[[DomainEvent, StateReason], None]


class HypervisorError(Exception):
    """A hypervisor call failed; the message is libvirt's."""


class DomainInfo(msgspec.Struct, kw_only=True):
    state: DomainState
    reason: StateReason
    max_memory_kib: int
    memory_kib: int
    vcpus: int
    cpu_time_ns: int


class MigrationOptions(msgspec.Struct, kw_only=True):
    #: Where QEMU sends the memory; libvirt's `migration_address` may not be a local
    #: address, so several nodes on one machine pass it per call.
    migration_uri: str = "tcp://127.0.0.1"
    #: 0: unlimited.
    bandwidth_bytes_per_second: int = 0
    allow_auto_converge: bool = False
    allow_post_copy: bool = False
    #: The disks sit on a local filesystem that source and target both see (the nodes
    #: share one machine's disk dir), which libvirt cannot tell from a private one and
    #: calls unsafe; with cache=none it is as safe as shared storage.
    disks_on_shared_local_dir: bool = True


class JobProgress(msgspec.Struct, kw_only=True):
    """A snapshot of the migration job (libvirt's jobStats), in bytes."""

    active: bool
    data_processed: int = 0
    data_remaining: int = 0
    data_total: int = 0
    memory_processed: int = 0
    memory_remaining: int = 0
    memory_total: int = 0
    elapsed_ms: int = 0
    #: Dirty pages per second, what makes a migration not converge.
    dirty_rate: int = 0
    iterations: int = 0


class Hypervisor(Protocol):
    """One domain's lifecycle, as the launcher needs it."""

    uri: str

    def open(self, on_event: EventCallback) -> None:
        """Connect; call from inside the running asyncio loop that receives the events."""

    def define(self, xml: str) -> None: ...
    def attach(self, uuid: str) -> bool:
        """Watch an existing domain (e.g. arriving by migration) instead of defining one;
        False while it does not exist yet (its events are watched from now on anyway)."""

    def start(self, paused: bool = False) -> None: ...
    def pause(self) -> None: ...
    def resume(self) -> None: ...
    def soft_reboot(self) -> None: ...
    def shutdown(self) -> None:
        """Ask the guest to power off (ACPI); returns before the guest acts."""

    def destroy(self) -> None: ...
    def state(self) -> tuple[DomainState, StateReason]: ...
    def info(self) -> DomainInfo: ...
    def pid(self) -> int | None: ...
    def migrate(self, target_uri: str, options: MigrationOptions) -> None:
        """Live-migrate to another libvirtd; blocks until done (run it in a thread)."""

    def job_progress(self) -> JobProgress: ...
    def abort_job(self) -> None: ...
    def switch_to_post_copy(self) -> None: ...
    def close(self) -> None:
        """Undefine the domain (when stopped) and disconnect."""


_STATES = {
    libvirt.VIR_DOMAIN_NOSTATE: DomainState.NO_STATE,
    libvirt.VIR_DOMAIN_RUNNING: DomainState.RUNNING,
    libvirt.VIR_DOMAIN_BLOCKED: DomainState.BLOCKED,
    libvirt.VIR_DOMAIN_PAUSED: DomainState.PAUSED,
    libvirt.VIR_DOMAIN_SHUTDOWN: DomainState.SHUTDOWN,
    libvirt.VIR_DOMAIN_SHUTOFF: DomainState.SHUTOFF,
    libvirt.VIR_DOMAIN_CRASHED: DomainState.CRASHED,
    libvirt.VIR_DOMAIN_PMSUSPENDED: DomainState.PM_SUSPENDED,
}

# (state, libvirt reason code) → reason; codes per state from libvirt's virDomain*Reason.
_STATE_REASONS: dict[DomainState, dict[int, StateReason]] = {
    DomainState.RUNNING: {
        libvirt.VIR_DOMAIN_RUNNING_BOOTED: StateReason.BOOTED,
        libvirt.VIR_DOMAIN_RUNNING_MIGRATED: StateReason.MIGRATED,
        libvirt.VIR_DOMAIN_RUNNING_RESTORED: StateReason.RESTORED,
        libvirt.VIR_DOMAIN_RUNNING_UNPAUSED: StateReason.UNPAUSED,
        libvirt.VIR_DOMAIN_RUNNING_MIGRATION_CANCELED: StateReason.MIGRATION_CANCELED,
        libvirt.VIR_DOMAIN_RUNNING_WAKEUP: StateReason.WAKEUP,
    },
    DomainState.PAUSED: {
        libvirt.VIR_DOMAIN_PAUSED_USER: StateReason.USER,
        libvirt.VIR_DOMAIN_PAUSED_MIGRATION: StateReason.MIGRATION,
        libvirt.VIR_DOMAIN_PAUSED_IOERROR: StateReason.IO_ERROR,
        libvirt.VIR_DOMAIN_PAUSED_WATCHDOG: StateReason.WATCHDOG,
        libvirt.VIR_DOMAIN_PAUSED_SHUTTING_DOWN: StateReason.SHUTTING_DOWN,
        libvirt.VIR_DOMAIN_PAUSED_STARTING_UP: StateReason.STARTING_UP,
    },
    DomainState.SHUTOFF: {
        libvirt.VIR_DOMAIN_SHUTOFF_SHUTDOWN: StateReason.SHUTDOWN,
        libvirt.VIR_DOMAIN_SHUTOFF_DESTROYED: StateReason.DESTROYED,
        libvirt.VIR_DOMAIN_SHUTOFF_CRASHED: StateReason.CRASHED,
        libvirt.VIR_DOMAIN_SHUTOFF_MIGRATED: StateReason.MIGRATED,
        libvirt.VIR_DOMAIN_SHUTOFF_SAVED: StateReason.SAVED,
        libvirt.VIR_DOMAIN_SHUTOFF_FAILED: StateReason.FAILED,
    },
    DomainState.CRASHED: {libvirt.VIR_DOMAIN_CRASHED_PANICKED: StateReason.PANICKED},
}

_EVENTS = {
    libvirt.VIR_DOMAIN_EVENT_DEFINED: DomainEvent.DEFINED,
    libvirt.VIR_DOMAIN_EVENT_UNDEFINED: DomainEvent.UNDEFINED,
    libvirt.VIR_DOMAIN_EVENT_STARTED: DomainEvent.STARTED,
    libvirt.VIR_DOMAIN_EVENT_SUSPENDED: DomainEvent.SUSPENDED,
    libvirt.VIR_DOMAIN_EVENT_RESUMED: DomainEvent.RESUMED,
    libvirt.VIR_DOMAIN_EVENT_STOPPED: DomainEvent.STOPPED,
    libvirt.VIR_DOMAIN_EVENT_SHUTDOWN: DomainEvent.SHUTDOWN,
    libvirt.VIR_DOMAIN_EVENT_PMSUSPENDED: DomainEvent.PM_SUSPENDED,
    libvirt.VIR_DOMAIN_EVENT_CRASHED: DomainEvent.CRASHED,
}

# (event, libvirt detail code) → reason, for the events whose detail says why.
_EVENT_REASONS: dict[DomainEvent, dict[int, StateReason]] = {
    DomainEvent.STARTED: {
        libvirt.VIR_DOMAIN_EVENT_STARTED_BOOTED: StateReason.BOOTED,
        libvirt.VIR_DOMAIN_EVENT_STARTED_MIGRATED: StateReason.MIGRATED,
        libvirt.VIR_DOMAIN_EVENT_STARTED_RESTORED: StateReason.RESTORED,
        libvirt.VIR_DOMAIN_EVENT_STARTED_WAKEUP: StateReason.WAKEUP,
    },
    DomainEvent.SUSPENDED: {
        libvirt.VIR_DOMAIN_EVENT_SUSPENDED_PAUSED: StateReason.USER,
        libvirt.VIR_DOMAIN_EVENT_SUSPENDED_MIGRATED: StateReason.MIGRATION,
        libvirt.VIR_DOMAIN_EVENT_SUSPENDED_IOERROR: StateReason.IO_ERROR,
        libvirt.VIR_DOMAIN_EVENT_SUSPENDED_WATCHDOG: StateReason.WATCHDOG,
    },
    DomainEvent.RESUMED: {
        libvirt.VIR_DOMAIN_EVENT_RESUMED_UNPAUSED: StateReason.UNPAUSED,
        libvirt.VIR_DOMAIN_EVENT_RESUMED_MIGRATED: StateReason.MIGRATED,
    },
    DomainEvent.STOPPED: {
        libvirt.VIR_DOMAIN_EVENT_STOPPED_SHUTDOWN: StateReason.SHUTDOWN,
        libvirt.VIR_DOMAIN_EVENT_STOPPED_DESTROYED: StateReason.DESTROYED,
        libvirt.VIR_DOMAIN_EVENT_STOPPED_CRASHED: StateReason.CRASHED,
        libvirt.VIR_DOMAIN_EVENT_STOPPED_MIGRATED: StateReason.MIGRATED,
        libvirt.VIR_DOMAIN_EVENT_STOPPED_SAVED: StateReason.SAVED,
        libvirt.VIR_DOMAIN_EVENT_STOPPED_FAILED: StateReason.FAILED,
    },
    DomainEvent.CRASHED: {libvirt.VIR_DOMAIN_EVENT_CRASHED_PANICKED: StateReason.PANICKED},
}

# libvirt accepts exactly one event implementation per process, registered before any
# connection opens; the zygote never registers one, so each forked launcher does.
_event_impl_registered = False


def _register_event_impl() -> None:
    global _event_impl_registered
    if not _event_impl_registered:
        libvirtaio.virEventRegisterAsyncIOImpl(loop=asyncio.get_running_loop())
        _event_impl_registered = True


def _quiet_libvirt_errors(_ctx: Any, _err: Any) -> None:
    """libvirt prints every error to stderr by default; ours are raised and reported."""


class LibvirtHypervisor:
    def __init__(self, uri: str = TEST_URI, pid_dir: str | None = None) -> None:
        """pid_dir: where the node's libvirtd writes `<domain>.pid` for each QEMU (seen
        from outside its mount namespace); None when there is no process (test driver)."""
        self.uri = uri
        self._pid_dir = Path(pid_dir) if pid_dir else None
        # The test driver rejects flags it has no use for (START_PAUSED, ACPI_POWER_BTN).
        self._is_test = uri.startswith("test:")
        self._conn: Any = None
        self._dom: Any = None
        self._uuid: str | None = None
        self._on_event: EventCallback | None = None
        self._callback_id: int | None = None

    def open(self, on_event: EventCallback) -> None:
        _register_event_impl()
        libvirt.registerErrorHandler(_quiet_libvirt_errors, None)
        self._on_event = on_event
        self._conn = self._call(libvirt.open, connect_uri(self.uri))
        # Registered for all domains (not just ours) so the Defined event is not missed;
        # _dispatch filters on our uuid.
        self._callback_id = self._conn.domainEventRegisterAny(
            None, libvirt.VIR_DOMAIN_EVENT_ID_LIFECYCLE, self._dispatch, None
        )

    def define(self, xml: str) -> None:
        self._dom = self._call(self._conn.defineXML, xml)
        self._uuid = self._dom.UUIDString()

    def attach(self, uuid: str) -> bool:
        self._uuid = uuid  # events of this domain are dispatched from now on
        try:
            self._dom = self._conn.lookupByUUIDString(uuid)
        except libvirt.libvirtError:
            return False
        return True

    def start(self, paused: bool = False) -> None:
        if paused and self._is_test:
            self._call(self._domain().create)
            self._call(self._domain().suspend)
        else:
            flags = libvirt.VIR_DOMAIN_START_PAUSED if paused else 0
            self._call(self._domain().createWithFlags, flags)

    def pause(self) -> None:
        self._call(self._domain().suspend)

    def resume(self) -> None:
        self._call(self._domain().resume)

    def soft_reboot(self) -> None:
        self._call(self._domain().reboot, libvirt.VIR_DOMAIN_REBOOT_ACPI_POWER_BTN)

    def shutdown(self) -> None:
        flags = 0 if self._is_test else libvirt.VIR_DOMAIN_SHUTDOWN_ACPI_POWER_BTN
        self._call(self._domain().shutdownFlags, flags)

    def destroy(self) -> None:
        self._call(self._domain().destroy)

    def state(self) -> tuple[DomainState, StateReason]:
        if self._dom is None:
            return DomainState.NO_STATE, StateReason.UNKNOWN
        code, reason = self._call(self._dom.state)
        return _state(code, reason)

    def info(self) -> DomainInfo:
        _state_code, max_mem, mem, vcpus, cpu_time = self._call(self._domain().info)
        state, reason = self.state()
        return DomainInfo(
            state=state,
            reason=reason,
            max_memory_kib=max_mem,
            memory_kib=mem,
            vcpus=vcpus,
            cpu_time_ns=cpu_time,
        )

    def pid(self) -> int | None:
        """QEMU's pid while the domain is active (libvirt has no API for it: its pidfile)."""
        if self._pid_dir is None or self._dom is None:
            return None
        try:
            if not self._dom.isActive():
                return None
            pid = int((self._pid_dir / f"{self._dom.name()}.pid").read_text().strip())
        except (libvirt.libvirtError, OSError, ValueError):
            return None
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, 0)
            return pid
        return None

    def migrate(self, target_uri: str, options: MigrationOptions) -> None:
        if self._is_test:
            raise HypervisorError("the test driver cannot migrate (test mode simulates it)")
        params: dict[str, Any] = {libvirt.VIR_MIGRATE_PARAM_URI: options.migration_uri}
        if options.bandwidth_bytes_per_second > 0:
            # libvirt's bandwidth unit is MiB/s; never round a throttle down to unlimited.
            params[libvirt.VIR_MIGRATE_PARAM_BANDWIDTH] = max(
                1, options.bandwidth_bytes_per_second // (1024 * 1024)
            )
        flags = (
            libvirt.VIR_MIGRATE_LIVE
            | libvirt.VIR_MIGRATE_PEER2PEER
            | libvirt.VIR_MIGRATE_PERSIST_DEST
            | libvirt.VIR_MIGRATE_UNDEFINE_SOURCE
        )
        if options.disks_on_shared_local_dir:
            flags |= libvirt.VIR_MIGRATE_UNSAFE
        if options.allow_auto_converge:
            flags |= libvirt.VIR_MIGRATE_AUTO_CONVERGE
        if options.allow_post_copy:
            flags |= libvirt.VIR_MIGRATE_POSTCOPY
        self._call(self._domain().migrateToURI3, target_uri, params, flags)

    def job_progress(self) -> JobProgress:
        stats = self._call(self._domain().jobStats)
        active = stats.get("type", libvirt.VIR_DOMAIN_JOB_NONE) not in (
            libvirt.VIR_DOMAIN_JOB_NONE,
            libvirt.VIR_DOMAIN_JOB_COMPLETED,
            libvirt.VIR_DOMAIN_JOB_FAILED,
            libvirt.VIR_DOMAIN_JOB_CANCELLED,
        )
        return JobProgress(
            active=active,
            data_processed=int(stats.get("data_processed", 0)),
            data_remaining=int(stats.get("data_remaining", 0)),
            data_total=int(stats.get("data_total", 0)),
            memory_processed=int(stats.get("memory_processed", 0)),
            memory_remaining=int(stats.get("memory_remaining", 0)),
            memory_total=int(stats.get("memory_total", 0)),
            elapsed_ms=int(stats.get("time_elapsed", 0)),
            dirty_rate=int(stats.get("memory_dirty_rate", 0)),
            iterations=int(stats.get("memory_iteration", 0)),
        )

    def abort_job(self) -> None:
        self._call(self._domain().abortJob)

    def switch_to_post_copy(self) -> None:
        self._call(self._domain().migrateStartPostCopy, 0)

    def close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is None:
            return
        try:
            if self._callback_id is not None:
                conn.domainEventDeregisterAny(self._callback_id)
            if self._dom is not None and not self._dom.isActive():
                self._dom.undefine()
        except libvirt.libvirtError:
            pass  # best effort: the process is about to exit anyway
        finally:
            self._dom = None
            conn.close()

    def _domain(self) -> Any:
        if self._dom is None:
            raise HypervisorError("domain is not defined")
        return self._dom

    def _dispatch(self, _conn: Any, dom: Any, event: int, detail: int, _opaque: Any) -> None:
        if self._on_event is None or self._uuid is None or dom.UUIDString() != self._uuid:
            return
        if self._dom is None:
            self._dom = dom  # attached: the domain arrived (incoming migration)
        kind = _EVENTS.get(event)
        if kind is None:
            return
        self._on_event(kind, _EVENT_REASONS.get(kind, {}).get(detail, StateReason.UNKNOWN))

    @staticmethod
    def _call(fn: Callable[..., Any], *args: Any) -> Any:
        try:
            return fn(*args)
        except libvirt.libvirtError as exc:
            raise HypervisorError(exc.get_error_message() or str(exc)) from exc


def _state(code: int, reason: int) -> tuple[DomainState, StateReason]:
    state = _STATES.get(code, DomainState.NO_STATE)
    return state, _STATE_REASONS.get(state, {}).get(reason, StateReason.UNKNOWN)
