"""A deleted claim's volume of reclaim policy Delete, on the node that holds its disk
(Kubernetes' volume deleter): the controller's `VolumeReclaimRequested` (routed here) asks
for `DeleteDisk`, noted as asked (`DiskAsked`: a decision made again in the same delivery
asks once); what the executor reports comes back as `DiskDeleted`, answered with
`VolumeReclaimed` (its error, if any), after which the controller deletes the PV. A
request delivered again after a restart deletes again (a disk already gone is no error)
and answers with the same id, a duplicate. Pure."""

from __future__ import annotations

import msgspec

from events.catalog import VolumeReclaimed, VolumeReclaimRequested
from events.envelope import Cause, Stored, output_meta
from events.meta import Aggregate
from services.runtime.reactor import Note


class DeleteDisk(msgspec.Struct, frozen=True):
    """Delete the claim's disk (`services/launcher/storage.py: claim_path`)."""

    volume: Aggregate  # the PV's
    namespace: str
    claim: str
    cause: Cause


class DiskAsked(msgspec.Struct, frozen=True):
    """The handler's note: the request (its event id) is being carried out."""

    request: str


class DiskDeleted(msgspec.Struct, frozen=True):
    volume: Aggregate
    cause: Cause
    error: str = ""


def plan(asked: set[str], stored: Stored) -> list[DeleteDisk | Note[DiskAsked]]:
    """`asked`: the requests being carried out (the handler's state)."""
    ev = stored.event
    if not isinstance(ev, VolumeReclaimRequested) or ev.meta.event_id in asked:
        return []
    cause = Cause(ev.meta.correlation_id, ev.meta.event_id, stored.seq)
    delete = DeleteDisk(ev.meta.aggregate, ev.namespace, ev.claim, cause)
    return [delete, Note(DiskAsked(ev.meta.event_id))]


def observe(asked: set[str], obs: DiskAsked | DiskDeleted) -> None:
    if isinstance(obs, DiskAsked):
        asked.add(obs.request)
    else:
        asked.discard(obs.cause.event_id)


def answer(done: DiskDeleted, node: str, service: str, now: float) -> VolumeReclaimed:
    """Routed to this node (its answer's subject is the one it may publish)."""
    key = f"reclaimed/{done.cause.event_id}"
    meta = output_meta(service, node, done.volume, key, now, done.cause, node)
    return VolumeReclaimed(meta=meta, error=done.error)
