"""What the handler's decider asks of its executors, and what they report back.

Actions: the launcher fleet (`fleet.py`) spawns, commands, cleans up and forgets launchers
and drives a launcher's live migration; `ReadMigration` reads a migration aggregate from the
log (the node's consumer sees only the events routed to it). Observations come back through
the shell's inbox, in the order they were made."""

from __future__ import annotations

import msgspec

from events.catalog import MigrationScheduled
from events.meta import Aggregate
from projections.views import MigrationView
from services.handler.planner import Cleanup, Observed, Send
from services.handler.volumes import CopyVolumes, VolumesCopyDone
from services.launcher.protocol import AbortMigration, MigrateTo, MigrationProgress, MigrationResult


# ------------------------------------------------------------------ actions
class Launch(msgspec.Struct, frozen=True):
    """Spawn a launcher for a VMI (`migration_target`: qemu mode's incoming side)."""

    key: str
    uid: str
    manifest: bytes  # the VMI manifest the launcher is spawned with (metadata filled in)
    migration_target: bool = False


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
Action = FleetAction | ReadMigration | CopyVolumes


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


Observation = LauncherSeen | MigrationRead | MigrationCalled | MigrationReported | VolumesCopyDone
