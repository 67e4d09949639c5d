"""The hot log's floor as recorded: every event from it on is in the hot log, everything
before it is read from the archive; with it, the retirer's work found under it and not
done yet (`PendingEnd`), so a restart resumes it. Plain data: the port's `Trimming`
answers with it whichever adapter keeps the log."""

from __future__ import annotations

import msgspec

from events import subjects
from events.meta import Aggregate


class PendingEnd(msgspec.Struct, frozen=True):
    """A terminal event below the floor whose aggregate has not left the hot log yet (not
    ended, or its last events still in the hot window)."""

    aggregate: Aggregate
    uid: str
    seq: int

    @classmethod
    def of(cls, agg: Aggregate, seq: int) -> PendingEnd:
        return cls(Aggregate(kind=agg.kind, namespace=agg.namespace, name=agg.name), agg.uid, seq)

    @property
    def scope(self) -> str:
        a = self.aggregate
        return subjects.aggregate_filter(a.kind, a.namespace, a.name)


class Floor(msgspec.Struct, frozen=True):
    stream: str
    floor: int  # the hot log holds every event from here on; before it, read the archive
    at: float = 0.0
    # the retirer's work found under the floor and not done yet: a restart resumes it
    pending: tuple[PendingEnd, ...] = ()
