"""The handler's DataVolume imports, carried out (CDI's importer): the claim's disk,
`<disk_dir>/volumes/<ns>/<claim>.qcow2`, filled from the source and grown to the claim's
size, written beside it and renamed when complete, so a failed import leaves no
half-written disk a VM could boot.

- http: the URL downloaded (progress: bytes of its Content-Length), then converted to
  qcow2 with `qemu-img convert` (any format qemu-img reads: qcow2, raw, vmdk, ...);
- blank: an empty qcow2 of the claim's size;
- pvc: another claim's disk copied whole (CDI's host-assisted clone);
- registry: `docker://<image>` found in the containerDisk catalogue (the images a
  containerDisk volume boots), converted;
- upload: the image the upload proxy staged (`<disk_dir>/uploads/<ns>/<file>`, raw or
  any format qemu-img reads), converted, the staged file removed whatever the outcome."""

from __future__ import annotations

import json
import shutil
import subprocess
import urllib.request
from collections.abc import Callable
from pathlib import Path

import structlog

from events.quantity import parse_quantity
from services.handler.imports import RunImport
from services.launcher import images, storage

log = structlog.get_logger()
CHUNK = 1 << 20
TIMEOUT = 30.0


def run_import(
    action: RunImport, disk_dir: str, image_dir: str | None, report: Callable[[float], None]
) -> str:
    """Run one import; "" when the claim holds the image, else the failure in one line.
    `report(percent)` is called as each tenth of the way is passed."""
    target = storage.claim_path(disk_dir, action.namespace, action.claim)
    target.parent.mkdir(parents=True, exist_ok=True)
    part = target.with_suffix(".import")
    download = target.with_suffix(".download")
    kind = next(iter(action.source), "blank")
    spec = action.source.get(kind) or {}
    try:
        match kind:
            case "http":
                _download(str(spec.get("url") or ""), download, report)
                _convert(download, part)
            case "pvc":
                ns = str(spec.get("namespace") or action.namespace)
                _convert(storage.claim_path(disk_dir, ns, str(spec.get("name") or "")), part)
            case "upload":
                uploads = storage.uploads_dir(disk_dir)
                staged = storage.staged_upload(
                    uploads, action.namespace, str(spec.get("file") or "")
                )
                try:
                    _convert(staged, part)
                finally:
                    staged.unlink(missing_ok=True)
            case "registry":
                reference = str(spec.get("url") or "").removeprefix("docker://")
                found = images.find_disk_image(storage.catalogue_dir(image_dir), reference)
                _convert(found, part)
            case _:
                _qemu_img("create", "-q", "-f", "qcow2", str(part), str(_bytes(action.size)))
        _grow(part, action.size)
        part.replace(target)
        if kind != "upload":  # an upload's phase stays UploadReady until it succeeds
            report(100.0)
    except Exception as e:  # a download, qemu-img or catalogue failure: reported, not raised
        log.warning("import failed", job=action.key, error=str(e))
        text = str(e).strip()
        return text.splitlines()[0] if text else repr(e)
    finally:
        part.unlink(missing_ok=True)
        download.unlink(missing_ok=True)
    log.info("imported", job=action.key, source=kind, claim=action.claim)
    return ""


def _download(url: str, path: Path, report: Callable[[float], None]) -> None:
    if not url.startswith(("http://", "https://")):
        raise ValueError(f"unsupported URL {url!r}: http or https only")
    with urllib.request.urlopen(url, timeout=TIMEOUT) as answer, path.open("wb") as out:
        total = int(answer.headers.get("Content-Length") or 0)
        done, tenth = 0, 0
        while chunk := answer.read(CHUNK):
            out.write(chunk)
            done += len(chunk)
            if total and done * 10 // total > tenth and done < total:
                tenth = done * 10 // total
                report(done * 100.0 / total)


def _convert(source: Path, target: Path) -> None:
    if not source.is_file():
        raise ValueError(f"no disk at {source}")
    _qemu_img("convert", "-U", "-O", "qcow2", str(source), str(target))


def _grow(path: Path, size: str) -> None:
    """The disk grown to the claim's size (never shrunk: an image larger than its claim
    keeps its size, as CDI's does when the claim rounds up)."""
    if not size:
        return
    info = json.loads(_qemu_img("info", "--output=json", str(path)))
    if int(info.get("virtual-size") or 0) < _bytes(size):
        _qemu_img("resize", "-q", str(path), str(_bytes(size)))


def _bytes(size: str) -> int:
    return parse_quantity(size) if size else 1 << 30


def _qemu_img(*args: str) -> str:
    if shutil.which("qemu-img") is None:
        raise ValueError("qemu-img is not installed on this node")
    done = subprocess.run(["qemu-img", *args], capture_output=True, text=True)
    if done.returncode != 0:
        raise ValueError(f"qemu-img {args[0]} failed: {done.stderr.strip()}")
    return done.stdout
