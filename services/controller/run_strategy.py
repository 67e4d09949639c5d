"""VirtualMachine → VirtualMachineInstance: KubeVirt's run strategies and the VM's state
change requests (start, stop, restart = [Stop{uid}, Start]).

`plan` is level-triggered: it looks at the VM, its current VMI and the pending requests
and says what is missing (create, delete, clear the requests). Applying the plan and
planning again on the resulting state yields nothing new."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from core import admission
from events.catalog import (
    Event,
    VMICreated,
    VMICreateFailed,
    VMIDeleteRequested,
    VMRevisionRecorded,
    VMStateChangeRequestsCleared,
)
from events.envelope import Context
from events.meta import Aggregate, Kind
from projections import instancetype
from projections.cluster import Cluster, key
from projections.views import VMIView, VMView
from services.controller import backoff, emit
from services.controller.state import ControllerState

ALWAYS, RERUN, MANUAL, HALTED, ONCE = "Always", "RerunOnFailure", "Manual", "Halted", "Once"


@dataclass(frozen=True)
class Plan:
    delete: VMIView | None = None  # request deletion of this VMI
    create: bool = False  # create a new VMI from the template
    clear_requests: bool = False  # all pending state change requests are handled
    grace_period_seconds: int | None = None  # overrides the VMI's own, from a stop or delete


def _deleting(vmi: VMIView) -> bool:
    return vmi.deletion_requested_at is not None


def plan(
    vm: VMView,
    vmi: VMIView | None,
    *,
    name_taken: bool,
    backoff_blocked: bool,
    last_outcome: str | None,
) -> Plan:
    """`vmi`: the VM's current VMI (None if it has none); `name_taken`: some other object
    holds the VMI name (e.g. our deleted VMI not removed yet, or a foreign VMI);
    `last_outcome`: phase of the VM's last removed VMI when it was deleted, None if none."""
    if vm.deleted_at is not None:
        if vmi is not None and not _deleting(vmi):
            return Plan(delete=vmi, grace_period_seconds=vm.deletion_grace_period_seconds)
        return Plan()

    delete: VMIView | None = None
    grace: int | None = None
    create = False
    world = vmi  # the VMI as it will be once this plan is applied
    world_deleting = vmi is not None and _deleting(vmi)
    can_create = not name_taken and vmi is None

    # Requests are a queue: act on the first one not yet satisfied; a Start behind a Stop
    # waits for the stopped VMI to be gone.
    queue = list(vm.requests)
    while queue:
        r = queue[0]
        if r.action == "Stop":
            if world is not None and (not r.uid or r.uid == world.uid) and not world_deleting:
                delete, world_deleting = world, True
                grace = r.grace_period_seconds
            queue.pop(0)
            continue
        # Start
        if vm.run_strategy == HALTED:
            queue.pop(0)  # the api turns a start on Halted into Always; nothing to do here
            continue
        if world is not None and not world_deleting and not world.final:
            queue.pop(0)  # running already
            continue
        if world is not None and world.final and not world_deleting:
            delete, world_deleting = world, True  # make room for the new one
            break
        if world is None and can_create and not create:
            create = True  # an explicit start skips the crash-loop backoff
            queue.pop(0)
            continue
        break  # wait for the old VMI to go

    if not queue and not create and delete is None:
        # no request left to act on: the strategy decides
        match vm.run_strategy:
            case "Always":
                if vmi is None:
                    create = can_create and not backoff_blocked
                elif vmi.final and not world_deleting:
                    delete = vmi
            case "RerunOnFailure":
                if vmi is None:
                    create = can_create and not backoff_blocked and last_outcome in (None, "Failed")
                elif vmi.final and not world_deleting:
                    delete = vmi
            case "Once":
                create = vmi is None and can_create and last_outcome is None
            case "Halted":
                if vmi is not None and not world_deleting:
                    delete = vmi
            case _:  # Manual: only requests act
                pass
    return Plan(
        delete=delete,
        create=create,
        clear_requests=bool(vm.requests) and not queue,
        grace_period_seconds=grace,
    )


# ------------------------------------------------------------------------- effects
def vmi_manifest(vm: VMView, uid: str) -> dict[str, Any]:
    """The VMI a VM's template describes, owned by the VM."""
    template = (vm.manifest.get("spec") or {}).get("template") or {}
    tmeta = template.get("metadata") or {}
    spec = template.get("spec") or {}  # `vm.manifest` is decoded afresh: ours to change
    if vm.start_paused:
        spec["startStrategy"] = "Paused"
    metadata: dict[str, Any] = {"name": vm.name, "namespace": vm.namespace, "uid": uid}
    for field in ("labels", "annotations"):
        if tmeta.get(field):
            metadata[field] = dict(tmeta[field])
    metadata["ownerReferences"] = [
        {
            "apiVersion": "kubevirt.io/v1",
            "kind": "VirtualMachine",
            "name": vm.name,
            "uid": vm.uid,
            "controller": True,
            "blockOwnerDeletion": True,
        }
    ]
    return {
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachineInstance",
        "metadata": metadata,
        "spec": spec,
    }


def delete_vmi(vmi: VMIView, ctx: Context, grace: int | None = None) -> VMIDeleteRequested:
    """Routed to the VMI's node, so its handler stops the guest."""
    return VMIDeleteRequested(
        meta=emit.meta(ctx, emit.vmi_aggregate(vmi), f"delete/{vmi.uid}", node=vmi.node),
        grace_period_seconds=grace,
    )


def reconcile(state: ControllerState, vm: VMView, ctx: Context) -> list[Event]:
    if vm.marked and vm.deleted_at is None:
        return []  # its VMI is being orphaned: neither started nor stopped
    cluster = state.cluster
    vmi = cluster.vmi_of_vm(vm)
    occupant = cluster.vmis.get(key(vm.namespace, vm.name))
    p = plan(
        vm,
        vmi,
        name_taken=occupant is not None,
        backoff_blocked=backoff.blocked(vm, ctx.now),
        last_outcome=state.last_outcome.get(vm.uid),
    )
    out: list[Event] = []
    if p.delete is not None:
        out.append(delete_vmi(p.delete, ctx, p.grace_period_seconds))
    if p.create:
        revision = _revision(cluster, vm)
        if revision is not None:
            create_key = f"create-vmi/{vm.uid}/{vm.resource_version}"
            uid = emit.new_uid(ctx, create_key)
            agg = Aggregate(kind=Kind.VMI, namespace=vm.namespace, name=vm.name, uid=uid)
            manifest = vmi_manifest(vm, uid)
            if revision:
                it, pref = revision.get("instancetype"), revision.get("preference")
                manifest["spec"] = instancetype.apply(
                    it["spec"] if it else None, pref["spec"] if pref else None, manifest["spec"]
                )
                if revision != vm.revision and asks_memory(manifest["spec"]):
                    out.append(
                        VMRevisionRecorded(
                            meta=emit.meta(
                                ctx, emit.vm_aggregate(vm), f"revision/{vm.uid}/{vm.generation}"
                            ),
                            instancetype=it,
                            preference=pref,
                        )
                    )
            if asks_memory(manifest["spec"]):
                out.append(
                    VMICreated(
                        meta=emit.meta(ctx, agg, create_key),
                        manifest=manifest,
                        owner_vm_uid=vm.uid,
                    )
                )
            elif vm.create_failure_generation != vm.generation:
                out.append(_create_refused(vm, ctx, admission.no_memory()))
    if p.clear_requests:
        # named by the last request it clears, not by the VM's version: deciding it again
        # before its own append is folded (a pipelined pass, a replay in log order) is
        # the same decision, a duplicate, not a second clear
        last = vm.requests[-1].seq or vm.version
        out.append(
            VMStateChangeRequestsCleared(
                meta=emit.meta(ctx, emit.vm_aggregate(vm), f"requests-cleared/{vm.uid}/{last}")
            )
        )
    return out


def _create_refused(vm: VMView, ctx: Context, reason: str) -> VMICreateFailed:
    """Once per generation of the VM: the refusal its VMI's create would get, in the VMI
    webhook's words (KubeVirt's controller records them as the FailedCreate event)."""
    webhook = admission.WEBHOOKS["VirtualMachineInstance"]
    return VMICreateFailed(
        meta=emit.meta(ctx, emit.vm_aggregate(vm), f"create-failed/{vm.uid}/{vm.generation}"),
        generation=vm.generation,
        message=f'admission webhook "{webhook}" denied the request: {reason}',
    )


def asks_memory(spec: dict[str, Any]) -> bool:
    """KubeVirt's VMI webhook refuses a VMI that asks for no memory (a request, a guest
    size or hugepages; `ValidateVirtualMachineInstanceMandatoryFields`), a rule its VM
    webhook leaves out: a VM whose template (with its instance type) asks for none is
    accepted, and gets no VMI when started, as KubeVirt's create of it is refused."""
    domain = spec.get("domain") or {}
    memory = domain.get("memory") or {}
    if memory.get("guest") is not None or memory.get("hugepages") is not None:
        return True
    requested = ((domain.get("resources") or {}).get("requests") or {}).get("memory")
    return requested not in (None, 0, "0", "")


def _revision(cluster: Cluster, vm: VMView) -> dict[str, Any] | None:
    """The instance type and preference the new VMI runs with: the recorded revision, else
    the current objects (recorded with the VMI's creation, so a later change to them does
    not change this VM). {} for a VM without them; None when one is gone (no VMI)."""
    spec = vm.manifest.get("spec") or {}
    recorded = vm.revision
    out: dict[str, Any] = {}
    for field in ("instancetype", "preference"):
        matcher = spec.get(field)
        if not matcher:
            continue
        if field in recorded:
            out[field] = recorded[field]
            continue
        found = instancetype.find(cluster, vm.namespace, vm.name, field, matcher)
        if isinstance(found, str):
            return None
        out[field] = instancetype.revision(found)
    return out
