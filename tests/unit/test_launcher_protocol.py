"""The handler ↔ launcher wire format: stable tags, one JSON object per line."""

from __future__ import annotations

import msgspec
import pytest

from services.launcher.domain_state import DomainEvent, DomainState, StateReason
from services.launcher.protocol import (
    Command,
    CommandResult,
    Crash,
    DomainStatus,
    Hello,
    Pause,
    Report,
    Resume,
    Shutdown,
    SoftReboot,
    Start,
    Status,
    decode_command,
    decode_report,
    encode,
)

COMMANDS: list[Command] = [
    Start(id=1, paused=True),
    Pause(id=2),
    Resume(id=3),
    SoftReboot(id=4),
    Shutdown(id=5, grace_period_seconds=0),
    Status(id=6),
    Crash(id=7),
]
STATUS = DomainStatus(
    state=DomainState.SHUTOFF,
    reason=StateReason.CRASHED,
    event=DomainEvent.STOPPED,
    seq=9,
    final=True,
)
REPORTS: list[Report] = [
    Hello(vmi_uid="u", domain_name="ns_a", pid=42),
    STATUS,
    CommandResult(id=1, ok=False, error="boom", status=STATUS),
]


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: type(c).__name__)
def test_commands_round_trip_as_single_lines(command: Command) -> None:
    line = encode(command)
    assert line.endswith(b"\n") and line.count(b"\n") == 1
    assert decode_command(line) == command


@pytest.mark.parametrize("report", REPORTS, ids=lambda r: type(r).__name__)
def test_reports_round_trip(report: Report) -> None:
    assert decode_report(encode(report)) == report


def test_wire_shape_is_stable() -> None:
    assert msgspec.json.decode(encode(Shutdown(id=3, grace_period_seconds=30))) == {
        "type": "Shutdown",
        "id": 3,
        "grace_period_seconds": 30,
    }
    wire = msgspec.json.decode(encode(STATUS))
    assert wire["type"] == "DomainStatus"
    assert (wire["state"], wire["reason"], wire["event"]) == ("Shutoff", "Crashed", "Stopped")


def test_defaults_let_minimal_messages_decode() -> None:
    assert decode_command(b'{"type":"Start"}') == Start(id=0, paused=False)
    assert decode_command(b'{"type":"Shutdown","id":1}').grace_period_seconds == 30  # type: ignore[union-attr]
    assert decode_report(b'{"type":"DomainStatus","state":"Running"}') == DomainStatus(
        state=DomainState.RUNNING
    )


def test_unknown_commands_are_rejected() -> None:
    with pytest.raises(msgspec.ValidationError):
        decode_command(b'{"type":"Migrate"}')
