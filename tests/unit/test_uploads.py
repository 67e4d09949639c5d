"""CDI's uploads, pure: the DataVolume controller's claim for an upload source and the
phases its events give (UploadScheduled, UploadReady, Succeeded) with CDI's annotations
and Events; the handler's upload job (UploadReady once, the staged file imported once it
is received); the upload tokens (a grant for one claim, signed, short-lived); the
import of a staged file on real files with qemu-img."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from core import upload_tokens
from events.catalog import (
    ImportFinished,
    ImportRequested,
    ResourceCreated,
    UploadReady,
    UploadReceived,
)
from events.envelope import Stored
from events.meta import ResourceKind
from projections import kube_events, storage
from services.handler import imports
from services.handler.importer import run_import
from services.launcher.storage import claim_path, staged_upload, uploads_dir
from tests.factories import meta
from tests.unit.test_controller_world import of
from tests.unit.test_storage import claim, claim_manifest, world

KEY = b"k" * 32


def upload_dv(name: str = "up") -> dict[str, Any]:
    return {
        "apiVersion": "cdi.kubevirt.io/v1beta1",
        "kind": "DataVolume",
        "metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}"},
        "spec": {
            "source": {"upload": {}},
            "storage": {"resources": {"requests": {"storage": "1Gi"}}},
        },
    }


def test_an_upload_data_volume_goes_through_cdis_upload_phases() -> None:
    w = world()
    out = w.run(ResourceCreated(meta=w.m(ResourceKind.DATA_VOLUME, "up"), manifest=upload_dv()))
    table = w.state.cluster.resources[ResourceKind.DATA_VOLUME]

    def phase() -> str:
        return str(table["default/up"].status["phase"])

    notes = storage.annotations_of(claim(w, "up"))
    assert notes["cdi.kubevirt.io/storage.upload.target"] == ""
    assert "cdi.kubevirt.io/storage.import.source" not in notes
    [request] = of(out, ImportRequested)
    assert request.source == {"upload": {}} and request.meta.node == "node-1"
    assert phase() == "UploadScheduled"
    assert storage.annotations_of(claim(w, "up"))["cdi.kubevirt.io/storage.pod.ready"] == "false"
    w.run(UploadReady(meta=w.m(ResourceKind.DATA_VOLUME, "up", "node-1")))
    assert phase() == "UploadReady"
    notes = storage.annotations_of(claim(w, "up"))
    assert notes["cdi.kubevirt.io/storage.pod.phase"] == "Running"
    assert notes["cdi.kubevirt.io/storage.pod.ready"] == "true"
    received = UploadReceived(meta=w.m(ResourceKind.DATA_VOLUME, "up", "node-1"), file="f", size=9)
    w.run(received)
    assert phase() == "UploadReady"  # CDI's phase while the server processes the bytes
    w.run(ImportFinished(meta=w.m(ResourceKind.DATA_VOLUME, "up", "node-1")))
    dv = table["default/up"]
    assert dv.status["phase"] == "Succeeded"
    running = next(c for c in dv.status["conditions"] if c["type"] == "Running")
    assert (running["reason"], running["message"]) == ("Completed", "Upload Complete")
    notes = storage.annotations_of(claim(w, "up"))
    assert notes["cdi.kubevirt.io/storage.pod.phase"] == "Succeeded"
    assert notes["cdi.kubevirt.io/storage.pod.ready"] == "false"
    assert notes["cdi.kubevirt.io/storage.condition.running.message"] == "Upload Complete"


def test_a_failed_upload_fails_the_data_volume_with_its_reason() -> None:
    w = world()
    w.run(ResourceCreated(meta=w.m(ResourceKind.DATA_VOLUME, "up"), manifest=upload_dv()))
    w.run(UploadReady(meta=w.m(ResourceKind.DATA_VOLUME, "up", "node-1")))
    w.run(ImportFinished(meta=w.m(ResourceKind.DATA_VOLUME, "up", "node-1"), error="bad image"))
    dv = w.state.cluster.resources[ResourceKind.DATA_VOLUME]["default/up"]
    running = next(c for c in dv.status["conditions"] if c["type"] == "Running")
    assert (dv.status["phase"], running["message"]) == ("Failed", "bad image")


def test_the_upload_events_in_cdis_words() -> None:
    w = world()
    w.run(ResourceCreated(meta=w.m(ResourceKind.DATA_VOLUME, "up"), manifest=upload_dv()))
    cluster = w.state.cluster

    def said(event: Any) -> tuple[str, str, str]:
        stored = Stored(seq=1, subject="s", time=1.0, event=event)
        [o] = kube_events.occurrences(stored, cluster)
        return o.type, o.reason, o.message

    at = meta(ResourceKind.DATA_VOLUME, "up", node="node-1")
    request = ImportRequested(meta=at, claim="up", source={"upload": {}}, size="1Gi")
    assert said(request) == ("Normal", "UploadScheduled", "Upload into up scheduled")
    assert said(UploadReady(meta=at)) == ("Normal", "UploadReady", "Upload into up ready")
    done = ImportFinished(meta=at)
    assert said(done) == ("Normal", "UploadSucceeded", "Successfully uploaded into up")
    failed = ImportFinished(meta=at, error="qemu-img convert failed: x")
    assert said(failed) == (
        "Warning",
        "UploadFailed",
        "Upload into up failed: qemu-img convert failed: x",
    )


def test_the_handler_says_ready_once_and_imports_what_was_received() -> None:
    jobs: imports.Imports = {}
    at = meta(ResourceKind.DATA_VOLUME, "up", node="node-1")
    req = ImportRequested(meta=at, claim="up", source={"upload": {}}, size="1Gi")
    imports.fold(jobs, Stored(seq=4, subject="s", time=1.0, event=req))
    [key] = jobs
    [ready] = imports.plan(jobs, key, "node-1", "h", 2.0)
    assert isinstance(ready, UploadReady) and ready.meta.node == "node-1"
    assert ready.meta.causation_seq == 4
    [again] = imports.plan(jobs, key, "node-1", "h", 3.0)
    assert isinstance(again, UploadReady) and again.meta.event_id == ready.meta.event_id
    imports.fold(jobs, Stored(seq=5, subject="s", time=2.0, event=ready))
    assert imports.plan(jobs, key, "node-1", "h", 3.0) == []  # waits for the bytes
    received = UploadReceived(meta=at, file="up-1.upload", size=10)
    imports.fold(jobs, Stored(seq=6, subject="s", time=3.0, event=received))
    run, started = imports.plan(jobs, key, "node-1", "h", 4.0)
    assert isinstance(run, imports.RunImport)
    assert run.source == {"upload": {"file": "up-1.upload", "size": 10}}
    imports.observe(jobs, started)  # type: ignore[arg-type]
    assert imports.plan(jobs, key, "node-1", "h", 4.0) == []


def test_an_upload_job_survives_the_handlers_checkpoint() -> None:
    from services.handler.checkpoint import HandlerCodec
    from services.handler.reactor import HandlerState

    state = HandlerState()
    at = meta(ResourceKind.DATA_VOLUME, "up", node="node-1")
    req = ImportRequested(meta=at, claim="up", source={"upload": {}}, size="1Gi")
    imports.fold(state.imports, Stored(seq=1, subject="s", time=1.0, event=req))
    received = UploadReceived(meta=at, file="up-1.upload", size=10)
    imports.fold(state.imports, Stored(seq=2, subject="s", time=1.0, event=received))
    codec = HandlerCodec()
    again = codec.decode(codec.encode(state))
    [key] = again.imports
    assert again.imports[key].received == received


def test_a_token_grants_one_claim_for_five_minutes() -> None:
    token = upload_tokens.issue(KEY, "default", "up", 1000.0)
    grant = upload_tokens.verify(KEY, token, 1100.0)
    assert grant is not None and (grant.namespace, grant.name) == ("default", "up")
    assert upload_tokens.verify(KEY, token, 1000.0 + upload_tokens.LIFETIME) is None
    assert upload_tokens.verify(b"other" * 8, token, 1100.0) is None
    other = upload_tokens.issue(KEY, "default", "other", 1000.0)
    swapped = f"{other.partition('.')[0]}.{token.partition('.')[2]}"
    assert upload_tokens.verify(KEY, swapped, 1100.0) is None
    assert upload_tokens.verify(KEY, "", 1100.0) is None
    assert upload_tokens.verify(KEY, "garbage.sig", 1100.0) is None


@pytest.mark.skipif(shutil.which("qemu-img") is None, reason="needs qemu-img")
def test_a_staged_upload_becomes_the_claims_disk_and_goes(tmp_path: Path) -> None:
    disks = str(tmp_path / "disks")
    staged = staged_upload(uploads_dir(disks), "default", "up-1.upload")
    staged.parent.mkdir(parents=True)
    staged.write_bytes(b"uploaded!" + bytes(1 << 20))
    run = imports.RunImport("k", "default", "up", {"upload": {"file": staged.name}}, "8Mi")
    reported: list[float] = []
    assert run_import(run, disks, None, reported.append) == ""
    assert not staged.exists()
    assert reported == []  # no ImportProgressed: the phase stays UploadReady until done
    raw = tmp_path / "back.raw"
    disk = claim_path(disks, "default", "up")
    subprocess.run(["qemu-img", "convert", "-O", "raw", str(disk), str(raw)], check=True)
    assert raw.read_bytes()[:9] == b"uploaded!" and raw.stat().st_size == 8 << 20
    missing = imports.RunImport("k", "default", "up", {"upload": {"file": "../x"}}, "8Mi")
    assert run_import(missing, disks, None, lambda _: None) == "no staged upload '../x'"


def test_a_bare_upload_claim_gets_an_upload_server_and_cdis_annotations() -> None:
    """A claim no DataVolume makes, with CDI's upload target annotation (`image-upload
    pvc`): once bound, one ImportRequested with an upload source on the claim's aggregate;
    each step of the upload is folded into the claim's annotations, as CDI's upload
    controller writes them."""
    w = world()
    body = claim_manifest("bare", ["ReadWriteOnce"], "local", "16Mi")
    body["metadata"]["annotations"] = {"cdi.kubevirt.io/storage.upload.target": ""}
    out = w.settle(w.when(ResourceCreated(meta=w.m(ResourceKind.PVC, "bare"), manifest=body)))
    [request] = of(out, ImportRequested)
    assert request.meta.aggregate.kind == ResourceKind.PVC and request.source == {"upload": {}}
    assert request.meta.node == "node-1"
    notes = storage.annotations_of(claim(w, "bare"))
    assert notes["cdi.kubevirt.io/storage.pod.phase"] == "Pending"
    assert notes["cdi.kubevirt.io/storage.uploadPodName"] == "cdi-upload-bare"
    plain = claim_manifest("other", ["ReadWriteOnce"], "local")
    assert of(w.run(ResourceCreated(meta=w.m(ResourceKind.PVC, "other"), manifest=plain)),
              ImportRequested) == []  # fmt: skip
    w.run(UploadReady(meta=w.m(ResourceKind.PVC, "bare", "node-1")))
    notes = storage.annotations_of(claim(w, "bare"))
    assert notes["cdi.kubevirt.io/storage.pod.phase"] == "Running"
    assert notes["cdi.kubevirt.io/storage.pod.ready"] == "true"
    w.run(ImportFinished(meta=w.m(ResourceKind.PVC, "bare", "node-1"), error="bad image"))
    notes = storage.annotations_of(claim(w, "bare"))
    assert notes["cdi.kubevirt.io/storage.pod.phase"] == "Failed"
    assert notes["cdi.kubevirt.io/storage.condition.running.message"] == "bad image"
    assert (
        of(w.run(UploadReady(meta=w.m(ResourceKind.PVC, "bare", "node-1"))), ImportRequested) == []
    )
