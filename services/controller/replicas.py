"""VirtualMachineInstanceReplicaSet and VirtualMachinePool controllers, pure.

Level-triggered like the rest: each pass compares what a set wants (spec.replicas, unless
paused) with what it owns and decides the difference. Ids derive from the state decided on:
a replica set's new VMI from the set and the VMIs it owned when deciding, a pool's VM from
the pool and the ordinal (`<pool>-<n>`); each is appended with optimistic concurrency on
its own aggregate (a name that never existed: 0), which the shell folds at once, so the
next pass counts it. So a redelivered event, a tick or a restarted controller decides the same
events again and JetStream drops them: no duplicate VMIs or VMs.

Scale down: a replica set deletes the VMIs that are not running yet first, then by name;
a pool deletes by its scaleInStrategy's sortPolicy (DescendingOrder when unset: the
highest ordinals)."""

from __future__ import annotations

import hashlib
import string
import uuid
from typing import Any

from events.catalog import Event, ResourceStatusChanged, VMCreated, VMDeleted, VMICreated
from events.envelope import Context, Decision
from events.meta import Aggregate, Kind, ResourceKind
from projections import replicas as rp
from projections.cluster import Cluster
from projections.views import ResourceView
from services.controller import emit, run_strategy

JSON = dict[str, Any]
_NS = uuid.UUID("5b1de3a0-8a43-4f57-9a8f-2a3c8a1e7d10")
_ALPHABET = string.ascii_lowercase + string.digits


def _desired(res: ResourceView) -> tuple[int, bool]:
    spec = res.spec
    replicas = spec.get("replicas", 1)
    return (replicas if isinstance(replicas, int) else 1), bool(spec.get("paused"))


def _owner(api_version: str, kind: str, res: ResourceView) -> JSON:
    return {
        "apiVersion": api_version,
        "kind": kind,
        "name": res.name,
        "uid": res.uid,
        "controller": True,
        "blockOwnerDeletion": True,
    }


def _status_decision(res: ResourceView, status: JSON, ctx: Context) -> list[Decision]:
    if status == res.status:
        return []
    agg = Aggregate(kind=_kind_of(res), namespace=res.namespace, name=res.name, uid=res.uid)
    ev = ResourceStatusChanged(
        meta=emit.meta(ctx, agg, f"status/{res.uid}/{res.version}"), status=status
    )
    return [Decision(ev)]


def _kind_of(res: ResourceView) -> ResourceKind:
    return ResourceKind.VMPOOL if "virtualMachineTemplate" in res.spec else ResourceKind.VMIRS


# ----------------------------------------------------------------- replica set
def _suffix(key: str) -> str:
    digest = hashlib.sha256(key.encode()).digest()
    return "".join(_ALPHABET[b % len(_ALPHABET)] for b in digest[:5])


def reconcile_replicaset(cluster: Cluster, rs: ResourceView, ctx: Context) -> list[Decision]:
    if rs.marked:  # being deleted: its VMIs are the garbage collector's now
        return []
    want, paused = _desired(rs)
    owned = list(rp.owned_vmis(cluster, rs))
    active = [v for v in owned if rp.vmi_active(v)]
    out: list[Event] = []
    # finished VMIs are removed and replaced, as KubeVirt's replica set does
    out += [
        run_strategy.delete_vmi(v, ctx)
        for v in owned
        if v.final and v.deletion_requested_at is None
    ]
    if not paused and len(active) < want:
        basis = f"{rs.uid}/{rs.generation}/" + ",".join(sorted(v.uid for v in owned))
        template = rs.spec.get("template") or {}
        for i in range(want - len(active)):
            key = f"vmirs-create/{hashlib.sha256(f'{basis}/{i}'.encode()).hexdigest()[:24]}"
            name = f"{rs.name}{_suffix(key)}"
            uid = str(uuid.uuid5(_NS, key))
            tmeta = template.get("metadata") or {}
            metadata: JSON = {"name": name, "namespace": rs.namespace, "uid": uid}
            if tmeta.get("labels"):
                metadata["labels"] = dict(tmeta["labels"])
            if tmeta.get("annotations"):
                metadata["annotations"] = dict(tmeta["annotations"])
            metadata["ownerReferences"] = [
                _owner("kubevirt.io/v1", "VirtualMachineInstanceReplicaSet", rs)
            ]
            manifest = {
                "apiVersion": "kubevirt.io/v1",
                "kind": "VirtualMachineInstance",
                "metadata": metadata,
                "spec": template.get("spec") or {},
            }
            agg = Aggregate(kind=Kind.VMI, namespace=rs.namespace, name=name, uid=uid)
            out.append(VMICreated(meta=emit.meta(ctx, agg, key), manifest=manifest))
    elif not paused and len(active) > want:
        # not yet running first (KubeVirt's intended order), then by name
        order = sorted(active, key=lambda v: (v.phase == "Running", v.name))
        out += [run_strategy.delete_vmi(v, ctx) for v in order[: len(active) - want]]
    # OCC on each new VMI's own aggregate (0: never existed): the shell folds it at once,
    # so the next pass counts it before the consumer delivers it back
    decisions = [Decision(ev) for ev in out]
    ready = sum(1 for v in active if rp.vmi_ready(v))
    status = rp.status(rs.spec.get("selector") or {}, len(active), ready, paused)
    return decisions + _status_decision(rs, status, ctx)


# ------------------------------------------------------------------------ pool
def _scale_in_order(pool: ResourceView, vms: dict[int, Any]) -> list[int]:
    policy = (
        ((pool.spec.get("scaleInStrategy") or {}).get("proactive") or {}).get("selectionPolicy")
        or {}
    ).get("sortPolicy") or "DescendingOrder"
    match policy:
        case "AscendingOrder":
            return sorted(vms)
        case "Newest":
            return sorted(vms, key=lambda n: (-vms[n].created_at, -n))
        case "Oldest":
            return sorted(vms, key=lambda n: (vms[n].created_at, n))
        case _:
            return sorted(vms, reverse=True)


def reconcile_pool(cluster: Cluster, pool: ResourceView, ctx: Context) -> list[Decision]:
    if pool.marked:  # being deleted: its VMs are the garbage collector's now
        return []
    want, paused = _desired(pool)
    vms = rp.owned_vms(cluster, pool)
    live = {n: vm for n, vm in vms.items() if vm.deleted_at is None}
    out: list[Decision] = []
    if not paused and len(live) < want:
        template = pool.spec.get("virtualMachineTemplate") or {}
        free = (n for n in range(10**6) if n not in vms)
        for n in [next(free) for _ in range(want - len(live))]:
            name = f"{pool.name}-{n}"
            key = f"vmpool-create/{pool.uid}/{n}/{pool.version}"
            uid = str(uuid.uuid5(_NS, f"vmpool/{pool.uid}/{n}/{pool.version}"))
            tmeta = template.get("metadata") or {}
            metadata: JSON = {"name": name, "namespace": pool.namespace, "uid": uid}
            if tmeta.get("labels"):
                metadata["labels"] = dict(tmeta["labels"])
            metadata["ownerReferences"] = [
                _owner("pool.kubevirt.io/v1beta1", "VirtualMachinePool", pool)
            ]
            spec = dict(template.get("spec") or {})
            manifest = {
                "apiVersion": "kubevirt.io/v1",
                "kind": "VirtualMachine",
                "metadata": metadata,
                "spec": spec,
            }
            agg = Aggregate(kind=Kind.VM, namespace=pool.namespace, name=name, uid=uid)
            # OCC on the VM's aggregate: it must not exist (or be the deleted one we saw)
            out.append(Decision(VMCreated(meta=emit.meta(ctx, agg, key), manifest=manifest)))
    elif not paused and len(live) > want:
        for n in _scale_in_order(pool, live)[: len(live) - want]:
            vm = live[n]
            ev = VMDeleted(meta=emit.meta(ctx, emit.vm_aggregate(vm), f"vmpool-delete/{vm.uid}"))
            out.append(Decision(ev))
    ready = 0
    for vm in live.values():
        vmi = cluster.vmi_of_vm(vm)
        ready += vmi is not None and rp.vmi_ready(vmi)
    status = rp.status(pool.spec.get("selector") or {}, len(live), ready, paused)
    return out + _status_decision(pool, status, ctx)
