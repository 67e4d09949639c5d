"""Process liveness, shared by the launcher run dir, the node runtime and `up`'s run lock."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path


def pid_alive(pid: int) -> bool:
    """True while `pid` runs; a zombie still "exists" for kill(0) but is not running."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    with contextlib.suppress(OSError):
        if Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z":
            return False
    return True


def start_time(pid: int) -> int | None:
    """When `pid` started, in clock ticks since boot (/proc/<pid>/stat field 22); None if
    it does not run. A pid with the same start time is the same process, not a reused pid."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    if fields[0] == "Z":
        return None
    return int(fields[19])  # field 22; the list starts at field 3 (the state)
