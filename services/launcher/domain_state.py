"""Domain states, state reasons and lifecycle events, in KubeVirt's vocabulary.

The values are the strings KubeVirt's virt-launcher reports (pkg/virt-launcher/virtwrap/api),
so the handler can map them to VMI phases exactly as KubeVirt does (e.g. Shutoff+Crashed →
Failed, Shutoff+Shutdown → Succeeded). Kept free of libvirt so the protocol module and the
handler can import it without loading libvirt.
"""

from __future__ import annotations

import enum


class DomainState(enum.StrEnum):
    NO_STATE = "NoState"
    RUNNING = "Running"
    BLOCKED = "Blocked"
    PAUSED = "Paused"
    SHUTDOWN = "Shutdown"  # being shut down (ACPI in progress)
    SHUTOFF = "Shutoff"
    CRASHED = "Crashed"
    PM_SUSPENDED = "PMSuspended"


class StateReason(enum.StrEnum):
    UNKNOWN = "Unknown"
    # running
    BOOTED = "Booted"
    MIGRATED = "Migrated"
    RESTORED = "Restored"
    UNPAUSED = "Unpaused"
    MIGRATION_CANCELED = "MigrationCanceled"
    WAKEUP = "Wakeup"
    # paused
    USER = "User"  # paused by a user (KubeVirt: PausedByUser)
    MIGRATION = "Migration"
    IO_ERROR = "IOError"
    WATCHDOG = "Watchdog"
    STARTING_UP = "StartingUp"
    SHUTTING_DOWN = "ShuttingDown"
    # shut off
    SHUTDOWN = "Shutdown"
    DESTROYED = "Destroyed"
    CRASHED = "Crashed"
    SAVED = "Saved"
    FAILED = "Failed"
    PANICKED = "Panicked"


class DomainEvent(enum.StrEnum):
    DEFINED = "Defined"
    UNDEFINED = "Undefined"
    STARTED = "Started"
    SUSPENDED = "Suspended"
    RESUMED = "Resumed"
    STOPPED = "Stopped"
    SHUTDOWN = "Shutdown"  # the guest acknowledged a shutdown request; Stopped follows
    PM_SUSPENDED = "PMSuspended"
    CRASHED = "Crashed"


#: States in which the domain still exists as a running (or paused) guest.
ACTIVE_STATES = frozenset(
    {
        DomainState.RUNNING,
        DomainState.BLOCKED,
        DomainState.PAUSED,
        DomainState.SHUTDOWN,
        DomainState.PM_SUSPENDED,
    }
)
