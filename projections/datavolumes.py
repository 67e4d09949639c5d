"""A DataVolume's status as CDI writes it, pure: the phase (Pending, ImportScheduled,
ImportInProgress, Succeeded, Failed), `progress`, and the conditions Bound, Ready and
Running; and the annotations CDI sets on the DataVolume's claim, which tools read to follow
an import. The importer's events (`ImportRequested`, `ImportProgressed`,
`ImportFinished`) are folded here into the DataVolume's status; the rest (Pending, Bound)
is its controller's (services/controller/datavolume.py)."""

from __future__ import annotations

import datetime as dt
from typing import Any

from events.catalog import (
    ImportFinished,
    ImportProgressed,
    ImportRequested,
    UploadReady,
    UploadReceived,
)

JSON = dict[str, Any]

# CDI's claim annotations (pkg/controller/common)
ENDPOINT = "cdi.kubevirt.io/storage.import.endpoint"
SOURCE = "cdi.kubevirt.io/storage.import.source"
CONTENT_TYPE = "cdi.kubevirt.io/storage.contentType"
POD_PHASE = "cdi.kubevirt.io/storage.pod.phase"
RUNNING_REASON = "cdi.kubevirt.io/storage.condition.running.reason"
RUNNING_MESSAGE = "cdi.kubevirt.io/storage.condition.running.message"
BOUND_REASON = "cdi.kubevirt.io/storage.condition.bound.reason"
CLONE_REQUEST = "k8s.io/CloneRequest"
CREATED_FOR = "cdi.kubevirt.io/createdForDataVolume"
POPULATED_FOR = "cdi.kubevirt.io/storage.populatedFor"
UPLOAD_TARGET = "cdi.kubevirt.io/storage.upload.target"  # the claim takes an upload
POD_READY = "cdi.kubevirt.io/storage.pod.ready"  # its upload server takes the bytes

PENDING, SCHEDULED, IN_PROGRESS = "Pending", "ImportScheduled", "ImportInProgress"
SUCCEEDED, FAILED = "Succeeded", "Failed"
CLONE_SCHEDULED, CLONE_IN_PROGRESS = "CloneScheduled", "CloneInProgress"
UPLOAD_SCHEDULED, UPLOAD_READY = "UploadScheduled", "UploadReady"
COMPLETE, UPLOAD_COMPLETE = "Import Complete", "Upload Complete"


def timestamp(at: float) -> str:
    return dt.datetime.fromtimestamp(int(at), dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def condition(old: JSON, ctype: str, status: str, reason: str, message: str, at: float) -> JSON:
    """One condition, its transition time kept while its status does not change."""
    prev = next((c for c in old.get("conditions") or [] if c.get("type") == ctype), None)
    same = prev is not None and prev.get("status") == status
    since = str(prev.get("lastTransitionTime")) if same and prev else timestamp(at)
    # the heartbeat is the transition: a status that only aged would be a new event a pass
    return {
        "type": ctype,
        "status": status,
        "reason": reason,
        "message": message,
        "lastHeartbeatTime": since,
        "lastTransitionTime": since,
    }


def conditions(old: JSON, claim: str, bound: bool, ready: bool, running: tuple[str, str, str],
               at: float) -> list[JSON]:  # fmt: skip
    """Bound, Ready, Running, as CDI orders them; `running`: (status, reason, message)."""
    return [
        condition(
            old,
            "Bound",
            "True" if bound else "False",
            "Bound" if bound else "Pending",
            f"PVC {claim} Bound" if bound else f"PVC {claim} Pending",
            at,
        ),
        condition(old, "Ready", "True" if ready else "False", "", "", at),
        condition(old, "Running", *running, at),
    ]


def is_clone(source: JSON) -> bool:
    return "pvc" in source


def is_upload(source: JSON) -> bool:
    return "upload" in source


def uploading(status: JSON) -> bool:
    return status.get("phase") in (UPLOAD_SCHEDULED, UPLOAD_READY)


Importing = ImportRequested | ImportProgressed | ImportFinished | UploadReady | UploadReceived


def imported(status: JSON, ev: Importing, at: float) -> JSON:
    """The DataVolume's status after one of its importer's events (an upload's: its
    upload server ready, the bytes received, then the same end as an import's)."""
    name = str(status.get("claimName") or ev.meta.aggregate.name)
    out: JSON = {**status, "claimName": name, "restartCount": 0}
    match ev:
        case ImportRequested(source=source):
            phase = SCHEDULED
            if is_clone(source):
                phase = CLONE_SCHEDULED
            elif is_upload(source):
                phase = UPLOAD_SCHEDULED
            out["phase"] = phase
            out["progress"] = "N/A"
            out["conditions"] = conditions(status, name, True, False, ("False", "", ""), at)
        case UploadReady():
            out["phase"] = UPLOAD_READY
            running = ("True", "Pod is running", "")
            out["conditions"] = conditions(status, name, True, False, running, at)
        case UploadReceived():
            pass  # CDI's phase stays UploadReady while the server processes the bytes
        case ImportProgressed(progress=progress):
            clone = status.get("phase") in (CLONE_SCHEDULED, CLONE_IN_PROGRESS)
            out["phase"] = CLONE_IN_PROGRESS if clone else IN_PROGRESS
            out["progress"] = progress
            running = ("True", "Pod is running", "")
            out["conditions"] = conditions(status, name, True, False, running, at)
        case ImportFinished(error=error):
            if error:
                out["phase"] = FAILED
                running = ("False", "Error", error)
                out["conditions"] = conditions(status, name, True, False, running, at)
            else:
                out["phase"] = SUCCEEDED
                out["progress"] = "100.0%"
                done = UPLOAD_COMPLETE if uploading(status) else COMPLETE
                running = ("False", "Completed", done)
                out["conditions"] = conditions(status, name, True, True, running, at)
    return out


UPLOAD_POD = "cdi.kubevirt.io/storage.uploadPodName"


def claim_upload_notes(claim: str, ev: Importing) -> dict[str, str]:
    """CDI's annotations on a claim no DataVolume owns after a step of its upload (there
    is no DataVolume status to hold them): the upload server asked for, ready, done."""
    match ev:
        case ImportRequested():
            return {POD_PHASE: "Pending", POD_READY: "false", UPLOAD_POD: f"cdi-upload-{claim}"}
        case UploadReady():
            return {POD_PHASE: "Running", POD_READY: "true", RUNNING_REASON: "Pod is running"}
        case ImportFinished(error=error):
            return {
                POD_PHASE: "Failed" if error else "Succeeded",
                POD_READY: "false",
                RUNNING_REASON: "Error" if error else "Completed",
                RUNNING_MESSAGE: error or UPLOAD_COMPLETE,
            }
        case ImportProgressed() | UploadReceived():
            return {}


def pod_phase(phase: str) -> tuple[str, str, str]:
    """The claim's (pod phase, running reason, running message) annotations for a phase."""
    if phase in (IN_PROGRESS, CLONE_IN_PROGRESS, UPLOAD_READY):
        return "Running", "Pod is running", ""
    if phase == SUCCEEDED:
        return "Succeeded", "Completed", COMPLETE
    if phase == FAILED:
        return "Failed", "Error", ""
    return "Pending", "", ""
