"""What the handler's decider asks of its executors, and what they report back: the one
vocabulary of its effects. Appends are the shell's `Decision`s, and what the decider notes
of its own doing a `Note`; everything else is here.

Actions: the launcher fleet (`fleet.py`) spawns, commands, cleans up and forgets launchers
and drives a launcher's live migration; `ReadMigration` reads a migration aggregate from the
log (the node's consumer sees only the events routed to it); `CopyVolumes` (`volumes.py`)
copies a snapshot's or a restore's disks. Observations come back through the shell's
inbox, in the order they were made."""

from __future__ import annotations

import msgspec
from msgspec.structs import replace

from events.catalog import Attachment, MigrationScheduled
from events.meta import Aggregate
from projections.views import MigrationView
from services.handler.imports import ImportDone, ImportProgress, RunImport
from services.handler.reclaim import DeleteDisk, DiskDeleted
from services.handler.volumes import CopyVolumes, VolumesCopyDone
from services.launcher.protocol import (
    AbortMigration,
    Command,
    DomainStatus,
    MigrateTo,
    MigrationProgress,
    MigrationResult,
)


class Rejection(msgspec.Struct, frozen=True, kw_only=True):
    """The launcher refused the same command for the same request `count` times in a row
    (or did not answer it): the fleet's record, the planner's basis for backing off."""

    command: str  # the command's tag
    cause: str  # the request it served (Send.cause)
    error: str
    count: int
    since: float  # the first refusal of the streak (wall clock)
    at: float  # the latest


class Observed(msgspec.Struct, frozen=True, kw_only=True):
    """One launcher as the launcher fleet sees it. Immutable: the fleet reports a new one
    for every change, so a decider's state can hold it as it is."""

    uid: str  # the VMI uid from the launcher's Hello
    domain_name: str = ""
    pid: int = 0
    domain_pid: int | None = None
    domain_type: str = ""  # Hello.domain_type: "qemu" = software emulation
    hypervisor_uri: str = ""  # Hello.hypervisor_uri: where a migration target listens
    status: DomainStatus | None = None  # the latest report (highest seq)
    final: DomainStatus | None = None  # the report that said the domain is gone
    spawning: bool = False  # spawn requested, no Hello yet
    connected: bool = False
    gone: bool = False  # the launcher process has exited
    spawn_error: str = ""  # the spawn failed (then also gone)
    ended_at: float | None = None  # when the fleet first saw it final or gone
    in_flight: frozenset[str] = frozenset()  # command tags awaiting results
    start_sent: bool = False
    shutdown_grace: float | None = None  # smallest grace period sent
    reboots_sent: int = 0
    reboots_ok: int = 0
    rejected: Rejection | None = None  # the last command's refusals; None once one succeeds

    def updated(self, status: DomainStatus, now: float) -> Observed:
        """With `status` taken in: the latest unless an older report arrives late, the final
        one kept, and `now` as the end for a first final one."""
        latest = self.status is None or status.seq >= self.status.seq
        return replace(
            self,
            status=status if latest else self.status,
            final=status if status.final else self.final,
            ended_at=now if status.final and self.ended_at is None else self.ended_at,
        )


# ------------------------------------------------------------------ actions
class Launch(msgspec.Struct, frozen=True):
    """Spawn a launcher for a VMI (`migration_target`: qemu mode's incoming side)."""

    key: str
    uid: str
    manifest: bytes  # the VMI manifest the launcher is spawned with (metadata filled in)
    migration_target: bool = False
    pod_address: str = ""  # the guest's, on the pod network (a migration's: in the domain)
    attachments: tuple[Attachment, ...] = ()  # its addresses on secondary networks (as well)


class Send(msgspec.Struct, frozen=True):
    """A command to the VMI's launcher (one at a time: `Observed.in_flight`)."""

    key: str
    command: Command
    #: the request the command serves (the record's causation id): a new request of the
    #: same kind earns new attempts after the handler gave up on the last one
    cause: str = ""


class Cleanup(msgspec.Struct, frozen=True):
    """An orphan launcher (its VMI is gone, or is a newer VMI of the same name): destroy it."""

    key: str


class Release(msgspec.Struct, frozen=True):
    """A launcher that is gone and has nothing left to report: drop its bookkeeping."""

    key: str


class Migrate(msgspec.Struct, frozen=True):
    """Start or abort the launcher's live migration of `migration` (its key)."""

    key: str
    migration: str
    command: MigrateTo | AbortMigration


class Relay(msgspec.Struct, frozen=True):
    """Report the launcher's migration progress and result until the result."""

    key: str
    migration: str


class ReadMigration(msgspec.Struct, frozen=True):
    """Read a migration aggregate; `MigrationRead` reports it (the read runs beside the
    decisions: the source jobs of a node read theirs at once)."""

    key: str  # the migration's "ns/name"
    migration: Aggregate


FleetAction = Launch | Send | Cleanup | Release | Migrate | Relay
Action = FleetAction | ReadMigration | CopyVolumes | RunImport | DeleteDisk


# ------------------------------------------------------------------ observations
class LauncherSeen(msgspec.Struct, frozen=True):
    """The launcher of a VMI key as it is now (None: forgotten)."""

    key: str
    observed: Observed | None


class MigrationRead(msgspec.Struct, frozen=True):
    """A migration aggregate as read (None: gone, or a newer migration of the name;
    `error`: the read failed)."""

    key: str
    view: MigrationView | None
    scheduled: MigrationScheduled | None
    at: float
    error: str = ""


class MigrationCalled(msgspec.Struct, frozen=True):
    """The launcher's answer to a Migrate command."""

    key: str  # the migration's
    command: str
    ok: bool
    error: str = ""


class MigrationReported(msgspec.Struct, frozen=True):
    """One of the launcher's migration reports (None: the connection ended first)."""

    key: str  # the migration's
    report: MigrationProgress | MigrationResult | None


Observation = (
    LauncherSeen
    | MigrationRead
    | MigrationCalled
    | MigrationReported
    | VolumesCopyDone
    | ImportProgress
    | ImportDone
    | DiskDeleted
)
