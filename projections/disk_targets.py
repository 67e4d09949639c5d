"""The device names a VMI's disks get in its domain (`vda`, `sdb`, ...), as libvirt is
asked for them: per bus prefix, in the order of `spec.domain.devices.disks`. The launcher
names the domain's disks with it (services/launcher/domain_xml.py) and the VMI's
`status.volumeStatus` shows the same targets (projections/render.py). Pure."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

# libvirt requires unique target names across buses: sata, scsi and usb all use sdX.
TARGET_PREFIX = {"virtio": "vd", "sata": "sd", "scsi": "sd", "usb": "sd"}


def target_name(prefix: str, index: int) -> str:
    """Linux disk naming: a..z, aa..az, ba.. (bijective base 26)."""
    letters = ""
    index += 1
    while index:
        index, rem = divmod(index - 1, 26)
        letters = chr(ord("a") + rem) + letters
    return prefix + letters


def device_and_bus(disk: Mapping[str, Any]) -> tuple[str, str]:
    if "cdrom" in disk:
        return "cdrom", (disk.get("cdrom") or {}).get("bus") or "sata"
    if "lun" in disk:
        return "lun", (disk.get("lun") or {}).get("bus") or "scsi"
    return "disk", (disk.get("disk") or {}).get("bus") or "sata"


def prefix_of(bus: str, name: str) -> str:
    prefix = TARGET_PREFIX.get(bus)
    if prefix is None:
        raise ValueError(f"unsupported disk bus {bus!r} for disk {name!r}")
    return prefix


def boot_targets(disks: list[Mapping[str, Any]]) -> dict[str, str]:
    """Each disk's target at the domain's start (a disk of an unknown bus: none)."""
    counters: dict[str, int] = {}
    out: dict[str, str] = {}
    for disk in disks:
        prefix = TARGET_PREFIX.get(device_and_bus(disk)[1])
        if prefix is None:
            continue
        index = counters.get(prefix, 0)
        counters[prefix] = index + 1
        out[str(disk.get("name"))] = target_name(prefix, index)
    return out
