"""VirtualMachine: its registry entry and its own intents (delete; the start, stop, restart
and migrate subresources with KubeVirt's preconditions and wording, lifecycle.go)."""

from __future__ import annotations

from typing import Any

import msgspec

from core import admission
from core.context import Append, Outcome, RequestContext
from core.errors import bad_request, conflict
from core.intents import create, defaulted, view
from core.kind import Answer, CallArgs, Subresource
from events.catalog import (
    VMCreated,
    VMDeleted,
    VMRestartRequested,
    VMRunStrategyChanged,
    VMStartRequested,
    VMStopRequested,
    VMUpdated,
)
from events.meta import Kind
from events.objects import VirtualMachine, VirtualMachineInstanceSpec
from kinds import columns as col
from kinds import instancetype, migration, versions
from kinds.spec import Column, KindSpec, PrinterColumn
from projections.cluster import Cluster, key
from projections.evolve import evolve_vm
from projections.render import render_vm
from projections.views import VMView

MIGRATE_PREFIX = "kubevirt-migrate-vm-"
VM_NOT_RUNNING = "VM is not running"
UNDERWAY = "unable to complete request: stop/start already underway"
JSON = dict[str, Any]


def _vm(cluster: Cluster, namespace: str, name: str) -> VMView:
    found: VMView = view(cluster, SPEC, namespace, name)
    return found


def admit(cluster: Cluster, typed: Any, uid: str) -> tuple[Any, list[Any]]:
    if typed.spec.instancetype or typed.spec.preference:
        return _admit_with_instancetype(cluster, typed, uid)
    typed = defaulted(admission.default_vm, typed, uid)
    return typed, admission.validate_vm(typed)


def _admit_with_instancetype(cluster: Cluster, typed: Any, uid: str) -> tuple[Any, list[Any]]:
    """KubeVirt's VM admitter: resolve the instance type and preference, refuse conflicts,
    then validate the template as its VMI will run (with both applied)."""
    typed, applied, causes = instancetype.admit_vm(cluster, typed)
    if causes or applied is None:
        return typed, causes
    typed = defaulted(admission.default_vm, typed, uid)
    # what the defaults added (the pod network's interface, ...) takes the preference's
    # values now, not at the next update: a VM applied again is unchanged
    typed, applied, _ = instancetype.admit_vm(cluster, typed)
    assert applied is not None  # resolved above
    check = msgspec.convert(msgspec.to_builtins(typed), VirtualMachine)
    check.spec.template.spec = msgspec.convert(applied, VirtualMachineInstanceSpec)
    check.spec.instancetype = None
    check = defaulted(admission.default_vm, check, uid)
    return typed, admission.validate_vm(check)


def delete(
    cluster: Cluster, namespace: str, name: str, grace: int | None, ctx: RequestContext
) -> Outcome:
    vm = _vm(cluster, namespace, name)
    k = key(namespace, name)
    if vm.deleted_at is not None:
        return Outcome((), Kind.VM, k, 200)
    event = VMDeleted(meta=ctx.meta(Kind.VM, namespace, name, vm.uid), grace_period_seconds=grace)
    return Outcome((Append(event, vm.version),), Kind.VM, k, 200)


def _delete(c: Cluster, ns: str, name: str, args: CallArgs, ctx: RequestContext) -> Outcome:
    return delete(c, ns, name, args.grace(), ctx)


# ------------------------------------------------------------- subresources
def start(
    cluster: Cluster, namespace: str, name: str, paused: bool, ctx: RequestContext
) -> Outcome:
    res = SPEC.subresource_resource
    vm = _vm(cluster, namespace, name)
    vmi = cluster.vmi_of_vm(vm)
    if vmi is not None and not vmi.final:
        raise conflict(res, name, "VM is already running")
    k = key(namespace, name)
    meta = ctx.meta(Kind.VM, namespace, name, vm.uid)
    match vm.run_strategy:
        case "Halted":
            appends = [Append(VMRunStrategyChanged(meta=meta, run_strategy="Always"), vm.version)]
            if paused:
                again = ctx.meta(Kind.VM, namespace, name, vm.uid)
                appends.append(Append(VMStartRequested(meta=again, paused=True), None))
            return Outcome(tuple(appends), Kind.VM, k, 202)
        case "Manual" | "RerunOnFailure":
            if vm.run_strategy == "RerunOnFailure" and vmi is not None and vmi.phase == "Failed":
                raise conflict(
                    res, name, "RerunOnFailure does not support starting VM from failed state"
                )
            if vm.requests:
                raise conflict(res, name, UNDERWAY)
            return Outcome(
                (Append(VMStartRequested(meta=meta, paused=paused), vm.version),), Kind.VM, k, 202
            )
        case strategy:
            raise conflict(res, name, f"{strategy} does not support manual start requests")


def stop(
    cluster: Cluster, namespace: str, name: str, grace: int | None, ctx: RequestContext
) -> Outcome:
    res = SPEC.subresource_resource
    vm = _vm(cluster, namespace, name)
    vmi = cluster.vmi_of_vm(vm)
    if vmi is None or vmi.final:
        raise conflict(res, name, VM_NOT_RUNNING)
    k = key(namespace, name)
    meta = ctx.meta(Kind.VM, namespace, name, vm.uid)
    request = VMStopRequested(meta=meta, vmi_uid=vmi.uid, grace_period_seconds=grace)
    match vm.run_strategy:
        case "Halted":
            current = vmi.grace_period_seconds
            if grace is None or (current is not None and grace >= current):
                raise conflict(
                    res,
                    name,
                    "Halted only supports manual stop requests with a shorter graceperiod",
                )
            return Outcome((Append(request, vm.version),), Kind.VM, k, 202)
        case "Manual" | "RerunOnFailure":
            if vm.requests:
                raise conflict(res, name, UNDERWAY)
            return Outcome((Append(request, vm.version),), Kind.VM, k, 202)
        case _:  # Always, Once: KubeVirt rewrites the strategy to Halted
            halted = VMRunStrategyChanged(
                meta=ctx.meta(Kind.VM, namespace, name, vm.uid), run_strategy="Halted"
            )
            return Outcome((Append(request, vm.version), Append(halted, None)), Kind.VM, k, 202)


def restart(
    cluster: Cluster, namespace: str, name: str, grace: int | None, ctx: RequestContext
) -> Outcome:
    res = SPEC.subresource_resource
    vm = _vm(cluster, namespace, name)
    if vm.run_strategy in ("Halted", "Once"):
        raise conflict(
            res, name, f"RunStategy {vm.run_strategy} does not support manual restart requests"
        )
    vmi = cluster.vmi_of_vm(vm)
    if vmi is None:
        raise conflict(res, name, f"{VM_NOT_RUNNING}: Halted")
    if vm.requests:
        raise conflict(res, name, UNDERWAY)
    event = VMRestartRequested(
        meta=ctx.meta(Kind.VM, namespace, name, vm.uid), vmi_uid=vmi.uid, grace_period_seconds=grace
    )
    return Outcome((Append(event, vm.version),), Kind.VM, key(namespace, name), 202)


def migrate(
    cluster: Cluster,
    namespace: str,
    name: str,
    added_node_selector: dict[str, str] | None,
    ctx: RequestContext,
) -> Outcome:
    vm = _vm(cluster, namespace, name)
    vmi = cluster.vmi_of_vm(vm)
    if vmi is None or vmi.phase != "Running":
        raise conflict(SPEC.subresource_resource, name, VM_NOT_RUNNING)
    spec: JSON = {"vmiName": name}
    if added_node_selector:
        spec["addedNodeSelector"] = dict(added_node_selector)
    raw: JSON = {
        "apiVersion": migration.SPEC.api_version,
        "kind": migration.SPEC.kind,
        "metadata": {"name": f"{MIGRATE_PREFIX}{ctx.suffix()}", "namespace": namespace},
        "spec": spec,
    }
    out = create(cluster, migration.SPEC, namespace, raw, ctx)
    return Outcome(out.appends, out.kind, out.key, 202)


def _start(c: Cluster, ns: str, name: str, r: CallArgs, ctx: RequestContext) -> Outcome:
    return start(c, ns, name, bool(r.body.get("paused", False)), ctx)


def _stop(c: Cluster, ns: str, name: str, r: CallArgs, ctx: RequestContext) -> Outcome:
    return stop(c, ns, name, r.grace(), ctx)


def _restart(c: Cluster, ns: str, name: str, r: CallArgs, ctx: RequestContext) -> Outcome:
    return restart(c, ns, name, r.grace(), ctx)


def _migrate(c: Cluster, ns: str, name: str, r: CallArgs, ctx: RequestContext) -> Outcome:
    selector = r.body.get("addedNodeSelector") or None
    if selector is not None and not isinstance(selector, dict):
        raise bad_request("addedNodeSelector must be a map of labels")
    return migrate(c, ns, name, selector, ctx)


# ------------------------------------------------------------------ registry
PRINTER_COLUMNS = (
    PrinterColumn("Age", "date", ".metadata.creationTimestamp"),
    PrinterColumn(
        "Status", "string", ".status.printableStatus", description="Human Readable Status"
    ),
    PrinterColumn("Ready", "string", ".status.conditions[?(@.type=='Ready')].status"),
)
SPEC = KindSpec(
    group="kubevirt.io",
    version="v1",
    versions=versions.CORE,
    kind="VirtualMachine",
    plural="virtualmachines",
    singular="virtualmachine",
    short_names=("vm", "vms"),
    categories=("all",),
    runs_launcher=True,
    event_kind=Kind.VM,
    object_type=VirtualMachine,
    subresources=(
        Subresource("start", _start),
        Subresource("stop", _stop),
        Subresource("restart", _restart),
        Subresource("migrate", _migrate, answer=Answer.CREATED),
    ),
    printer_columns=PRINTER_COLUMNS,
    # virtstream's own column beside kubectl's, in `-o wide`
    columns=(
        *col.table_of(PRINTER_COLUMNS),
        Column("RUNSTRATEGY", lambda o, _: str(col.status(o).get("runStrategy", "")), wide=True),
    ),
    admit=admit,
    created=lambda meta, manifest: VMCreated(meta=meta, manifest=manifest),
    updated=lambda meta, manifest: VMUpdated(meta=meta, manifest=manifest),
    delete=_delete,
    table=lambda c: c.vms,
    render=render_vm,
    evolve=evolve_vm,
)
