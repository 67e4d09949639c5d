"""The handler ↔ launcher protocol on the launcher's unix socket.

Newline-delimited msgspec JSON. The handler sends commands, each with an `id` it chooses;
the launcher answers each with a CommandResult carrying that id, and independently pushes
a DomainStatus on every lifecycle event to every connected handler. A handler that
(re)connects first receives Hello, then the current DomainStatus.

Tags are explicit and stable (never derived from renamed classes); new fields get
defaults so a restarted handler and an older running launcher still understand each
other. Migration commands will join the Command union under new tags.
"""

from __future__ import annotations

import msgspec

from services.launcher.domain_state import DomainEvent, DomainState, StateReason

PROTOCOL_VERSION = 1


# -- commands (handler → launcher) ------------------------------------------------------


class Start(msgspec.Struct, tag="Start", kw_only=True):
    id: int = 0
    paused: bool = False


class Pause(msgspec.Struct, tag="Pause", kw_only=True):
    id: int = 0


class Resume(msgspec.Struct, tag="Resume", kw_only=True):
    id: int = 0


class SoftReboot(msgspec.Struct, tag="SoftReboot", kw_only=True):
    id: int = 0


class Shutdown(msgspec.Struct, tag="Shutdown", kw_only=True):
    """ACPI shutdown, re-sent every ≤5 s, destroy when the grace period ends (0: at once)."""

    id: int = 0
    grace_period_seconds: float = 30


class Status(msgspec.Struct, tag="Status", kw_only=True):
    id: int = 0


class Crash(msgspec.Struct, tag="Crash", kw_only=True):
    """TEST ONLY: destroy the domain and report it as crashed.

    The `test` driver cannot crash a guest, so tests of the Failed path use this.
    """

    id: int = 0


Command = Start | Pause | Resume | SoftReboot | Shutdown | Status | Crash


# -- reports (launcher → handler) -------------------------------------------------------


class DomainStatus(msgspec.Struct, tag="DomainStatus", kw_only=True):
    state: DomainState
    reason: StateReason = StateReason.UNKNOWN
    #: The lifecycle event that caused this report; None for a snapshot (connect, Status).
    event: DomainEvent | None = None
    #: Increases with every report of this launcher: lets the handler drop stale ones.
    seq: int = 0
    #: Unix time the launcher observed the state.
    observed_at: float = 0.0
    #: The domain was destroyed because the shutdown grace period ran out
    #: (KubeVirt: Destroyed → Failed in that case, else Succeeded).
    grace_period_expired: bool = False
    #: The domain is gone; the launcher exits after delivering this report.
    final: bool = False
    #: Why, when the launcher knows more than the reason says (e.g. the define error).
    message: str | None = None


class Hello(msgspec.Struct, tag="Hello", kw_only=True):
    vmi_uid: str
    domain_name: str
    #: The launcher process (the "pod").
    pid: int
    #: The hypervisor process (QEMU) when there is one; None for the `test` driver.
    domain_pid: int | None = None
    hypervisor_uri: str = ""
    protocol_version: int = PROTOCOL_VERSION


class CommandResult(msgspec.Struct, tag="CommandResult", kw_only=True):
    id: int
    ok: bool
    error: str | None = None
    #: Filled for Status; the state after the command otherwise.
    status: DomainStatus | None = None


Report = Hello | DomainStatus | CommandResult


_encoder = msgspec.json.Encoder()
_command_decoder = msgspec.json.Decoder(Command)
_report_decoder = msgspec.json.Decoder(Report)


def encode(message: Command | Report) -> bytes:
    """One protocol line, newline included."""
    return _encoder.encode(message) + b"\n"


def decode_command(line: bytes) -> Command:
    return _command_decoder.decode(line)


def decode_report(line: bytes) -> Report:
    return _report_decoder.decode(line)
