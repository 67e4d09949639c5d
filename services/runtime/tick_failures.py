"""The shell's timer after a failed tick: when the next tick comes, and which failures the
user is told of. A tick decides over everything, so one that fails fails the same way at
the next (a decision that keeps conflicting, a decider that raises): ticking on at the
normal interval would be a retry loop. Each failure in a row doubles the wait, up to
`MAX_BACKOFF`; a tick that succeeds ends the streak and the normal interval returns. A
give-up is recorded once per streak and kind (its message), not once per tick."""

from __future__ import annotations

MAX_BACKOFF = 60.0  # seconds between ticks that keep failing, at most


class TickFailures:
    def __init__(self, interval: float, cap: float = MAX_BACKOFF) -> None:
        self.interval = interval
        self.cap = max(cap, interval)
        self.streak = 0  # ticks failed in a row
        self._told: set[str] = set()  # kinds recorded since the last tick that succeeded

    @property
    def delay(self) -> float:
        """From one tick to the next: the interval, doubled for each failure in a row."""
        if self.streak == 0:
            return self.interval
        return min(self.cap, self.interval * 2.0 ** min(self.streak, 64))

    def failed(self) -> float:
        """A tick failed: the wait before the next."""
        self.streak += 1
        return self.delay

    def succeeded(self) -> None:
        self.streak = 0
        self._told.clear()

    def news(self, kind: str) -> bool:
        """Whether a failure of `kind` is yet to be recorded in this streak."""
        return kind not in self._told

    def told(self, kind: str) -> None:
        """A failure of `kind` was recorded: not again until a tick succeeds."""
        self._told.add(kind)
