"""The handler ↔ launcher protocol on the launcher's unix socket.

Newline-delimited msgspec JSON. The handler sends commands, each with an `id` it chooses;
the launcher answers each with a CommandResult carrying that id, and independently pushes
a DomainStatus on every lifecycle event to every connected handler. A handler that
(re)connects first receives Hello, then the current DomainStatus.

Tags are explicit and stable (never derived from renamed classes); new fields get
defaults so a restarted handler and an older running launcher still understand each
other. PROTOCOL_VERSION 2 added live migration (MigrateTo, AbortMigration →
MigrationProgress, MigrationResult), Hello.domain_type/migration_target and
DomainStatus.domain_pid.
"""

from __future__ import annotations

from typing import Any

import msgspec

from services.launcher.domain_state import DomainEvent, DomainState, StateReason

PROTOCOL_VERSION = 2


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


class AttachVolume(msgspec.Struct, tag="AttachVolume", kw_only=True):
    """Hot-plug a volume into the running domain (KubeVirt's addvolume): its disk file is
    prepared (a claim's qcow2) and attached live; the reply's status lists it in
    `volumes` with its target (sda, ...)."""

    id: int = 0
    name: str
    volume: dict[str, Any]  # the VMI's volume (persistentVolumeClaim or dataVolume)
    disk: dict[str, Any]  # the VMI's disk (bus scsi or virtio)


class DetachVolume(msgspec.Struct, tag="DetachVolume", kw_only=True):
    """Unplug a hot-plugged volume (KubeVirt's removevolume); its claim's file stays."""

    id: int = 0
    name: str


class Status(msgspec.Struct, tag="Status", kw_only=True):
    id: int = 0


class Crash(msgspec.Struct, tag="Crash", kw_only=True):
    """TEST ONLY: destroy the domain and report it as crashed.

    The `test` driver cannot crash a guest, so tests of the Failed path use this.
    """

    id: int = 0


class MigrateTo(msgspec.Struct, tag="MigrateTo", kw_only=True):
    """Live-migrate the running domain to another node's libvirtd (qemu mode only).

    The result comes at once (accepted or not); then MigrationProgress reports every
    `progress_interval_seconds` and one MigrationResult. On success the launcher's final
    DomainStatus follows (Shutoff/Migrated: the guest lives on at the target) and the
    launcher exits.
    """

    id: int = 0
    #: The migration object's uid, echoed in the progress and result reports.
    migration_uid: str = ""
    #: The target node's libvirtd, e.g. qemu+unix:///system?socket=<dir>/libvirt-sock.
    target_uri: str
    #: Where QEMU sends the memory (a target address, not the libvirtd's).
    migration_uri: str = "tcp://127.0.0.1"
    #: MigrationPolicy/config bandwidthPerMigration in bytes per second; 0: unlimited.
    bandwidth_bytes_per_second: int = 0
    allow_auto_converge: bool = False
    allow_post_copy: bool = False
    #: KubeVirt's completionTimeoutPerGiB: abort (or switch to post-copy when allowed) once
    #: the migration runs longer than this many seconds per GiB of guest memory; 0: never.
    completion_timeout_per_gib: int = 150
    #: KubeVirt's progressTimeout: abort when the remaining data has not shrunk for this
    #: many seconds; 0: never.
    progress_timeout_seconds: int = 150
    progress_interval_seconds: float = 0.25


class AbortMigration(msgspec.Struct, tag="AbortMigration", kw_only=True):
    """Cancel the running migration (abortJob); the guest stays on the source, running."""

    id: int = 0


Command = (
    Start
    | Pause
    | Resume
    | SoftReboot
    | Shutdown
    | Status
    | Crash
    | MigrateTo
    | AbortMigration
    | AttachVolume
    | DetachVolume
)


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
    #: QEMU's pid while the domain runs (qemu mode); None for the `test` driver.
    domain_pid: int | None = None
    #: The hot-plugged volumes attached now: name → the disk's target (sda, vdc, ...).
    volumes: dict[str, str] = msgspec.field(default_factory=dict)
    #: The guest agent answers on its channel (libvirt's agent lifecycle).
    agent_connected: bool = False
    #: The guest's NICs with their addresses, as its agent last reported them.
    interfaces: tuple[GuestInterface, ...] = ()


class GuestInterface(msgspec.Struct, frozen=True, kw_only=True):
    """One NIC of the guest as its agent reports it, matched to the VMI's interface by MAC."""

    name: str  # the VMI's interface (spec.domain.devices.interfaces[].name)
    mac: str
    interface_name: str = ""  # the guest's name for it (eth0)
    ip_addresses: tuple[str, ...] = ()


class Hello(msgspec.Struct, tag="Hello", kw_only=True):
    vmi_uid: str
    domain_name: str
    #: The launcher process (the "pod").
    pid: int
    #: The hypervisor process (QEMU) when there is one; None for the `test` driver.
    domain_pid: int | None = None
    hypervisor_uri: str = ""
    protocol_version: int = PROTOCOL_VERSION
    #: The libvirt domain type: test, qemu (TCG: KubeVirt's SoftwareEmulation) or kvm.
    domain_type: str = "test"
    #: This launcher waits for (or watches) a domain arriving by live migration.
    migration_target: bool = False


class CommandResult(msgspec.Struct, tag="CommandResult", kw_only=True):
    id: int
    ok: bool
    error: str | None = None
    #: Filled for Status; the state after the command otherwise.
    status: DomainStatus | None = None


class MigrationProgress(msgspec.Struct, tag="MigrationProgress", kw_only=True):
    """The source's migration job, a few times per second (libvirt's jobStats), in bytes."""

    migration_uid: str = ""
    processed: int = 0
    remaining: int = 0
    total: int = 0
    elapsed_ms: int = 0
    dirty_rate: int = 0
    iterations: int = 0
    #: "PreCopy" or "PostCopy" (after a switch on completion timeout).
    mode: str = "PreCopy"


class MigrationResult(msgspec.Struct, tag="MigrationResult", kw_only=True):
    migration_uid: str = ""
    ok: bool
    #: The migration was aborted (AbortMigration, a timeout); the guest stays on the source.
    aborted: bool = False
    error: str | None = None
    #: Wall time of the migration job as the launcher saw it.
    duration_seconds: float = 0.0
    mode: str = "PreCopy"


Report = Hello | DomainStatus | CommandResult | MigrationProgress | MigrationResult


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
