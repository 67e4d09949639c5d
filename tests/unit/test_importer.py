"""The handler's imports: the pure job (a request answered once, progress a tenth at a
time) and the executor on real files with qemu-img: blank, a registry image from the
catalogue, a clone of another claim, grown to the claim's size; a failure leaves no
disk and says why in one line."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from events.catalog import ImportFinished, ImportProgressed, ImportRequested
from events.envelope import Stored
from events.meta import ResourceKind
from services.handler import imports
from services.handler.importer import run_import
from services.launcher.storage import claim_path
from tests.factories import meta

needs_qemu_img = pytest.mark.skipif(shutil.which("qemu-img") is None, reason="needs qemu-img")


def request(source: dict[str, object], size: str = "64Mi") -> ImportRequested:
    return ImportRequested(
        meta=meta(ResourceKind.DATA_VOLUME, "dv", node="node-1"),
        claim="dv",
        source=source,
        size=size,
    )


def test_a_request_is_run_once_and_answered_a_tenth_at_a_time() -> None:
    jobs: imports.Imports = {}
    req = request({"blank": {}})
    imports.fold(jobs, Stored(seq=7, subject="s", time=1.0, event=req))
    [key] = jobs
    run, started = imports.plan(jobs, key, "node-1", "h", 1.0)
    assert isinstance(run, imports.RunImport) and run.claim == "dv" and run.size == "64Mi"
    imports.observe(jobs, started)  # type: ignore[arg-type]
    assert imports.plan(jobs, key, "node-1", "h", 1.0) == []  # running: not started twice
    progress = imports.answer(jobs, imports.ImportProgress(key, 45.2), "node-1", "h", 2.0)
    again = imports.answer(jobs, imports.ImportProgress(key, 47.0), "node-1", "h", 2.0)
    assert isinstance(progress, ImportProgressed) and progress.progress == "45.20%"
    assert again is not None and again.meta.event_id == progress.meta.event_id  # same tenth
    done = imports.answer(jobs, imports.ImportDone(key), "node-1", "h", 3.0)
    assert isinstance(done, ImportFinished) and done.error == ""
    assert done.meta.causation_seq == 7
    imports.fold(jobs, Stored(seq=8, subject="s", time=3.0, event=done))
    assert imports.plan(jobs, key, "node-1", "h", 1.0) == []


def _run(source: dict[str, object], disks: Path, images: Path | None = None) -> str:
    jobs: imports.Imports = {}
    imports.fold(jobs, Stored(seq=1, subject="s", time=1.0, event=request(source)))
    [key] = jobs
    run = imports.plan(jobs, key, "node-1", "h", 1.0)[0]
    assert isinstance(run, imports.RunImport)
    return run_import(run, str(disks), str(images) if images else None, lambda _: None)


def _virtual_size(path: Path) -> int:
    out = subprocess.run(["qemu-img", "info", "--output=json", str(path)], capture_output=True)
    return int(json.loads(out.stdout)["virtual-size"])


@needs_qemu_img
def test_blank_registry_and_clone_make_the_claims_disk(tmp_path: Path) -> None:
    disks = tmp_path / "disks"
    assert _run({"blank": {}}, disks) == ""
    disk = claim_path(str(disks), "default", "dv")
    assert _virtual_size(disk) == 64 << 20
    images = tmp_path / "images"
    images.mkdir()
    (images / "fedora.raw").write_bytes(b"fedora!" + bytes(1 << 20))
    assert (
        _run({"registry": {"url": "docker://quay.io/containerdisks/fedora:41"}}, disks, images)
        == ""
    )
    assert _virtual_size(disk) == 64 << 20  # grown to the claim's size
    source = claim_path(str(disks), "default", "golden")
    disk.replace(source)
    assert _run({"pvc": {"namespace": "default", "name": "golden"}}, disks) == ""
    raw = tmp_path / "back.raw"
    subprocess.run(["qemu-img", "convert", "-O", "raw", str(disk), str(raw)], check=True)
    assert raw.read_bytes()[:7] == b"fedora!"


@needs_qemu_img
def test_a_failed_import_leaves_no_disk_and_says_why(tmp_path: Path) -> None:
    disks = tmp_path / "disks"
    error = _run({"pvc": {"name": "missing"}}, disks)
    assert error.startswith("no disk at ") and "missing.qcow2" in error
    assert not claim_path(str(disks), "default", "dv").exists()
    error = _run({"http": {"url": "ftp://example/disk.img"}}, disks)
    assert error == "unsupported URL 'ftp://example/disk.img': http or https only"
    assert list((disks / "volumes" / "default").iterdir()) == []


def test_a_pending_import_survives_the_handlers_checkpoint() -> None:
    from services.handler.checkpoint import HandlerCodec
    from services.handler.reactor import HandlerState

    state = HandlerState()
    imports.fold(state.imports, Stored(seq=3, subject="s", time=1.0, event=request({"blank": {}})))
    codec = HandlerCodec()
    again = codec.decode(codec.encode(state))
    assert list(again.imports) == list(state.imports)
    [key] = again.imports
    assert isinstance(imports.plan(again.imports, key, "node-1", "h", 1.0)[0], imports.RunImport)
