"""The handler's DataVolume imports (CDI's importer pod, here the node's handler), pure:
the requests routed to this node (`ImportRequested` on a DataVolume), the import the
executor runs for each, and the events that answer it: `ImportProgressed` at each tenth
of the way (the executor reports only those, so a large image is ten events, not one a
chunk) and `ImportFinished`.

A request is answered once: its job is done when `ImportFinished` is folded (it is routed
back to this node) or when the executor reported it. One not finished after a restart is
imported again (the claim's disk is replaced only by a complete import).

An upload (source `upload`, CDI's upload server) is the same job in two steps: the
request is answered at once with `UploadReady` (this node takes the bytes), and the
import runs once the api's `UploadReceived` says where it staged them."""

from __future__ import annotations

from typing import Any, assert_never

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
    VolumeReclaimed,
    VolumeReclaimRequested,
    VolumesCopied,
    VolumesCopyRequested,
)
from events.envelope import Cause, Stored, output_meta
from services.handler.volumes import job_key  # one key per job, copies and imports alike


class ImportJob(msgspec.Struct, kw_only=True):
    request: ImportRequested
    request_seq: int = 0  # its stream sequence: the answers' `causation_seq`
    running: bool = False
    done: bool = False
    ready: bool = False  # an upload's UploadReady is recorded
    received: UploadReceived | None = None  # an upload's bytes, staged by the api

    @property
    def upload(self) -> bool:
        return "upload" in self.request.source


class RunImport(msgspec.Struct, frozen=True):
    """Action: fill the claim `claim` of `namespace` from `source`, of `size`."""

    key: str
    namespace: str
    claim: str
    source: dict[str, Any]
    size: str


class ImportStarted(msgspec.Struct, frozen=True):
    """Note: the executor has the job."""

    key: str


class ImportProgress(msgspec.Struct, frozen=True):
    """Observation: the import passed another tenth (`percent`, 0-100)."""

    key: str
    percent: float


class ImportDone(msgspec.Struct, frozen=True):
    """Observation: the executor's result ("" = the claim holds the image)."""

    key: str
    error: str = ""


Imports = dict[str, ImportJob]


def fold(jobs: Imports, stored: Stored) -> None:
    event = stored.event
    if not isinstance(event, ResourceEvent):
        return
    match event:
        case ImportRequested():
            new = ImportJob(request=event, request_seq=stored.seq)
            jobs.setdefault(job_key(event.meta.aggregate), new)
        case ImportFinished():
            job = jobs.get(job_key(event.meta.aggregate))
            if job is not None:
                job.done, job.running = True, False
        case UploadReady():
            job = jobs.get(job_key(event.meta.aggregate))
            if job is not None:
                job.ready = True
        case UploadReceived():
            job = jobs.get(job_key(event.meta.aggregate))
            if job is not None and job.received is None:
                job.received = event
        case (
            ResourceCreated()
            | ResourceUpdated()
            | ResourceStatusChanged()
            | ResourceDeleted()
            | MetadataChanged()
            | ImportProgressed()
            | VolumesCopyRequested()
            | VolumesCopied()
            | VolumeReclaimRequested()
            | VolumeReclaimed()
        ):
            pass  # the DataVolume itself, its controller's
        case _:
            assert_never(event)


def observe(jobs: Imports, obs: ImportStarted | ImportProgress | ImportDone) -> None:
    job = jobs.get(obs.key)
    if job is None:
        return
    match obs:
        case ImportStarted():
            job.running = True
        case ImportProgress():
            pass
        case ImportDone():
            job.done, job.running = True, False


def plan(
    jobs: Imports, key: str, node: str, service: str, now: float
) -> list[RunImport | ImportStarted | Event]:
    """What a job needs next: its import run; an upload's `UploadReady` until it is
    recorded, then, once its bytes are staged, the import of the staged file."""
    job = jobs.get(key)
    if job is None or job.done or job.running:
        return []
    req = job.request
    agg = req.meta.aggregate
    source = dict(req.source)
    if job.upload:
        if job.received is None:
            if job.ready:
                return []
            cause = Cause(req.meta.correlation_id, req.meta.event_id, job.request_seq)
            meta = output_meta(service, node, agg, f"upload-ready/{req.meta.event_id}", now,
                               cause, node)  # fmt: skip
            return [UploadReady(meta=meta)]
        source = {"upload": {"file": job.received.file, "size": job.received.size}}
    run = RunImport(key, agg.namespace, req.claim, source, req.size)
    return [run, ImportStarted(key)]


def answer(
    jobs: Imports, obs: ImportProgress | ImportDone, node: str, service: str, now: float
) -> Event | None:
    job = jobs.get(obs.key)
    if job is None:
        return None
    req = job.request
    step = f"progress/{int(obs.percent // 10)}" if isinstance(obs, ImportProgress) else "done"
    cause = Cause(req.meta.correlation_id, req.meta.event_id, job.request_seq)
    key = f"import-{step}/{req.meta.event_id}"
    meta = output_meta(service, node, req.meta.aggregate, key, now, cause, node)
    if isinstance(obs, ImportProgress):
        return ImportProgressed(meta=meta, progress=f"{obs.percent:.2f}%")
    return ImportFinished(meta=meta, error=obs.error)
