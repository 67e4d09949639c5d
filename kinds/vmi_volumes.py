"""The VMI's addvolume and removevolume subresources: KubeVirt's volume hotplug, pure.

virt-api checks the options (400), that the VMI runs (409) and the volume's name and
source against the VMI's volumes (409, `verifyVolumeOption`'s words), then patches the
VMI's spec, which the update webhook checks (422: a hotplugged disk's bus must be scsi or
virtio). Here the patch is an event on the VMI routed to its node (`VMIVolumeAdded`,
`VMIVolumeRemoved`), whose handler attaches or detaches the disk; `dryRun: ["All"]`
checks and appends nothing. The HotplugVolumes feature gate counts as enabled."""

from __future__ import annotations

from typing import Any

from core.context import Append, Outcome, RequestContext
from core.errors import ApiError, Resource, bad_request, conflict, not_found
from core.kind import CallArgs
from events.catalog import VMIVolumeAdded, VMIVolumeRemoved
from events.meta import Kind
from events.objects import Status, StatusCause, StatusDetails
from projections import volumes
from projections.cluster import Cluster, key
from projections.views import VMIView

JSON = dict[str, Any]
RES = Resource("virtualmachineinstances", "kubevirt.io", "VirtualMachineInstance")
NO_BODY = "Request with no body, a new name is expected as the request body"
WEBHOOK = "virtualmachineinstances-update-validator.kubevirt.io"
#: virtctl's default for a hotplugged disk (the API would default a missing bus otherwise)
DEFAULT_BUS = "scsi"


def _running(cluster: Cluster, namespace: str, name: str) -> VMIView:
    vmi = cluster.vmis.get(key(namespace, name))
    if vmi is None:
        raise not_found(RES, name)
    if vmi.phase != "Running" or vmi.deletion_requested_at is not None:
        raise conflict(RES, name, "VMI is not running")
    return vmi


def _denied(name: str, message: str) -> ApiError:
    cause = StatusCause(type="FieldValueInvalid", message=message, field="")
    return ApiError(
        Status(
            message=f'admission webhook "{WEBHOOK}" denied the request: {message}',
            reason="Invalid",
            code=422,
            details=StatusDetails(name=name, group="kubevirt.io", kind=RES.kind, causes=[cause]),
        )
    )


def _dry_run(body: JSON) -> bool:
    return (body.get("dryRun") or [None])[0] == "All"


def _hotplug_disk(name: str, disk: JSON) -> JSON:
    """The disk as the patch adds it: named after the volume, scsi unless a bus is given;
    the update webhook's ValidateHotplugDiskConfiguration."""
    disk = {**disk, "name": name}
    if "lun" in disk:
        bus = (disk.get("lun") or {}).get("bus") or DEFAULT_BUS
        if bus != "scsi":
            raise _denied(
                name,
                f"Hotplug configuration for LUN [{name}] requires bus to be 'scsi'. "
                f"[{bus}] is not permitted.",
            )
        disk["lun"] = {**(disk.get("lun") or {}), "bus": bus}
        return disk
    if "disk" not in disk:
        raise _denied(
            name,
            f"Hotplug configuration for [{name}] requires diskDevice of type 'disk' or "
            "'lun' to be used.",
        )
    bus = (disk.get("disk") or {}).get("bus") or DEFAULT_BUS
    if bus not in ("scsi", "virtio"):
        raise _denied(
            name,
            f"Hotplug configuration for disk [{name}] requires bus to be 'scsi' or 'virtio'. "
            f"[{bus}] is not permitted.",
        )
    disk["disk"] = {**(disk.get("disk") or {}), "bus": bus}
    return disk


def addvolume(
    cluster: Cluster, namespace: str, name: str, args: CallArgs, ctx: RequestContext
) -> Outcome:
    body = args.body
    if not body:
        raise bad_request(NO_BODY)
    vol_name = str(body.get("name") or "")
    if not vol_name:
        raise bad_request("AddVolumeOptions requires name to be set")
    if body.get("disk") is None:
        raise bad_request("AddVolumeOptions requires disk to not be nil")
    source = body.get("volumeSource")
    if source is None:
        raise bad_request("AddVolumeOptions requires VolumeSource to not be nil")
    vmi = _running(cluster, namespace, name)
    spec = vmi.manifest.get("spec") or {}
    volume: JSON = {"name": vol_name}
    for kind in ("dataVolume", "persistentVolumeClaim"):
        if isinstance(source.get(kind), dict):
            volume[kind] = {**source[kind], "hotpluggable": True}
            break
    claim = volumes.claim_of(volume)
    for existing in spec.get("volumes") or []:
        if existing.get("name") == vol_name:
            raise conflict(
                RES,
                name,
                f"Unable to add volume [{vol_name}] because volume with that name already exists",
            )
        if claim and volumes.claim_of(existing) == claim:
            raise conflict(
                RES, name, f"Unable to add volume source [{claim}] because it already exists"
            )
    if not claim:
        raise _denied(name, f"volume {vol_name} is not a PVC or DataVolume")
    disk = _hotplug_disk(vol_name, dict(body["disk"]))
    if _dry_run(body):
        return Outcome((), Kind.VMI, key(namespace, name), 202)
    meta = ctx.meta(Kind.VMI, namespace, name, vmi.uid, node=vmi.node)
    event = VMIVolumeAdded(meta=meta, volume=volume, disk=disk)
    return Outcome((Append(event, vmi.version),), Kind.VMI, key(namespace, name), 202)


def removevolume(
    cluster: Cluster, namespace: str, name: str, args: CallArgs, ctx: RequestContext
) -> Outcome:
    body = args.body
    if not body:
        raise bad_request(NO_BODY)
    vol_name = str(body.get("name") or "")
    if not vol_name:
        raise bad_request("RemoveVolumeOptions requires name to be set")
    vmi = _running(cluster, namespace, name)
    found = None
    for existing in (vmi.manifest.get("spec") or {}).get("volumes") or []:
        if existing.get("name") == vol_name or volumes.claim_of(existing) == vol_name:
            found = existing
            break
    if found is None:
        raise conflict(RES, name, f"Unable to remove volume [{vol_name}] because it does not exist")
    if not volumes.hotpluggable(found):
        raise conflict(
            RES,
            name,
            f"Unable to remove volume [{found.get('name')}] because it is not hotpluggable",
        )
    if _dry_run(body):
        return Outcome((), Kind.VMI, key(namespace, name), 202)
    meta = ctx.meta(Kind.VMI, namespace, name, vmi.uid, node=vmi.node)
    event = VMIVolumeRemoved(meta=meta, name=str(found.get("name")))
    return Outcome((Append(event, vmi.version),), Kind.VMI, key(namespace, name), 202)
