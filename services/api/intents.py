"""Intents: (cluster view, request) → events to append, or an `ApiError` with KubeVirt's
Status. Pure: ids, random suffixes and the clock come in through `RequestContext`, so the
precondition rules (KubeVirt's subresource table) are unit-testable with plain data."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import msgspec

from events.catalog import (
    Event,
    MigrationAbortRequested,
    MigrationRequested,
    NodeCordoned,
    NodeDrainRequested,
    NodeUncordoned,
    PolicyCreated,
    PolicyDeleted,
    PolicyUpdated,
    VMCreated,
    VMDeleted,
    VMICreated,
    VMIDeleteRequested,
    VMIPauseRequested,
    VMISoftRebootRequested,
    VMIUnpauseRequested,
    VMRestartRequested,
    VMRunStrategyChanged,
    VMStartRequested,
    VMStopRequested,
    VMUpdated,
)
from events.manifest import ManifestError, dump, load
from events.meta import CLUSTER_SCOPE, Actor, Aggregate, Kind, Meta
from events.objects import (
    MigrationPolicy,
    VirtualMachine,
    VirtualMachineInstance,
    VirtualMachineInstanceMigration,
)
from projections.cluster import Cluster, key
from projections.render import render_vmi
from projections.views import VMIView, VMView
from services.api import admission
from services.api.errors import (
    MIGRATIONS,
    NODES,
    POLICIES,
    VM_SUBRESOURCE,
    VMI_SUBRESOURCE,
    VMIS,
    VMS,
    ApiError,
    Resource,
    already_exists,
    bad_request,
    conflict,
    invalid,
    not_found,
    stale,
)

JSON = dict[str, Any]
SERVICE = "virt-api"
MIGRATE_PREFIX = "kubevirt-migrate-vm-"
VM_NOT_RUNNING = "VM is not running"
UNDERWAY = "unable to complete request: stop/start already underway"


@dataclass(frozen=True)
class RequestContext:
    """What the shell passes in: the clock, the request's correlation id, id sources."""

    now: float
    correlation_id: str
    new_id: Callable[[], str]  # 32 hex chars (event ids; uids are formatted from it)
    suffix: Callable[[], str]  # 5 random lowercase alphanumerics (generateName)

    def meta(self, kind: Kind, namespace: str, name: str, uid: str = "", node: str = "") -> Meta:
        return Meta(
            event_id=self.new_id(),
            aggregate=Aggregate(
                kind=kind, namespace=namespace or CLUSTER_SCOPE, name=name, uid=uid
            ),
            occurred_at=self.now,
            correlation_id=self.correlation_id,
            actor=Actor(service=SERVICE),
            node=node,
        )

    def uid(self) -> str:
        return str(uuid.UUID(hex=self.new_id()))


class Append(msgspec.Struct, frozen=True):
    event: Event
    expected: int | None  # None: no check (the follow-ups of one intent after its first append)


class Outcome(msgspec.Struct, frozen=True):
    """Events to append, and which object answers the request."""

    appends: tuple[Append, ...]
    kind: Kind
    key: str
    code: int = 200


# ------------------------------------------------------------------ helpers
KINDS: dict[str, tuple[Kind, Resource, type[Any]]] = {
    "virtualmachines": (Kind.VM, VMS, VirtualMachine),
    "virtualmachineinstances": (Kind.VMI, VMIS, VirtualMachineInstance),
    "virtualmachineinstancemigrations": (
        Kind.MIGRATION,
        MIGRATIONS,
        VirtualMachineInstanceMigration,
    ),
    "migrationpolicies": (Kind.POLICY, POLICIES, MigrationPolicy),
}
RESOURCES = {
    Kind.VM: VMS,
    Kind.VMI: VMIS,
    Kind.MIGRATION: MIGRATIONS,
    Kind.POLICY: POLICIES,
    Kind.NODE: NODES,
}


def _load(raw: JSON, type_: type[Any], res: Resource) -> Any:
    if not isinstance(raw, dict):
        raise bad_request("the body of the request must be an object")
    kind = raw.get("kind")
    if kind is not None and kind != res.kind:
        raise bad_request(
            f"the kind of the provided object ({kind}) does not match the resource ({res.kind})"
        )
    try:
        return load(raw, type_)
    except ManifestError as exc:
        raise bad_request(f"the body of the request was in an unknown format: {exc}") from None


def _clean_metadata(raw: JSON, name: str, namespace: str, uid: str) -> JSON:
    meta = dict(raw.get("metadata") or {})
    for server_set in (
        "resourceVersion",
        "creationTimestamp",
        "generation",
        "deletionTimestamp",
        "generateName",
    ):
        meta.pop(server_set, None)
    meta["name"] = name
    if namespace:
        meta["namespace"] = namespace
    meta["uid"] = uid
    return meta


def _name_and_namespace(raw: JSON, namespace: str, ctx: RequestContext) -> tuple[str, str]:
    meta = raw.get("metadata") or {}
    body_ns = meta.get("namespace")
    if namespace and body_ns and body_ns != namespace:
        raise bad_request(
            "the namespace of the provided object does not match the namespace sent on the request"
        )
    name = meta.get("name") or ""
    if not name and meta.get("generateName"):
        name = f"{meta['generateName']}{ctx.suffix()}"
    return name, namespace


def _denied(res: Resource, name: str, causes: list[Any]) -> ApiError:
    status = admission.invalid_status(res.kind, name, causes, group=res.group)
    return invalid(
        res, name, list(status.details.causes or []) if status.details else [], status.message
    )


def _finish(raw: JSON, typed: Any, name: str, namespace: str, uid: str) -> JSON:
    manifest = dump(typed, raw)
    manifest.pop("status", None)
    manifest["apiVersion"] = raw.get("apiVersion") or typed.api_version
    manifest["kind"] = typed.kind
    manifest["metadata"] = _clean_metadata(manifest, name, namespace, uid)
    return manifest


def _vm(cluster: Cluster, namespace: str, name: str, res: Resource = VMS) -> VMView:
    vm = cluster.vms.get(key(namespace, name))
    if vm is None:
        raise not_found(res, name)
    return vm


def _vmi(cluster: Cluster, namespace: str, name: str, res: Resource = VMIS) -> VMIView:
    vmi = cluster.vmis.get(key(namespace, name))
    if vmi is None:
        raise not_found(res, name)
    return vmi


# ------------------------------------------------------------------- create
def create(
    cluster: Cluster, plural: str, namespace: str, raw: JSON, ctx: RequestContext
) -> Outcome:
    kind, res, type_ = KINDS[plural]
    namespace = "" if kind is Kind.POLICY else namespace
    name, namespace = _name_and_namespace(raw, namespace, ctx)
    typed = _load(raw, type_, res)
    typed.metadata.name = name
    if namespace:
        typed.metadata.namespace = namespace
    uid = ctx.uid()
    match kind:
        case Kind.VM:
            typed = _defaulted(admission.default_vm, typed, uid)
            causes = admission.validate_vm(typed)
        case Kind.VMI:
            typed = _defaulted(admission.default_vmi, typed, uid)
            causes = admission.validate_vmi(typed)
        case Kind.MIGRATION:
            causes = admission.validate_migration(
                typed,
                lambda ns, n: _typed_vmi(cluster, ns, n),
                lambda ns, n: m.name if (m := cluster.active_migration(ns, n)) else None,
            )
        case _:
            causes = admission.validate_name(name, None)
    if causes:
        raise _denied(res, name, causes)
    k = name if kind is Kind.POLICY else key(namespace, name)
    if _exists(cluster, kind, k):
        raise already_exists(res, name)
    manifest = _finish(raw, typed, name, namespace, uid)
    meta = ctx.meta(kind, namespace, name, uid)
    event: Event
    match kind:
        case Kind.VM:
            event = VMCreated(meta=meta, manifest=manifest)
        case Kind.VMI:
            event = VMICreated(meta=meta, manifest=manifest)
        case Kind.MIGRATION:
            event = MigrationRequested(meta=meta, manifest=manifest)
        case _:
            event = PolicyCreated(meta=meta, manifest=manifest)
    return Outcome((Append(event, 0),), kind, k, 201)


def _defaulted(fn: Callable[[Any, str], Any], typed: Any, uid: str) -> Any:
    try:
        return fn(typed, uid)
    except ValueError:
        return typed  # unparsable quantities: validation reports them


def _exists(cluster: Cluster, kind: Kind, k: str) -> bool:
    match kind:
        case Kind.VM:
            return k in cluster.vms
        case Kind.VMI:
            return k in cluster.vmis
        case Kind.MIGRATION:
            return k in cluster.migrations
        case Kind.POLICY:
            return k in cluster.policies
        case _:
            return k in cluster.nodes


def _typed_vmi(cluster: Cluster, namespace: str, name: str) -> VirtualMachineInstance | None:
    view = cluster.vmis.get(key(namespace, name))
    if view is None:
        return None
    return load(render_vmi(cluster, view), VirtualMachineInstance)


# ------------------------------------------------------------------- update
def update(
    cluster: Cluster, plural: str, namespace: str, name: str, raw: JSON, ctx: RequestContext
) -> Outcome:
    kind, res, type_ = KINDS[plural]
    if kind not in (Kind.VM, Kind.POLICY):
        raise bad_request(
            f"{res} cannot be updated: only virtualmachines and migrationpolicies can"
        )
    namespace = "" if kind is Kind.POLICY else namespace
    body_name = (raw.get("metadata") or {}).get("name") if isinstance(raw, dict) else None
    if body_name and body_name != name:
        raise bad_request(
            f"the name of the object ({body_name}) does not match the name on the URL ({name})"
        )
    k = name if kind is Kind.POLICY else key(namespace, name)
    view: Any = cluster.policies.get(k) if kind is Kind.POLICY else cluster.vms.get(k)
    if view is None:
        raise not_found(res, name)
    typed = _load(raw, type_, res)
    typed.metadata.name = name
    if namespace:
        typed.metadata.namespace = namespace
    rv = typed.metadata.resource_version
    if rv and rv != str(view.resource_version):
        raise stale(res, name)
    meta_uid = typed.metadata.uid
    if meta_uid and meta_uid != view.uid:
        raise conflict(
            res,
            name,
            f"Precondition failed: UID in precondition: {meta_uid}, UID in object meta: {view.uid}",
        )
    event: Event
    if kind is Kind.VM:
        typed = _defaulted(admission.default_vm, typed, view.uid)
        if causes := admission.validate_vm(typed):
            raise _denied(res, name, causes)
        manifest = _finish(raw, typed, name, namespace, view.uid)
        event = VMUpdated(meta=ctx.meta(kind, namespace, name, view.uid), manifest=manifest)
    else:
        manifest = _finish(raw, typed, name, "", view.uid)
        event = PolicyUpdated(meta=ctx.meta(kind, "", name, view.uid), manifest=manifest)
    return Outcome((Append(event, view.version),), kind, k, 200)


# ------------------------------------------------------------------- delete
def delete(
    cluster: Cluster, plural: str, namespace: str, name: str, grace: int | None, ctx: RequestContext
) -> Outcome:
    kind, res, _ = KINDS[plural]
    event: Event
    match kind:
        case Kind.VM:
            vm = _vm(cluster, namespace, name)
            if vm.deleted_at is not None:
                return Outcome((), kind, key(namespace, name), 200)
            event = VMDeleted(
                meta=ctx.meta(kind, namespace, name, vm.uid), grace_period_seconds=grace
            )
            return Outcome((Append(event, vm.version),), kind, key(namespace, name), 200)
        case Kind.VMI:
            vmi = _vmi(cluster, namespace, name)
            if vmi.deletion_requested_at is not None:
                return Outcome((), kind, key(namespace, name), 200)
            meta = ctx.meta(kind, namespace, name, vmi.uid, node=vmi.node)
            event = VMIDeleteRequested(meta=meta, grace_period_seconds=grace)
            return Outcome((Append(event, vmi.version),), kind, key(namespace, name), 200)
        case Kind.MIGRATION:
            mig = cluster.migrations.get(key(namespace, name))
            if mig is None or (mig.deleted and mig.final):
                raise not_found(res, name)
            if mig.deleted:
                return Outcome((), kind, key(namespace, name), 200)
            # routed to the handler that must act: the source while the transfer runs,
            # else the target (the controller relays too; this saves it a hop)
            node = mig.source_node if mig.phase == "Running" else mig.target_node
            meta = ctx.meta(kind, namespace, name, mig.uid, node=node)
            event = MigrationAbortRequested(meta=meta)
            return Outcome((Append(event, mig.version),), kind, key(namespace, name), 200)
        case _:
            policy = cluster.policies.get(name)
            if policy is None:
                raise not_found(res, name)
            event = PolicyDeleted(meta=ctx.meta(kind, "", name, policy.uid))
            return Outcome((Append(event, policy.version),), kind, name, 200)


# --------------------------------------------------------- VM subresources
def start(
    cluster: Cluster, namespace: str, name: str, paused: bool, ctx: RequestContext
) -> Outcome:
    vm = _vm(cluster, namespace, name)
    vmi = cluster.vmi_of_vm(vm)
    if vmi is not None and not vmi.final:
        raise conflict(VM_SUBRESOURCE, name, "VM is already running")
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
                    VM_SUBRESOURCE,
                    name,
                    "RerunOnFailure does not support starting VM from failed state",
                )
            if vm.requests:
                raise conflict(VM_SUBRESOURCE, name, UNDERWAY)
            return Outcome(
                (Append(VMStartRequested(meta=meta, paused=paused), vm.version),), Kind.VM, k, 202
            )
        case strategy:
            raise conflict(
                VM_SUBRESOURCE, name, f"{strategy} does not support manual start requests"
            )


def stop(
    cluster: Cluster, namespace: str, name: str, grace: int | None, ctx: RequestContext
) -> Outcome:
    vm = _vm(cluster, namespace, name)
    vmi = cluster.vmi_of_vm(vm)
    if vmi is None or vmi.final:
        raise conflict(VM_SUBRESOURCE, name, VM_NOT_RUNNING)
    k = key(namespace, name)
    meta = ctx.meta(Kind.VM, namespace, name, vm.uid)
    request = VMStopRequested(meta=meta, vmi_uid=vmi.uid, grace_period_seconds=grace)
    match vm.run_strategy:
        case "Halted":
            current = vmi.grace_period_seconds
            if grace is None or (current is not None and grace >= current):
                raise conflict(
                    VM_SUBRESOURCE,
                    name,
                    "Halted only supports manual stop requests with a shorter graceperiod",
                )
            return Outcome((Append(request, vm.version),), Kind.VM, k, 202)
        case "Manual" | "RerunOnFailure":
            if vm.requests:
                raise conflict(VM_SUBRESOURCE, name, UNDERWAY)
            return Outcome((Append(request, vm.version),), Kind.VM, k, 202)
        case _:  # Always, Once: KubeVirt rewrites the strategy to Halted
            halted = VMRunStrategyChanged(
                meta=ctx.meta(Kind.VM, namespace, name, vm.uid), run_strategy="Halted"
            )
            return Outcome((Append(request, vm.version), Append(halted, None)), Kind.VM, k, 202)


def restart(
    cluster: Cluster, namespace: str, name: str, grace: int | None, ctx: RequestContext
) -> Outcome:
    vm = _vm(cluster, namespace, name)
    if vm.run_strategy in ("Halted", "Once"):
        raise conflict(
            VM_SUBRESOURCE,
            name,
            f"RunStategy {vm.run_strategy} does not support manual restart requests",
        )
    vmi = cluster.vmi_of_vm(vm)
    if vmi is None:
        raise conflict(VM_SUBRESOURCE, name, f"{VM_NOT_RUNNING}: Halted")
    if vm.requests:
        raise conflict(VM_SUBRESOURCE, name, UNDERWAY)
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
        raise conflict(VM_SUBRESOURCE, name, VM_NOT_RUNNING)
    spec: JSON = {"vmiName": name}
    if added_node_selector:
        spec["addedNodeSelector"] = dict(added_node_selector)
    raw: JSON = {
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachineInstanceMigration",
        "metadata": {"name": f"{MIGRATE_PREFIX}{ctx.suffix()}", "namespace": namespace},
        "spec": spec,
    }
    out = create(cluster, "virtualmachineinstancemigrations", namespace, raw, ctx)
    return Outcome(out.appends, out.kind, out.key, 202)


# -------------------------------------------------------- VMI subresources
def _running_vmi(cluster: Cluster, namespace: str, name: str, not_running: str) -> VMIView:
    vmi = _vmi(cluster, namespace, name)
    if vmi.phase != "Running" or vmi.deletion_requested_at is not None:
        raise conflict(VMI_SUBRESOURCE, name, not_running)
    return vmi


def pause(cluster: Cluster, namespace: str, name: str, ctx: RequestContext) -> Outcome:
    vmi = _running_vmi(cluster, namespace, name, VM_NOT_RUNNING)
    if vmi.paused:
        raise conflict(VMI_SUBRESOURCE, name, "VMI is already paused")
    if (vmi.manifest.get("spec") or {}).get("livenessProbe"):
        raise conflict(
            VMI_SUBRESOURCE, name, "Pausing VMIs with LivenessProbe is currently not supported"
        )
    meta = ctx.meta(Kind.VMI, namespace, name, vmi.uid, node=vmi.node)
    return Outcome(
        (Append(VMIPauseRequested(meta=meta), vmi.version),), Kind.VMI, key(namespace, name), 200
    )


def unpause(cluster: Cluster, namespace: str, name: str, ctx: RequestContext) -> Outcome:
    vmi = _running_vmi(cluster, namespace, name, "VMI is not running")
    if not vmi.paused:
        raise conflict(VMI_SUBRESOURCE, name, "VMI is not paused")
    meta = ctx.meta(Kind.VMI, namespace, name, vmi.uid, node=vmi.node)
    return Outcome(
        (Append(VMIUnpauseRequested(meta=meta), vmi.version),), Kind.VMI, key(namespace, name), 200
    )


def softreboot(cluster: Cluster, namespace: str, name: str, ctx: RequestContext) -> Outcome:
    vmi = _running_vmi(cluster, namespace, name, "VMI is not running")
    if vmi.paused:
        raise conflict(VMI_SUBRESOURCE, name, "VMI is paused")
    meta = ctx.meta(Kind.VMI, namespace, name, vmi.uid, node=vmi.node)
    return Outcome(
        (Append(VMISoftRebootRequested(meta=meta), vmi.version),),
        Kind.VMI,
        key(namespace, name),
        200,
    )


# ------------------------------------------------------------------- nodes
def node_action(cluster: Cluster, name: str, action: str, ctx: RequestContext) -> Outcome:
    """cordon / uncordon / drain. Repeating one is a no-op (200, nothing appended), as
    `kubectl cordon` on a cordoned node; uncordon stops a drain."""
    node = cluster.nodes.get(name)
    if node is None:
        raise not_found(NODES, name)
    meta = ctx.meta(Kind.NODE, "", name)
    event: Event
    match action:
        case "cordon":
            if node.cordoned:
                return Outcome((), Kind.NODE, name, 200)
            event = NodeCordoned(meta=meta)
        case "uncordon":
            if not node.cordoned and not node.draining:
                return Outcome((), Kind.NODE, name, 200)
            event = NodeUncordoned(meta=meta)
        case "drain":
            if node.draining:
                return Outcome((), Kind.NODE, name, 200)
            event = NodeDrainRequested(meta=meta)
        case _:
            raise not_found(NODES, f"{name}/{action}")
    return Outcome((Append(event, node.version),), Kind.NODE, name, 202)


__all__ = [
    "KINDS",
    "RESOURCES",
    "Append",
    "Outcome",
    "RequestContext",
    "create",
    "delete",
    "migrate",
    "node_action",
    "pause",
    "restart",
    "softreboot",
    "start",
    "stop",
    "unpause",
    "update",
]
