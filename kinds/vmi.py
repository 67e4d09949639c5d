"""VirtualMachineInstance: its registry entry and its own intents (delete; the pause,
unpause and softreboot subresources; addvolume and removevolume in `vmi_volumes.py`)."""

from __future__ import annotations

from typing import Any

import msgspec

from core import admission
from core.context import Append, Outcome, RequestContext
from core.errors import conflict
from core.intents import defaulted, view
from core.kind import CallArgs, SpecRefusal, Subresource
from events.catalog import (
    VMICreated,
    VMIDeleteRequested,
    VMIPauseRequested,
    VMISoftRebootRequested,
    VMIUnpauseRequested,
)
from events.manifest import load
from events.meta import Kind
from events.objects import VirtualMachineInstance
from kinds import nad, versions, vmi_volumes
from kinds.spec import KindSpec, PrinterColumn
from projections.cluster import Cluster, key
from projections.evolve import evolve_vmi
from projections.render import render_vmi
from projections.views import VMIView

VM_NOT_RUNNING = "VM is not running"
JSON = dict[str, Any]


def _vmi(cluster: Cluster, namespace: str, name: str) -> VMIView:
    found: VMIView = view(cluster, SPEC, namespace, name)
    return found


def typed_vmi(cluster: Cluster, namespace: str, name: str) -> VirtualMachineInstance | None:
    """The VMI as the api serves it, typed (for admission rules that read its status)."""
    found = cluster.vmis.get(key(namespace, name))
    if found is None:
        return None
    return load(render_vmi(cluster, found), VirtualMachineInstance)


def admit(cluster: Cluster, typed: Any, uid: str) -> tuple[Any, list[Any]]:
    typed = defaulted(admission.default_vmi, typed, uid)
    causes = admission.validate_vmi(typed)
    networks = msgspec.to_builtins(typed.spec.networks or [])
    for i, missing in enumerate(nad.missing(cluster, typed.metadata.namespace or "", networks)):
        msg = f"failed to locate network attachment definition {missing}"
        causes.append(admission.cause("FieldValueNotFound", msg, f"spec.networks[{i}].multus"))
    return typed, causes


def delete(
    cluster: Cluster, namespace: str, name: str, grace: int | None, ctx: RequestContext
) -> Outcome:
    vmi = _vmi(cluster, namespace, name)
    k = key(namespace, name)
    if vmi.deletion_requested_at is not None:
        return Outcome((), Kind.VMI, k, 200)
    meta = ctx.meta(Kind.VMI, namespace, name, vmi.uid, node=vmi.node)
    event = VMIDeleteRequested(meta=meta, grace_period_seconds=grace)
    return Outcome((Append(event, vmi.version),), Kind.VMI, k, 200)


def _delete(c: Cluster, ns: str, name: str, args: CallArgs, ctx: RequestContext) -> Outcome:
    return delete(c, ns, name, args.grace(), ctx)


# ------------------------------------------------------------- subresources
def _running_vmi(cluster: Cluster, namespace: str, name: str, not_running: str) -> VMIView:
    vmi = _vmi(cluster, namespace, name)
    if vmi.phase != "Running" or vmi.deletion_requested_at is not None:
        raise conflict(SPEC.subresource_resource, name, not_running)
    return vmi


def pause(cluster: Cluster, namespace: str, name: str, ctx: RequestContext) -> Outcome:
    res = SPEC.subresource_resource
    vmi = _running_vmi(cluster, namespace, name, VM_NOT_RUNNING)
    if vmi.paused:
        raise conflict(res, name, "VMI is already paused")
    if (vmi.manifest.get("spec") or {}).get("livenessProbe"):
        raise conflict(res, name, "Pausing VMIs with LivenessProbe is currently not supported")
    meta = ctx.meta(Kind.VMI, namespace, name, vmi.uid, node=vmi.node)
    return Outcome(
        (Append(VMIPauseRequested(meta=meta), vmi.version),), Kind.VMI, key(namespace, name), 200
    )


def unpause(cluster: Cluster, namespace: str, name: str, ctx: RequestContext) -> Outcome:
    vmi = _running_vmi(cluster, namespace, name, "VMI is not running")
    if not vmi.paused:
        raise conflict(SPEC.subresource_resource, name, "VMI is not paused")
    meta = ctx.meta(Kind.VMI, namespace, name, vmi.uid, node=vmi.node)
    return Outcome(
        (Append(VMIUnpauseRequested(meta=meta), vmi.version),), Kind.VMI, key(namespace, name), 200
    )


def softreboot(cluster: Cluster, namespace: str, name: str, ctx: RequestContext) -> Outcome:
    vmi = _running_vmi(cluster, namespace, name, "VMI is not running")
    if vmi.paused:
        raise conflict(SPEC.subresource_resource, name, "VMI is paused")
    meta = ctx.meta(Kind.VMI, namespace, name, vmi.uid, node=vmi.node)
    return Outcome(
        (Append(VMISoftRebootRequested(meta=meta), vmi.version),),
        Kind.VMI,
        key(namespace, name),
        200,
    )


def _pause(c: Cluster, ns: str, name: str, _: CallArgs, ctx: RequestContext) -> Outcome:
    return pause(c, ns, name, ctx)


def _unpause(c: Cluster, ns: str, name: str, _: CallArgs, ctx: RequestContext) -> Outcome:
    return unpause(c, ns, name, ctx)


def _softreboot(c: Cluster, ns: str, name: str, _: CallArgs, ctx: RequestContext) -> Outcome:
    return softreboot(c, ns, name, ctx)


# ------------------------------------------------------------------ registry
SPEC = KindSpec(
    group="kubevirt.io",
    version="v1",
    versions=versions.CORE,
    kind="VirtualMachineInstance",
    plural="virtualmachineinstances",
    singular="virtualmachineinstance",
    short_names=("vmi", "vmis"),
    categories=("all",),
    runs_launcher=True,
    event_kind=Kind.VMI,
    object_type=VirtualMachineInstance,
    subresources=(
        Subresource("pause", _pause, code=200, reads_body=False),
        Subresource("unpause", _unpause, code=200, reads_body=False),
        Subresource("softreboot", _softreboot, code=200, reads_body=False),
        Subresource("addvolume", vmi_volumes.addvolume, code=202),
        Subresource("removevolume", vmi_volumes.removevolume, code=202),
    ),
    streams=(
        "console",
        "vnc",
        "vnc/screenshot",
        "portforward",
        "guestosinfo",
        "userlist",
        "filesystemlist",
    ),
    printer_columns=(
        PrinterColumn("Age", "date", ".metadata.creationTimestamp"),
        PrinterColumn("Phase", "string", ".status.phase"),
        PrinterColumn("IP", "string", ".status.interfaces[0].ipAddress"),
        PrinterColumn("NodeName", "string", ".status.nodeName"),
        PrinterColumn("Ready", "string", ".status.conditions[?(@.type=='Ready')].status"),
        PrinterColumn(
            "Live-Migratable",
            "string",
            ".status.conditions[?(@.type=='LiveMigratable')].status",
            priority=1,
        ),
        PrinterColumn(
            "Paused", "string", ".status.conditions[?(@.type=='Paused')].status", priority=1
        ),
    ),
    admit=admit,
    created=lambda meta, manifest: VMICreated(meta=meta, manifest=manifest),
    spec_refusal=SpecRefusal(
        "virtualmachineinstances-update-validator.kubevirt.io",
        "update of VMI object is restricted",
    ),
    delete=_delete,
    table=lambda c: c.vmis,
    render=lambda c, v, _now: render_vmi(c, v),
    evolve=evolve_vmi,
)
