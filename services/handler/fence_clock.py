"""When this node's VMs must be stopped, across the handler's incarnations.

A handler that cannot reach the bus stops its node's VMs (fences) before the controller's
node timeout moves them elsewhere. The time that counts is the last heartbeat the bus
confirmed, whichever incarnation sent it: a handler that restarts while cut off (its
connection attempt fails, its supervisor starts it again) must not start counting afresh,
or it never fences and the VMs run twice. So the node's run dir keeps two times:
`heartbeat`, the last confirmed beat, and `since`, when a handler started with no beat
confirmed after it (a cluster started again after a long stop counts from its start, not
from a beat of long ago). The fence is due `fence_timeout` after the later of the two."""

from __future__ import annotations

import contextlib
from pathlib import Path

BEAT, SINCE = "heartbeat", "since"


class FenceClock:
    def __init__(self, node_dir: Path) -> None:
        self.dir = node_dir
        self.watched = False  # a running handler of this process watches from now on

    def _read(self, name: str) -> float:
        with contextlib.suppress(OSError, ValueError):
            return float((self.dir / name).read_text())
        return 0.0

    def _write(self, name: str, at: float) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        part = self.dir / f".{name}.part"
        part.write_text(repr(at))
        part.replace(self.dir / name)  # whole or not at all, read by the next incarnation

    def started(self, now: float) -> None:
        """A handler starts: counts from now unless an earlier start since the last
        confirmed beat already counts."""
        if self._read(SINCE) <= self._read(BEAT):
            self._write(SINCE, now)

    def confirmed(self, at: float) -> None:
        """The bus took the heartbeat sent at `at`."""
        self._write(BEAT, at)

    def due(self, fence_timeout: float) -> float:
        """When the node's VMs must be stopped if no beat is confirmed before."""
        return max(self._read(BEAT), self._read(SINCE)) + fence_timeout
