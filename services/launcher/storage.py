"""Disk images for a qemu-mode domain, prepared by its launcher before it defines it.

- containerDisk: the image the catalogue (images.py) resolves the reference to, used
  read-only as the backing file of a per-VMI qcow2 overlay, so the guest's writes never
  touch the image. No such image → images.ErrImagePull before anything is created (the
  VMI fails with KubeVirt's image pull reason; no QEMU starts).
- firmware.kernelBoot.container: its kernel and initrd from the catalogue (kernel_boot()),
  booted directly by QEMU; the same ErrImagePull when missing.
- emptyDisk: a blank qcow2 of its capacity.
- cloudInitNoCloud: a NoCloud seed ISO (volume id `cidata`: user-data, meta-data with
  KubeVirt's instance-id `<name>.<namespace>` and local-hostname (spec.hostname, else the
  VMI's name), network-config when given; the *Base64 forms too) made with cloud-localds,
  genisoimage, mkisofs or xorriso, whichever is installed; with none of them the disk is
  skipped (not attached) and a warning logged.
- hostDisk with a path: used as is.
- persistentVolumeClaim and dataVolume: the claim's own qcow2,
  `<disk_dir>/volumes/<namespace>/<claim>.qcow2`, created blank (`default_size`) on first
  use and kept when the VMI goes: the VM's next VMI finds the guest's data. Snapshots copy
  these to `<disk_dir>/backups/<namespace>/<backup>.qcow2` and restores copy them back
  (`copy_volume`, run by the handler).
- Anything else: a blank qcow2 of `default_size`.

Everything else lives in `<disk_dir>/<domain>/` and goes with the launcher. In qemu mode
every node on this machine uses the same disk_dir, like shared storage, so live migration
copies memory only (a VMI with a claim is still not migrated: KubeVirt refuses non-RWX
claims).
"""

from __future__ import annotations

import base64
import contextlib
import json
import logging
import shutil
import subprocess
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from events.quantity import parse_quantity
from projections import claims
from services.launcher import cloud_config, images
from services.launcher.images import KernelBoot

log = logging.getLogger("virtstream.launcher.storage")

DEFAULT_DISK_SIZE = "1Gi"


def catalogue_dir(image_dir: str | None) -> Path:
    return Path(image_dir) if image_dir else images.default_image_dir()


def kernel_boot(vmi: Mapping[str, Any], image_dir: str | None) -> KernelBoot | None:
    """spec.domain.firmware.kernelBoot's kernel, initrd and cmdline, or None without one."""
    boot = ((vmi.get("spec") or {}).get("domain") or {}).get("firmware") or {}
    boot = boot.get("kernelBoot") or {}
    container = boot.get("container") or {}
    if not container:
        return None
    reference = str(container.get("image", ""))
    return images.find_kernel_boot(
        catalogue_dir(image_dir),
        reference,
        str(container.get("kernelPath") or ""),
        str(container.get("initrdPath") or ""),
        str(boot.get("kernelArgs") or ""),
    )


def _container_images(volumes: Mapping[str, Any], image_dir: str | None) -> dict[str, Path]:
    """Every containerDisk's image, resolved before anything is created: a missing one
    fails the setup with nothing left behind."""
    found: dict[str, Path] = {}
    for name, volume in volumes.items():
        if "containerDisk" in volume:
            reference = str((volume["containerDisk"] or {}).get("image", ""))
            found[name] = images.find_disk_image(catalogue_dir(image_dir), reference)
    return found


def iso_tool() -> str | None:
    """What builds the seed ISO: genisoimage, mkisofs or xorriso take a directory (the
    ConfigDrive layout, the rendered cloud-config); cloud-localds alone only NoCloud's
    three files."""
    for tool in ("genisoimage", "mkisofs", "xorriso", "cloud-localds"):
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
    container_images = _container_images(volumes, image_dir)
    kernel_boot(vmi, image_dir)  # the same check for a kernelBoot container
    directory = Path(disk_dir) / domain
    directory.mkdir(parents=True, exist_ok=True)
    paths: dict[str, str] = {}
    for disk in disks:
        name = disk["name"]
        volume = volumes.get(name) or {}
        if name in container_images:
            path: Path | None = _overlay(container_images[name], directory / f"{name}.qcow2")
        else:
            path = _prepare_volume(volume, name, directory, vmi, default_size)
        if path is not None:
            paths[name] = str(path)
    return paths


def hotplug_volume(
    vmi: Mapping[str, Any],
    volume: Mapping[str, Any],
    domain: str,
    disk_dir: str,
    *,
    default_size: str = DEFAULT_DISK_SIZE,
) -> str:
    """The file of a volume hot-plugged into the running domain (a claim's qcow2, created
    blank on first use as at start)."""
    if not claim_name(volume):
        raise ValueError(f"volume {volume.get('name')} is not a PVC or DataVolume")
    directory = Path(disk_dir) / domain
    path = _prepare_volume(volume, str(volume.get("name")), directory, vmi, default_size)
    assert path is not None
    return str(path)


def skipped_disks(vmi: Mapping[str, Any], paths: Mapping[str, str]) -> list[str]:
    disks = ((vmi.get("spec") or {}).get("domain") or {}).get("devices") or {}
    return [d["name"] for d in disks.get("disks") or [] if d["name"] not in paths]


def remove_disks(domain: str, disk_dir: str) -> None:
    shutil.rmtree(Path(disk_dir) / domain, ignore_errors=True)


def _prepare_volume(
    volume: Mapping[str, Any],
    name: str,
    directory: Path,
    vmi: Mapping[str, Any],
    default_size: str,
) -> Path | None:
    overlay = directory / f"{name}.qcow2"
    if claim := claim_name(volume):
        namespace = (vmi.get("metadata") or {}).get("namespace") or "default"
        path = claim_path(str(directory.parent), namespace, claim)
        path.parent.mkdir(parents=True, exist_ok=True)
        # the claim's size (the pod's annotation: the claim object's, else what its VM's
        # dataVolumeTemplate requests), else 1Gi; a disk smaller than an expanded claim grows
        size = claims.sizes_of(dict(vmi)).get(claim)
        if size and path.exists():
            _grown(path, size)
        return _blank(path, size or default_size)
    if "emptyDisk" in volume:
        return _blank(overlay, str((volume["emptyDisk"] or {}).get("capacity") or default_size))
    if "hostDisk" in volume and (volume["hostDisk"] or {}).get("path"):
        return Path(volume["hostDisk"]["path"])
    for key in ("cloudInitNoCloud", "cloudInitConfigDrive"):
        if key in volume:
            config_drive = key == "cloudInitConfigDrive"
            return _nocloud_iso(
                volume[key] or {}, directory / f"{name}.iso", name, vmi, config_drive
            )
    return _blank(overlay, default_size)


def claim_name(volume: Mapping[str, Any]) -> str:
    """The claim a persistentVolumeClaim or dataVolume volume names ("" for the others)."""
    if "persistentVolumeClaim" in volume:
        return str((volume["persistentVolumeClaim"] or {}).get("claimName") or "")
    if "dataVolume" in volume:
        return str((volume["dataVolume"] or {}).get("name") or "")
    return ""


def claim_path(disk_dir: str, namespace: str, claim: str) -> Path:
    return Path(disk_dir) / "volumes" / namespace / f"{claim}.qcow2"


def uploads_dir(disk_dir: str) -> Path:
    """Where the upload proxy stages uploads for the handlers (the api's `--upload-dir`)."""
    return Path(disk_dir) / "uploads"


def staged_upload(uploads: Path, namespace: str, file: str) -> Path:
    """An upload's bytes as staged: one file a namespace's directory, of a plain name."""
    if not file or "/" in file or file.startswith("."):
        raise ValueError(f"no staged upload {file!r}")
    return uploads / namespace / file


def backup_path(disk_dir: str, namespace: str, backup: str) -> Path:
    return Path(disk_dir) / "backups" / namespace / f"{backup}.qcow2"


def copy_volume(source: Path, target: Path) -> None:
    """A whole copy of a qcow2 (`qemu-img convert`; `-U` reads an image a paused QEMU
    still holds), written to a temporary file renamed when complete, so a failed copy
    leaves the target as it was."""
    if not source.exists():
        raise ValueError(f"volume {source.name} has no disk at {source.parent}")
    target.parent.mkdir(parents=True, exist_ok=True)
    part = target.with_suffix(".part")
    try:
        _qemu_img("convert", "-U", "-O", "qcow2", str(source), str(part))
        part.replace(target)
    finally:
        part.unlink(missing_ok=True)


def _qemu_img(*args: str) -> str:
    done = subprocess.run(["qemu-img", *args], capture_output=True, text=True)
    if done.returncode != 0:
        raise ValueError(f"qemu-img {args[0]} failed: {done.stderr.strip()}")
    return done.stdout


def _blank(path: Path, size: str) -> Path:
    if not path.exists():  # a re-run launcher keeps the guest's disk
        _qemu_img("create", "-q", "-f", "qcow2", str(path), str(parse_quantity(size)))
    return path


def _grown(path: Path, size: str) -> None:
    """An existing claim's disk grown to its claim's (expanded) size, never shrunk."""
    wanted = parse_quantity(size)
    info = json.loads(_qemu_img("info", "-U", "--output=json", str(path)))
    if int(info.get("virtual-size") or 0) < wanted:
        # a disk another running guest holds (a shared claim) cannot grow now: it keeps its
        # size until a start finds it free
        with contextlib.suppress(ValueError):
            _qemu_img("resize", "-q", str(path), str(wanted))


def _overlay(image: Path, path: Path) -> Path:
    if not path.exists():
        fmt = json.loads(_qemu_img("info", "--output=json", str(image)))["format"]
        _qemu_img("create", "-q", "-f", "qcow2", "-b", str(image.resolve()), "-F", fmt, str(path))
    return path


def _decoded(source: Mapping[str, Any], key: str) -> str:
    if source.get(key):
        return str(source[key])
    encoded = source.get(f"{key}Base64")
    return base64.b64decode(encoded).decode() if encoded else ""


def seed_files(
    source: Mapping[str, Any], vmi: Mapping[str, Any], config_drive: bool
) -> dict[str, str]:
    """The seed disk's files (path → content): NoCloud's `user-data`, `meta-data` (KubeVirt's
    `instance-id: <name>.<namespace>`, `local-hostname`) and `network-config`, or
    ConfigDrive's `openstack/latest/{user_data,meta_data.json,network_data.json}`; with a
    `#cloud-config`, also the scripts the guest runs for it (`cloud_config.py`)."""
    meta = vmi.get("metadata") or {}
    vmi_name, namespace = meta.get("name") or "", meta.get("namespace") or "default"
    hostname = (vmi.get("spec") or {}).get("hostname") or vmi_name
    user_data = _decoded(source, "userData")
    network = _decoded(source, "networkData")
    if config_drive:
        instance = {"uuid": f"{vmi_name}.{namespace}", "hostname": hostname, "name": vmi_name}
        files = {
            "openstack/latest/user_data": user_data,
            "openstack/latest/meta_data.json": json.dumps(instance) + "\n",
        }
        if network:
            files["openstack/latest/network_data.json"] = network
    else:
        files = {
            "user-data": user_data,
            "meta-data": f"instance-id: {vmi_name}.{namespace}\nlocal-hostname: {hostname}\n",
        }
        if network:
            files["network-config"] = network
    user = images.default_user(boot_image(vmi))
    if cloud_config.is_cloud_config(user_data):
        boot, final = cloud_config.render(cloud_config.parse(user_data), user)
    elif user != images.ROOT:  # cloud-init makes the image's default user whatever runs
        boot, final = cloud_config.render({}, user)
    else:
        return files
    files["virtstream/boot.sh"] = boot
    files["virtstream/final.sh"] = final
    return files


def boot_image(vmi: Mapping[str, Any]) -> str | None:
    """The reference of the VMI's first containerDisk (the image it boots)."""
    for volume in (vmi.get("spec") or {}).get("volumes") or ():
        if image := (volume.get("containerDisk") or {}).get("image"):
            return str(image)
    return None


def _nocloud_iso(
    source: Mapping[str, Any], path: Path, name: str, vmi: Mapping[str, Any], config_drive: bool
) -> Path | None:
    tool = iso_tool()
    if tool is None:
        log.warning(
            "cloud-init disk %s skipped: no cloud-localds, genisoimage, mkisofs or xorriso", name
        )
        return None
    files = seed_files(source, vmi, config_drive)
    label = "config-2" if config_drive else "cidata"
    with tempfile.TemporaryDirectory(prefix="vs-seed-") as tmp:
        tree = Path(tmp) / "seed"
        for file_name, content in files.items():
            (tree / file_name).parent.mkdir(parents=True, exist_ok=True)
            (tree / file_name).write_text(content)
        match tool:
            case "cloud-localds":
                if config_drive or any("/" in f for f in files):
                    raise ValueError(
                        f"cloud-init disk {name}: cloud-localds makes NoCloud seeds of plain "
                        "user-data only (install genisoimage: bash ops/install.sh --qemu)"
                    )
                seed = [str(tree / n) for n in files]
                net = ["--network-config", seed[2]] if len(seed) > 2 else []
                command = ["cloud-localds", *net, str(path), seed[0], seed[1]]
            case "xorriso":
                command = ["xorriso", "-as", "mkisofs", "-quiet", "-output", str(path),
                           "-volid", label, "-joliet", "-rock", str(tree)]  # fmt: skip
            case _:
                command = [tool, "-quiet", "-output", str(path), "-volid", label,
                           "-joliet", "-rock", str(tree)]  # fmt: skip
        done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        raise ValueError(f"{tool} failed for cloud-init disk {name}: {done.stderr.strip()}")
    return path
