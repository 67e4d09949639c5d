"""The handler's volume copies for snapshots and restores, pure: the requests routed to
this node (`VolumesCopyRequested` on a snapshot content or a restore), the copy the
executor runs for each, and the `VolumesCopied` that answers it.

A request is answered once: its job is done when the answer is folded (it is routed back
to this node) or when the executor reported it. A request with no answer after a restart
is copied again (a copy replaces its target whole, so a repeat is harmless)."""

from __future__ import annotations

from typing import assert_never

import msgspec

from events.catalog import (
    Event,
    ImportFinished,
    ImportProgressed,
    ImportRequested,
    MetadataChanged,
    ResourceCreated,
    ResourceDeleted,
    ResourceEvent,
    ResourceStatusChanged,
    ResourceUpdated,
    UploadReady,
    UploadReceived,
    VolumeCopy,
    VolumeReclaimed,
    VolumeReclaimRequested,
    VolumesCopied,
    VolumesCopyRequested,
)
from events.envelope import Cause, Stored, output_meta
from events.meta import Aggregate


class CopyJob(msgspec.Struct, kw_only=True):
    request: VolumesCopyRequested
    request_seq: int = 0  # its stream sequence: the answer's `causation_seq`
    running: bool = False
    done: bool = False


class CopyVolumes(msgspec.Struct, frozen=True):
    """Action: copy each volume (claim → backup, or back when `restore`) in `namespace`,
    with `domain` (when not "") paused for the copy."""

    key: str
    namespace: str
    copies: tuple[VolumeCopy, ...]
    restore: bool
    domain: str = ""


class CopyStarted(msgspec.Struct, frozen=True):
    """Note: the executor has the job."""

    key: str


class VolumesCopyDone(msgspec.Struct, frozen=True):
    """Observation: the executor's result ("" = every copy done)."""

    key: str
    error: str = ""


Jobs = dict[str, CopyJob]


def job_key(agg: Aggregate) -> str:
    return f"{agg.kind}/{agg.namespace}/{agg.name}/{agg.uid}"


def fold(jobs: Jobs, stored: Stored) -> None:
    event = stored.event
    if not isinstance(event, ResourceEvent):
        return
    match event:
        case VolumesCopyRequested():
            new = CopyJob(request=event, request_seq=stored.seq)
            jobs.setdefault(job_key(event.meta.aggregate), new)
        case VolumesCopied():
            key = job_key(event.meta.aggregate)
            job = jobs.get(key)
            if job is not None:
                job.done, job.running = True, False
        case (
            ResourceCreated()
            | ResourceUpdated()
            | ResourceStatusChanged()
            | ResourceDeleted()
            | MetadataChanged()
            | ImportRequested()
            | ImportProgressed()
            | ImportFinished()
            | UploadReady()
            | UploadReceived()
            | VolumeReclaimRequested()
            | VolumeReclaimed()
        ):
            pass  # the object itself, the snapshot controller's
        case _:
            assert_never(event)


def observe(jobs: Jobs, obs: CopyStarted | VolumesCopyDone) -> None:
    job = jobs.get(obs.key)
    if job is None:
        return
    match obs:
        case CopyStarted():
            job.running = True
        case VolumesCopyDone():
            job.done, job.running = True, False


def plan(jobs: Jobs, key: str, domain: str) -> list[CopyVolumes | CopyStarted]:
    """The copy a pending job calls for (`domain`: the running domain of the request's VMI
    on this node, "" when it is not running here)."""
    job = jobs.get(key)
    if job is None or job.done or job.running:
        return []
    req = job.request
    agg = req.meta.aggregate
    copy = CopyVolumes(key, agg.namespace, req.copies, req.restore, domain)
    return [copy, CopyStarted(key)]


def answer(jobs: Jobs, done: VolumesCopyDone, node: str, service: str, now: float) -> Event | None:
    job = jobs.get(done.key)
    if job is None:
        return None
    req = job.request
    cause = Cause(req.meta.correlation_id, req.meta.event_id, job.request_seq)
    key = f"copied/{req.meta.event_id}"
    meta = output_meta(service, node, req.meta.aggregate, key, now, cause, node)
    return VolumesCopied(meta=meta, copies=req.copies, restore=req.restore, error=done.error)
