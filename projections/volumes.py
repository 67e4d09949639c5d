"""Hotplugged volumes (KubeVirt's addvolume/removevolume): the VMI's spec as the patch
leaves it, and `status.volumeStatus` of the volumes that come and go while it runs."""

from __future__ import annotations

from typing import Any

import msgspec

JSON = dict[str, Any]
_decode = msgspec.json.Decoder(dict[str, Any])


def claim_of(volume: JSON) -> str:
    """The claim a persistentVolumeClaim or dataVolume volume names ("" for the others:
    a DataVolume's claim has its name)."""
    if volume.get("persistentVolumeClaim") is not None:
        return str((volume["persistentVolumeClaim"] or {}).get("claimName") or "")
    if volume.get("dataVolume") is not None:
        return str((volume["dataVolume"] or {}).get("name") or "")
    return ""


def hotpluggable(volume: JSON) -> bool:
    source = volume.get("persistentVolumeClaim") or volume.get("dataVolume") or {}
    return bool(source.get("hotpluggable"))


def added(manifest_json: bytes, volume: JSON, disk: JSON) -> bytes:
    """The VMI manifest with the volume and its disk appended to its spec."""
    obj = _decode.decode(manifest_json)
    spec = obj.setdefault("spec", {})
    spec["volumes"] = [*(spec.get("volumes") or []), volume]
    devices = spec.setdefault("domain", {}).setdefault("devices", {})
    devices["disks"] = [*(devices.get("disks") or []), disk]
    return msgspec.json.encode(obj)


def removed(manifest_json: bytes, name: str) -> bytes:
    """The VMI manifest without the volume `name` and its disk."""
    obj = _decode.decode(manifest_json)
    spec = obj.get("spec") or {}
    spec["volumes"] = [v for v in spec.get("volumes") or [] if v.get("name") != name]
    devices = (spec.get("domain") or {}).get("devices") or {}
    if "disks" in devices:
        devices["disks"] = [d for d in devices["disks"] if d.get("name") != name]
    return msgspec.json.encode(obj)


def volume_status(spec: JSON, targets: tuple[tuple[str, str], ...], pod: str) -> list[JSON]:
    """KubeVirt's volumeStatus entries of the hotplugged volumes: Ready once attached
    (its target), Pending before, Detaching when removed from the spec but still there."""
    attached = dict(targets)
    out: list[JSON] = []
    wanted = [v for v in spec.get("volumes") or [] if hotpluggable(v)]
    for volume in wanted:
        name = str(volume.get("name"))
        entry: JSON = {"name": name, "hotplugVolume": {"attachPodName": pod}}
        if name in attached:
            entry |= {
                "target": attached[name],
                "phase": "Ready",
                "reason": "VolumeReady",
                "message": f"Successfully attach hotplugged volume {name} to VM",
            }
        else:
            entry |= {"target": "", "phase": "Pending", "reason": "VolumePending"}
        entry["persistentVolumeClaimInfo"] = {"claimName": claim_of(volume)}
        out.append(entry)
    names = {str(v.get("name")) for v in wanted}
    for name, target in targets:
        if name not in names:
            out.append(
                {
                    "name": name,
                    "target": target,
                    "phase": "Detaching",
                    "reason": "VolumeDetaching",
                    "hotplugVolume": {"attachPodName": pod},
                }
            )
    return out
