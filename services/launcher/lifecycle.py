"""The launcher's domain lifecycle as a pure state machine.

`step(state, input) -> (state, actions)`. Inputs are what the shell (process.py) observed:
the start of the process, libvirt lifecycle events, handler connections and commands, the
outcome of the hypervisor calls it performed, timers, signals, the delivery of the final
status, and the migration job's progress and end. Actions are what the shell must do:
hypervisor calls, reports (to one handler or all), timers, logs and the exit.

No I/O and no clock: every input that needs the time carries it (`now`, the loop's
monotonic clock), and every input that needs the domain's current state carries what the
shell queried just before feeding it (`Seen`), because libvirt reports an event after the
fact and the rules need both (the event for the report, the query for "is it running").

A hypervisor call's outcome comes back as its own input (`CallReturned`), so a command's
reply, which carries the error and the state after the call, is decided here too.
"""

from __future__ import annotations

import enum
from typing import Any, Literal, assert_never

import msgspec
from msgspec.structs import replace

from services.launcher.domain_state import ACTIVE_STATES, DomainEvent, DomainState, StateReason
from services.launcher.protocol import (
    AbortMigration,
    AttachVolume,
    Command,
    CommandResult,
    Crash,
    DetachVolume,
    DomainStatus,
    GuestInterface,
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
)

#: KubeVirt re-sends ACPI shutdown at least this often: a booting OS can miss the signal.
#: Read at each tick (not bound at import) so a test may shorten it.
ACPI_RESEND_SECONDS = 5.0
DEFAULT_TERMINATION_GRACE_SECONDS = 30

PRE_COPY = "PreCopy"
POST_COPY = "PostCopy"

# The state a lifecycle event puts the domain in. Reports use this rather than the queried
# state, because events are dispatched after the fact and a query could already show a
# later state, breaking the order of the reported transitions.
EVENT_STATES = {
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

#: Events after which the domain is gone: the launcher reports its final status.
END_EVENTS = frozenset({DomainEvent.STOPPED, DomainEvent.UNDEFINED, DomainEvent.CRASHED})


class Timer(enum.StrEnum):
    #: Graceful shutdown: re-send ACPI, or destroy once the grace period has ended.
    SHUTDOWN = "shutdown"
    #: The final status found no handler: exit anyway when this fires.
    LINGER = "linger"
    #: A migration target whose domain has not arrived gives up.
    TARGET_TIMEOUT = "target-timeout"
    #: Poll the outgoing migration job's progress.
    MIGRATION_POLL = "migration-poll"


# -- configuration and observations --------------------------------------------------------


class Settings(msgspec.Struct, frozen=True, kw_only=True):
    domain_name: str
    #: Sent on every connect; `domain_pid` is filled from the observation.
    hello: Hello
    termination_grace_seconds: float = DEFAULT_TERMINATION_GRACE_SECONDS
    final_status_linger_seconds: float = 30.0
    migration_target: bool = False
    migration_target_timeout_seconds: float = 600.0
    #: libvirt's test driver: no live migration (test mode simulates it in the handler).
    test_driver: bool = True
    #: For completionTimeoutPerGiB; None when the VMI has none (it then never runs).
    guest_memory_bytes: int | None = None


class Seen(msgspec.Struct, frozen=True, kw_only=True):
    """The domain as the shell queried it when it fed the input."""

    state: DomainState
    reason: StateReason = StateReason.UNKNOWN
    #: QEMU's pid (None for the test driver, or before the domain exists).
    pid: int | None = None
    #: Unix time of the observation, for the reports' `observed_at`.
    wall: float = 0.0

    @property
    def active(self) -> bool:
        return self.state in ACTIVE_STATES


class CallError(msgspec.Struct, frozen=True):
    #: The exception's class name (the define failure's message starts with it).
    kind: str
    message: str


class ReplyTo(msgspec.Struct, frozen=True):
    client: int
    id: int


class JobProgress(msgspec.Struct, frozen=True, kw_only=True):
    """The migration job's statistics, in bytes (the libvirt-free subset of jobStats)."""

    active: bool
    processed: int = 0
    remaining: int = 0
    total: int = 0
    elapsed_ms: int = 0
    dirty_rate: int = 0
    iterations: int = 0


# -- actions -----------------------------------------------------------------------------
# Hypervisor calls. Each call whose outcome matters comes back as CallReturned.


class DefineDomain(msgspec.Struct, frozen=True):
    """Connect, prepare the disks (qemu mode) and define the domain; → SetupDone."""


class AttachIncoming(msgspec.Struct, frozen=True):
    """Connect and watch for the domain a live migration creates here; → SetupDone."""


class StartDomain(msgspec.Struct, frozen=True, kw_only=True):
    paused: bool = False
    reply_to: ReplyTo


class SuspendDomain(msgspec.Struct, frozen=True, kw_only=True):
    reply_to: ReplyTo


class ResumeDomain(msgspec.Struct, frozen=True, kw_only=True):
    reply_to: ReplyTo


class RebootDomain(msgspec.Struct, frozen=True, kw_only=True):
    reply_to: ReplyTo


class ShutdownDomain(msgspec.Struct, frozen=True):
    """ACPI power button; returns before the guest acts (if it ever does)."""


class DestroyDomain(msgspec.Struct, frozen=True, kw_only=True):
    #: The Crash command to answer; None: the grace period ran out (failure ignored).
    reply_to: ReplyTo | None = None


class AttachDisk(msgspec.Struct, frozen=True, kw_only=True):
    """Prepare the volume's disk file and attach it live; → CallReturned with the target."""

    name: str
    volume: dict[str, Any]
    disk: dict[str, Any]
    reply_to: ReplyTo


class DetachDisk(msgspec.Struct, frozen=True, kw_only=True):
    name: str
    target: str
    reply_to: ReplyTo


class AbortJob(msgspec.Struct, frozen=True, kw_only=True):
    #: The AbortMigration command to answer; None: a timeout or a stop aborts it.
    reply_to: ReplyTo | None = None


class SwitchToPostCopy(msgspec.Struct, frozen=True, kw_only=True):
    migration: int


class MigrateDomain(msgspec.Struct, frozen=True, kw_only=True):
    """Run migrateToURI3 off the loop (it blocks for the whole migration); → MigrationEnded."""

    migration: int
    command: MigrateTo


class PollMigration(msgspec.Struct, frozen=True, kw_only=True):
    """Read the job's statistics off the loop; → MigrationPolled."""

    migration: int


HypervisorCall = (
    StartDomain
    | SuspendDomain
    | ResumeDomain
    | RebootDomain
    | ShutdownDomain
    | DestroyDomain
    | AttachDisk
    | DetachDisk
    | AbortJob
    | SwitchToPostCopy
)

# Talking to handlers.


class ReportTo(msgspec.Struct, frozen=True):
    """A report to one handler (a reply, its Hello and first status)."""

    client: int
    report: Report


class Broadcast(msgspec.Struct, frozen=True):
    """To every subscribed handler."""

    report: Report


class Subscribe(msgspec.Struct, frozen=True):
    """The handler gets broadcasts from now on and may send commands."""

    client: int


class DeliverFinal(msgspec.Struct, frozen=True, kw_only=True):
    """Send the final status and wait until it is flushed; → FinalDelivered.

    client None: to every subscribed handler; else to that one, which is then hung up."""

    status: DomainStatus
    client: int | None = None


# The process.


class ArmTimer(msgspec.Struct, frozen=True, kw_only=True):
    """Fire `timer` at `at` (loop time), replacing a pending one of the same kind."""

    timer: Timer
    at: float


class Log(msgspec.Struct, frozen=True):
    level: Literal["info", "warning", "error"]
    message: str


class Exit(msgspec.Struct, frozen=True):
    code: int


Action = (
    DefineDomain
    | AttachIncoming
    | HypervisorCall
    | MigrateDomain
    | PollMigration
    | ReportTo
    | Broadcast
    | Subscribe
    | DeliverFinal
    | ArmTimer
    | Log
    | Exit
)


# -- inputs ------------------------------------------------------------------------------


class Boot(msgspec.Struct, frozen=True):
    """The process is up and listening; nothing is connected to libvirt yet."""


class SetupDone(msgspec.Struct, frozen=True, kw_only=True):
    now: float
    seen: Seen
    error: CallError | None = None
    #: Disks were prepared for this domain (they are this launcher's to delete).
    disks_prepared: bool = False
    #: AttachIncoming found the domain already there.
    arrived: bool = False


class DomainEventSeen(msgspec.Struct, frozen=True, kw_only=True):
    event: DomainEvent
    reason: StateReason
    seen: Seen
    #: A pause the guest cannot leave (QEMU's run state needs a reset: a KVM internal
    #: error, a panic kept paused): why, from QEMU's log. None: an ordinary pause.
    stuck: str | None = None


class AgentSeen(msgspec.Struct, frozen=True, kw_only=True):
    """The guest agent connected to its channel, or went away."""

    connected: bool
    seen: Seen


class InterfacesSeen(msgspec.Struct, frozen=True, kw_only=True):
    """What the guest agent said of the guest's NICs (polled while it is connected)."""

    interfaces: tuple[GuestInterface, ...]
    seen: Seen


class Connected(msgspec.Struct, frozen=True, kw_only=True):
    client: int
    seen: Seen


class CommandReceived(msgspec.Struct, frozen=True, kw_only=True):
    now: float
    client: int
    command: Command
    seen: Seen


class CallReturned(msgspec.Struct, frozen=True, kw_only=True):
    call: HypervisorCall
    error: CallError | None = None
    #: What the call gave back: an attached disk's target.
    result: str = ""
    #: Queried after the call returned.
    seen: Seen


class TimerFired(msgspec.Struct, frozen=True, kw_only=True):
    now: float
    timer: Timer
    seen: Seen


class Signalled(msgspec.Struct, frozen=True, kw_only=True):
    """SIGTERM or SIGINT: a graceful shutdown with the VMI's grace period."""

    now: float
    signal: str


class FinalDelivered(msgspec.Struct, frozen=True, kw_only=True):
    now: float
    #: At least one handler has flushed it.
    delivered: bool
    #: As in DeliverFinal.
    client: int | None = None


class MigrationPolled(msgspec.Struct, frozen=True, kw_only=True):
    now: float
    migration: int
    #: None: the statistics could not be read (the job may be finishing right now).
    progress: JobProgress | None


class MigrationEnded(msgspec.Struct, frozen=True, kw_only=True):
    now: float
    migration: int
    #: migrateToURI3's error; None: the guest now lives on the target.
    error: str | None = None
    seen: Seen


Input = (
    Boot
    | SetupDone
    | DomainEventSeen
    | AgentSeen
    | InterfacesSeen
    | Connected
    | CommandReceived
    | CallReturned
    | TimerFired
    | Signalled
    | FinalDelivered
    | MigrationPolled
    | MigrationEnded
)


# -- state -------------------------------------------------------------------------------


class GracefulShutdown(msgspec.Struct, frozen=True, kw_only=True):
    deadline: float
    #: At least one ACPI request reached the guest: if it is still up at the deadline, it
    #: "ran out" of grace (a zero grace period is a deliberate immediate stop instead).
    acpi_sent: bool = False
    #: The grace period ended and destroy was called: only the domain's end matters now.
    destroying: bool = False


class DomainEnd(msgspec.Struct, frozen=True):
    state: DomainState
    reason: StateReason
    event: DomainEvent


class Migration(msgspec.Struct, frozen=True, kw_only=True):
    number: int
    command: MigrateTo
    started: float
    completion_deadline: float | None
    last_progress: float
    least_remaining: int | None = None
    mode: str = PRE_COPY
    #: Why it was aborted (the abort may still be under way); reported instead of libvirt's
    #: error.
    abort: str | None = None
    #: The domain's end, seen while migrateToURI3 had not returned: reported after the
    #: MigrationResult, so the handler learns the outcome before the end.
    deferred_end: DomainEnd | None = None


class LauncherState(msgspec.Struct, frozen=True, kw_only=True):
    settings: Settings
    #: The seq of the last DomainStatus.
    seq: int = 0
    #: A Crash command destroyed the domain: its Stopped event is reported as Crashed.
    crash_requested: bool = False
    #: The guest stopped for good (`DomainEventSeen.stuck`) and was destroyed: its Stopped
    #: event is reported as Crashed with this as the message.
    crash: str | None = None
    grace_expired: bool = False
    shutdown: GracefulShutdown | None = None
    migration: Migration | None = None
    migrations: int = 0
    #: This launcher deletes the domain's disks when it exits: not the source's after the
    #: guest moved away, not a target's before the guest arrived.
    owns_disks: bool = False
    #: Hot-plugged volumes attached now: (name, target), in the order they came.
    volumes: tuple[tuple[str, str], ...] = ()
    agent_connected: bool = False
    interfaces: tuple[GuestInterface, ...] = ()
    setup_failed: bool = False
    final: DomainStatus | None = None
    exited: bool = False


def initial(settings: Settings) -> LauncherState:
    return LauncherState(settings=settings)


Step = tuple[LauncherState, list[Action]]


def step(s: LauncherState, inp: Input) -> Step:
    if s.exited:
        return s, []
    match inp:
        case Boot():
            return s, [AttachIncoming() if s.settings.migration_target else DefineDomain()]
        case SetupDone():
            return _setup_done(s, inp)
        case DomainEventSeen():
            return _domain_event(s, inp)
        case AgentSeen(connected=connected, seen=seen):
            if connected == s.agent_connected or s.final is not None:
                return s, []
            s = replace(s, agent_connected=connected)
            s, status = _status(s, seen.state, seen.reason, None, seen)
            return s, [Broadcast(status)]
        case InterfacesSeen(interfaces=interfaces, seen=seen):
            if interfaces == s.interfaces or s.final is not None:
                return s, []
            s = replace(s, interfaces=interfaces)
            s, status = _status(s, seen.state, seen.reason, None, seen)
            return s, [Broadcast(status)]
        case Connected():
            return _connected(s, inp)
        case CommandReceived():
            return _command(s, inp)
        case CallReturned():
            return _call_returned(s, inp)
        case TimerFired():
            return _timer(s, inp)
        case Signalled():
            grace = s.settings.termination_grace_seconds
            s, actions = _request_shutdown(s, grace, inp.now)
            note = Log("info", f"signal {inp.signal}: graceful shutdown, grace {grace}s")
            return s, [note, *actions]
        case FinalDelivered():
            if inp.delivered:
                return _exit(s)
            if inp.client is None:
                # Nobody is listening: give a restarting handler time to collect it.
                at = inp.now + s.settings.final_status_linger_seconds
                return s, [ArmTimer(timer=Timer.LINGER, at=at)]
            return s, []
        case MigrationPolled():
            return _migration_polled(s, inp)
        case MigrationEnded():
            return _migration_ended(s, inp)
        case _:
            assert_never(inp)


# -- reports -----------------------------------------------------------------------------


def _status(
    s: LauncherState,
    state: DomainState,
    reason: StateReason,
    event: DomainEvent | None,
    seen: Seen,
    *,
    final: bool = False,
    message: str | None = None,
) -> tuple[LauncherState, DomainStatus]:
    seq = s.seq + 1
    status = DomainStatus(
        state=state,
        reason=reason,
        event=event,
        seq=seq,
        observed_at=seen.wall,
        domain_pid=seen.pid if state in ACTIVE_STATES else None,
        final=final,
        message=message,
        grace_period_expired=s.grace_expired if final else False,
        volumes=dict(s.volumes) if state in ACTIVE_STATES else {},
        agent_connected=s.agent_connected and state in ACTIVE_STATES,
        interfaces=s.interfaces if state in ACTIVE_STATES else (),
    )
    return replace(s, seq=seq), status


def _snapshot(s: LauncherState, seen: Seen) -> tuple[LauncherState, DomainStatus]:
    """The current status, for a connecting handler and command replies."""
    if s.final is not None:
        return s, s.final
    reason = seen.reason
    if (s.crash_requested or s.crash is not None) and seen.state is DomainState.SHUTOFF:
        reason = StateReason.CRASHED
    return _status(s, seen.state, reason, None, seen)


def _reply(s: LauncherState, to: ReplyTo, seen: Seen, error: str | None = None) -> Step:
    s, status = _snapshot(s, seen)
    result = CommandResult(id=to.id, ok=error is None, error=error, status=status)
    return s, [ReportTo(to.client, result)]


def _finish(
    s: LauncherState,
    state: DomainState,
    reason: StateReason,
    event: DomainEvent | None,
    seen: Seen,
    message: str | None = None,
) -> Step:
    if s.final is not None:
        return s, []  # reported once: later ends (e.g. Undefined during cleanup) add nothing
    s, final = _status(s, state, reason, event, seen, final=True, message=message)
    note = Log("info", f"domain {s.settings.domain_name} gone: {state}/{reason}")
    return replace(s, final=final), [note, DeliverFinal(status=final)]


def _message(error: CallError | None) -> str | None:
    return None if error is None else error.message


def _exit(s: LauncherState) -> Step:
    return replace(s, exited=True), [Exit(1 if s.setup_failed else 0)]


# -- setup -------------------------------------------------------------------------------


def _setup_done(s: LauncherState, inp: SetupDone) -> Step:
    settings = s.settings
    s = replace(s, owns_disks=inp.disks_prepared)
    if inp.error is not None:
        # Stay up long enough to tell the handler why (the VMI fails), then exit.
        s = replace(s, setup_failed=True)
        note = Log("error", f"cannot define {settings.domain_name}: {inp.error.message}")
        message = f"{inp.error.kind}: {inp.error.message}"
        s, actions = _finish(s, DomainState.SHUTOFF, StateReason.FAILED, None, inp.seen, message)
        return s, [note, *actions]
    if not settings.migration_target:
        return s, []
    if inp.arrived:
        if inp.seen.active and inp.seen.reason is not StateReason.MIGRATION:
            s = replace(s, owns_disks=True)  # the migration has already completed
        return s, []
    at = inp.now + settings.migration_target_timeout_seconds
    return s, [ArmTimer(timer=Timer.TARGET_TIMEOUT, at=at)]


# -- libvirt events ----------------------------------------------------------------------


def _domain_event(s: LauncherState, inp: DomainEventSeen) -> Step:
    if s.final is not None:
        return s, []  # the domain is already reported gone (e.g. Undefined during cleanup)
    event, reason = inp.event, inp.reason
    state = EVENT_STATES[event]
    if event is DomainEvent.SUSPENDED and inp.stuck is not None:
        # QEMU refuses to run this guest again ("Resetting the Virtual Machine is
        # required"): it crashed, as KubeVirt destroys an irrecoverable domain
        if s.crash is not None:
            return s, []
        note = Log("warning", f"domain {s.settings.domain_name} stopped for good: {inp.stuck}")
        return replace(s, crash=inp.stuck), [note, DestroyDomain()]
    if event is DomainEvent.SUSPENDED and inp.seen.state is DomainState.PAUSED:
        # libvirt's event says "paused" both for a user's pause and for one it cannot name;
        # the domain's state reason tells them apart
        reason = inp.seen.reason
    if event is DomainEvent.STOPPED and (s.crash_requested or s.crash is not None):
        reason = StateReason.CRASHED
    if event is DomainEvent.DEFINED and inp.seen.active:
        return s, []  # a running domain's definition was saved (a migration's target does)
    if event is DomainEvent.STARTED and reason is StateReason.MIGRATED:
        # An incoming migration: QEMU exists on the target but the guest runs only once
        # the migration completes (Resumed/Migrated).
        state, reason = DomainState.PAUSED, StateReason.MIGRATION
    elif s.settings.migration_target and event is DomainEvent.RESUMED:
        s = replace(s, owns_disks=True)  # the guest now lives here
    if event in END_EVENTS:
        if s.migration is not None:
            deferred = DomainEnd(state, reason, event)
            return replace(s, migration=replace(s.migration, deferred_end=deferred)), []
        return _finish(s, state, reason, event, inp.seen, s.crash)
    s, status = _status(s, state, reason, event, inp.seen)
    return s, [Broadcast(status)]


# -- handlers ----------------------------------------------------------------------------


def _connected(s: LauncherState, inp: Connected) -> Step:
    hello = ReportTo(inp.client, replace(s.settings.hello, domain_pid=inp.seen.pid))
    if s.final is not None:
        return s, [hello, DeliverFinal(status=s.final, client=inp.client)]
    s, status = _snapshot(s, inp.seen)
    return s, [hello, ReportTo(inp.client, status), Subscribe(inp.client)]


def _command(s: LauncherState, inp: CommandReceived) -> Step:
    to = ReplyTo(inp.client, inp.command.id)
    seen = inp.seen
    command = inp.command
    match command:
        case Start(paused=paused):
            if s.shutdown is not None or s.final is not None:
                return _reply(s, to, seen, "the domain is shutting down")
            if seen.active:
                return _reply(s, to, seen)
            return s, [StartDomain(paused=paused, reply_to=to)]
        case Pause():
            return s, [SuspendDomain(reply_to=to)]
        case Resume():
            return s, [ResumeDomain(reply_to=to)]
        case SoftReboot():
            return s, [RebootDomain(reply_to=to)]
        case Shutdown(grace_period_seconds=grace):
            s, actions = _request_shutdown(s, grace, inp.now)
            s, reply = _reply(s, to, seen)
            return s, [*actions, *reply]
        case Crash():
            if not seen.active:
                return _reply(s, to, seen, "the domain is not running")
            return replace(s, crash_requested=True), [DestroyDomain(reply_to=to)]
        case Status():
            return _reply(s, to, seen)
        case MigrateTo():
            return _start_migration(s, inp, command, to)
        case AbortMigration():
            if s.migration is None:
                return _reply(s, to, seen, "no migration is running")
            s = _with_abort(s, s.migration, "aborted on request")
            return s, [AbortJob(reply_to=to)]
        case AttachVolume(name=name, volume=volume, disk=disk):
            if any(n == name for n, _ in s.volumes):
                return _reply(s, to, seen)  # attached already: a repeat changes nothing
            if not seen.active or s.shutdown is not None or s.final is not None:
                return _reply(s, to, seen, "the domain is not running")
            return s, [AttachDisk(name=name, volume=volume, disk=disk, reply_to=to)]
        case DetachVolume(name=name):
            target = next((t for n, t in s.volumes if n == name), None)
            if target is None:
                return _reply(s, to, seen)  # not attached: nothing to do
            return s, [DetachDisk(name=name, target=target, reply_to=to)]
        case _:
            assert_never(command)


def _call_returned(s: LauncherState, inp: CallReturned) -> Step:
    call, error = inp.call, inp.error
    match call:
        case StartDomain() | SuspendDomain() | ResumeDomain() | RebootDomain():
            return _reply(s, call.reply_to, inp.seen, _message(error))
        case AttachDisk(name=name):
            if error is None:
                s = replace(s, volumes=(*s.volumes, (name, inp.result)))
            return _reply(s, call.reply_to, inp.seen, _message(error))
        case DetachDisk(name=name):
            if error is None:
                s = replace(s, volumes=tuple(v for v in s.volumes if v[0] != name))
            return _reply(s, call.reply_to, inp.seen, _message(error))
        case ShutdownDomain():
            name = s.settings.domain_name
            if error is not None:
                return s, [Log("warning", f"ACPI shutdown of {name} failed: {error.message}")]
            if s.shutdown is not None:
                s = replace(s, shutdown=replace(s.shutdown, acpi_sent=True))
            return s, []
        case DestroyDomain(reply_to=to) | AbortJob(reply_to=to):
            if to is not None:
                return _reply(s, to, inp.seen, _message(error))
            if error is not None and isinstance(call, AbortJob):
                name = s.settings.domain_name
                return s, [Log("warning", f"migration of {name}: {error.message}")]
            return s, []  # a destroy as the grace period ends may race the domain's end
        case SwitchToPostCopy(migration=number):
            if error is not None:
                name = s.settings.domain_name
                return s, [Log("warning", f"migration of {name}: {error.message}")]
            m = s.migration
            if m is not None and m.number == number:
                s = replace(s, migration=replace(m, mode=POST_COPY))
            return s, []
        case _:
            assert_never(call)


# -- graceful shutdown -------------------------------------------------------------------


def _request_shutdown(s: LauncherState, grace: float, now: float) -> Step:
    actions: list[Action] = []
    if s.migration is not None and s.migration.abort is None:
        # A guest being stopped does not move; the stop proceeds once it is back.
        s = _with_abort(s, s.migration, "the VMI is being stopped")
        actions.append(AbortJob())
    # A later request may shorten the grace period, never extend it (as in KubeVirt).
    deadline = now + max(0.0, grace)
    current = s.shutdown
    if current is None or deadline < current.deadline:
        if current is None:
            s = replace(s, shutdown=GracefulShutdown(deadline=deadline))
        else:
            s = replace(s, shutdown=replace(current, deadline=deadline))
        if current is None or not current.destroying:
            actions.append(ArmTimer(timer=Timer.SHUTDOWN, at=now))  # act on it at once
    return s, actions


def _shutdown_tick(s: LauncherState, now: float, seen: Seen) -> Step:
    shutdown = s.shutdown
    if shutdown is None or shutdown.destroying or s.final is not None:
        return s, []
    if not seen.active:
        if s.migration is not None and s.migration.deferred_end is not None:
            return s, []  # the end is reported after the migration's result
        # Never started (or already off without an event): nothing to wait for.
        return _finish(s, seen.state, seen.reason, None, seen)
    remaining = shutdown.deadline - now
    if remaining <= 0:
        # Only a guest that was asked and did not comply "ran out" of grace.
        s = replace(
            s,
            grace_expired=shutdown.acpi_sent,
            shutdown=replace(shutdown, destroying=True),
        )
        return s, [DestroyDomain()]
    at = now + min(ACPI_RESEND_SECONDS, remaining)
    return s, [ShutdownDomain(), ArmTimer(timer=Timer.SHUTDOWN, at=at)]


def _timer(s: LauncherState, inp: TimerFired) -> Step:
    match inp.timer:
        case Timer.SHUTDOWN:
            return _shutdown_tick(s, inp.now, inp.seen)
        case Timer.LINGER:
            return _exit(s) if s.final is not None else (s, [])
        case Timer.TARGET_TIMEOUT:
            if inp.seen.state is not DomainState.NO_STATE or s.final is not None:
                return s, []
            timeout = s.settings.migration_target_timeout_seconds
            message = f"no domain arrived by migration within {timeout}s"
            return _finish(s, DomainState.NO_STATE, StateReason.FAILED, None, inp.seen, message)
        case Timer.MIGRATION_POLL:
            if s.migration is None:
                return s, []
            return s, [PollMigration(migration=s.migration.number)]
        case _:
            assert_never(inp.timer)


# -- live migration (qemu mode, the source side) -----------------------------------------


def _with_abort(s: LauncherState, m: Migration, why: str) -> LauncherState:
    return replace(s, migration=replace(m, abort=why))


def _start_migration(
    s: LauncherState, inp: CommandReceived, command: MigrateTo, to: ReplyTo
) -> Step:
    settings = s.settings
    if settings.test_driver:
        return _reply(s, to, inp.seen, "the test driver cannot migrate (test mode simulates it)")
    if s.migration is not None:
        return _reply(s, to, inp.seen, "a migration is already running")
    if s.shutdown is not None or s.final is not None:
        return _reply(s, to, inp.seen, "the domain is shutting down")
    if not inp.seen.active:
        return _reply(s, to, inp.seen, "the domain is not running")
    now = inp.now
    gib = max(1.0, (settings.guest_memory_bytes or 0) / 2**30)
    per_gib = command.completion_timeout_per_gib
    number = s.migrations + 1
    migration = Migration(
        number=number,
        command=command,
        started=now,
        completion_deadline=now + per_gib * gib if per_gib > 0 else None,
        last_progress=now,
    )
    s = replace(s, migration=migration, migrations=number)
    s, reply = _reply(s, to, inp.seen)
    poll = ArmTimer(timer=Timer.MIGRATION_POLL, at=now + command.progress_interval_seconds)
    return s, [*reply, MigrateDomain(migration=number, command=command), poll]


def _migration_polled(s: LauncherState, inp: MigrationPolled) -> Step:
    m = s.migration
    if m is None or m.number != inp.migration:
        return s, []  # the job ended meanwhile
    command, now = m.command, inp.now
    again = ArmTimer(timer=Timer.MIGRATION_POLL, at=now + command.progress_interval_seconds)
    p = inp.progress
    if p is None or not p.active:
        return s, [again]
    actions: list[Action] = [
        Broadcast(
            MigrationProgress(
                migration_uid=command.migration_uid,
                processed=p.processed,
                remaining=p.remaining,
                total=p.total,
                elapsed_ms=p.elapsed_ms,
                dirty_rate=p.dirty_rate,
                iterations=p.iterations,
                mode=m.mode,
            )
        )
    ]
    if m.least_remaining is None or p.remaining < m.least_remaining:
        m = replace(m, least_remaining=p.remaining, last_progress=now)
    if m.abort is None and m.mode != POST_COPY:
        timeout = command.progress_timeout_seconds
        if timeout > 0 and now - m.last_progress > timeout:
            m = replace(m, abort=f"no progress for {timeout}s (progressTimeout)")
            actions.append(AbortJob())
        elif m.completion_deadline is not None and now > m.completion_deadline:
            if command.allow_post_copy:
                actions.append(SwitchToPostCopy(migration=m.number))
            else:
                m = replace(
                    m,
                    abort=f"not completed within {command.completion_timeout_per_gib}s "
                    "per GiB (completionTimeoutPerGiB)",
                )
                actions.append(AbortJob())
    return replace(s, migration=m), [*actions, again]


def _migration_ended(s: LauncherState, inp: MigrationEnded) -> Step:
    m = s.migration
    if m is None or m.number != inp.migration:
        return s, []
    error = None if inp.error is None else (m.abort or inp.error)
    ok = error is None
    s = replace(s, migration=None, owns_disks=False if ok else s.owns_disks)
    # ok: the target's launcher owns the disks now.
    target = m.command.target_uri
    actions: list[Action] = [
        Log("info", f"migration of {s.settings.domain_name} to {target}: {error or 'ok'}"),
        Broadcast(
            MigrationResult(
                migration_uid=m.command.migration_uid,
                ok=ok,
                aborted=not ok and m.abort is not None,
                error=error,
                duration_seconds=inp.now - m.started,
                mode=m.mode,
            )
        ),
    ]
    if m.deferred_end is not None:
        end = m.deferred_end
        s, finish = _finish(s, end.state, end.reason, end.event, inp.seen)
        actions += finish
    return s, actions
