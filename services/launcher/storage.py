"""Disk images for a qemu-mode domain, prepared by its launcher before it defines it.

- containerDisk: `<image_dir>/<image name>` (the reference's last path segment without the
  tag or digest, tried as is and with .qcow2/.img/.raw), used read-only as the backing file
  of a per-VMI qcow2 overlay, so the guest's writes never touch the image. No such image
  → a blank qcow2 of `default_size` (the guest then stops in the firmware: no boot disk).
- emptyDisk: a blank qcow2 of its capacity.
- cloudInitNoCloud: a NoCloud seed ISO (volume id `cidata`: user-data, meta-data and
  network-config when given) made with cloud-localds, genisoimage, mkisofs or xorriso,
  whichever is installed; with none of them the disk is skipped (not attached) and a
  warning logged.
- hostDisk with a path: used as is.
- Anything else (PVCs, DataVolumes, ...): a blank qcow2 of `default_size`.

Everything lives in `<disk_dir>/<domain>/`. In qemu mode every node on this machine uses
the same disk_dir, like shared storage, so live migration copies memory only.
"""

from __future__ import annotations

import json
import logging
import shutil
import subprocess
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from events.quantity import parse_quantity

log = logging.getLogger("virtstream.launcher.storage")

DEFAULT_DISK_SIZE = "1Gi"
_IMAGE_SUFFIXES = ("", ".qcow2", ".img", ".raw", ".iso")


def image_name(reference: str) -> str:
    """registry:5000/kubevirt/cirros-container-disk-demo:devel → cirros-container-disk-demo"""
    last = reference.rsplit("/", 1)[-1]
    return last.split("@", 1)[0].split(":", 1)[0]


def find_image(image_dir: str | None, reference: str) -> Path | None:
    if not image_dir:
        return None
    name = image_name(reference)
    for candidate in (name, reference.replace("/", "_")):
        for suffix in _IMAGE_SUFFIXES:
            path = Path(image_dir) / f"{candidate}{suffix}"
            if path.is_file():
                return path
    return None


def iso_tool() -> str | None:
    for tool in ("cloud-localds", "genisoimage", "mkisofs", "xorriso"):
        if shutil.which(tool):
            return tool
    return None


def prepare_disks(
    vmi: Mapping[str, Any],
    domain: str,
    disk_dir: str,
    *,
    image_dir: str | None = None,
    default_size: str = DEFAULT_DISK_SIZE,
) -> dict[str, str]:
    """Create the disk files of a VMI's volumes; returns disk name → path."""
    spec = vmi.get("spec") or {}
    volumes = {v.get("name"): v for v in spec.get("volumes") or []}
    disks = ((spec.get("domain") or {}).get("devices") or {}).get("disks") or []
    directory = Path(disk_dir) / domain
    directory.mkdir(parents=True, exist_ok=True)
    paths: dict[str, str] = {}
    for disk in disks:
        name = disk["name"]
        path = _prepare_volume(volumes.get(name) or {}, name, directory, image_dir, default_size)
        if path is not None:
            paths[name] = str(path)
    return paths


def skipped_disks(vmi: Mapping[str, Any], paths: Mapping[str, str]) -> list[str]:
    disks = ((vmi.get("spec") or {}).get("domain") or {}).get("devices") or {}
    return [d["name"] for d in disks.get("disks") or [] if d["name"] not in paths]


def remove_disks(domain: str, disk_dir: str) -> None:
    shutil.rmtree(Path(disk_dir) / domain, ignore_errors=True)


def _prepare_volume(
    volume: Mapping[str, Any],
    name: str,
    directory: Path,
    image_dir: str | None,
    default_size: str,
) -> Path | None:
    overlay = directory / f"{name}.qcow2"
    if "containerDisk" in volume:
        image = find_image(image_dir, str((volume["containerDisk"] or {}).get("image", "")))
        if image is not None:
            return _overlay(image, overlay)
        log.info("no image for disk %s in %s: blank %s disk", name, image_dir, default_size)
        return _blank(overlay, default_size)
    if "emptyDisk" in volume:
        return _blank(overlay, str((volume["emptyDisk"] or {}).get("capacity") or default_size))
    if "hostDisk" in volume and (volume["hostDisk"] or {}).get("path"):
        return Path(volume["hostDisk"]["path"])
    for key in ("cloudInitNoCloud", "cloudInitConfigDrive"):
        if key in volume:
            return _nocloud_iso(volume[key] or {}, directory / f"{name}.iso", name)
    return _blank(overlay, default_size)


def _qemu_img(*args: str) -> str:
    done = subprocess.run(["qemu-img", *args], capture_output=True, text=True)
    if done.returncode != 0:
        raise ValueError(f"qemu-img {args[0]} failed: {done.stderr.strip()}")
    return done.stdout


def _blank(path: Path, size: str) -> Path:
    if not path.exists():  # a re-run launcher keeps the guest's disk
        _qemu_img("create", "-q", "-f", "qcow2", str(path), str(parse_quantity(size)))
    return path


def _overlay(image: Path, path: Path) -> Path:
    if not path.exists():
        fmt = json.loads(_qemu_img("info", "--output=json", str(image)))["format"]
        _qemu_img("create", "-q", "-f", "qcow2", "-b", str(image.resolve()), "-F", fmt, str(path))
    return path


def _nocloud_iso(source: Mapping[str, Any], path: Path, name: str) -> Path | None:
    tool = iso_tool()
    if tool is None:
        log.warning(
            "cloud-init disk %s skipped: no cloud-localds, genisoimage, mkisofs or xorriso", name
        )
        return None
    files = {
        "user-data": source.get("userData") or "",
        "meta-data": f"instance-id: {path.parent.name}\nlocal-hostname: {path.parent.name}\n",
    }
    if source.get("networkData"):
        files["network-config"] = source["networkData"]
    with tempfile.TemporaryDirectory(prefix="vs-nocloud-") as tmp:
        for file_name, content in files.items():
            (Path(tmp) / file_name).write_text(content)
        seed = [str(Path(tmp) / n) for n in files]
        match tool:
            case "cloud-localds":
                net = ["--network-config", seed[2]] if len(seed) > 2 else []
                command = ["cloud-localds", *net, str(path), seed[0], seed[1]]
            case "xorriso":
                command = ["xorriso", "-as", "mkisofs", "-quiet", "-output", str(path),
                           "-volid", "cidata", "-joliet", "-rock", *seed]  # fmt: skip
            case _:
                command = [tool, "-quiet", "-output", str(path), "-volid", "cidata",
                           "-joliet", "-rock", *seed]  # fmt: skip
        done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        raise ValueError(f"{tool} failed for cloud-init disk {name}: {done.stderr.strip()}")
    return path
