"""Views → KubeVirt objects (JSON shape): the manifest the user wrote, with `metadata`
bookkeeping and a `status` built from the views. Derived fields (printableStatus, ready,
conditions) are computed here, at read time, not stored; the domain rules they show
(allocation, live-migratability) live in their own modules."""

from __future__ import annotations

import datetime as dt
import functools
import itertools
import math
from collections.abc import Callable
from typing import Any, assert_never

from events.catalog import ERR_IMAGE_PULL, SYNC_FAILED_CONDITION, InterfaceStatus, NodeSystemInfo
from events.meta import Kind, KindToken, own_kind
from projections import disk_targets, namespaces, storage, volumes
from projections.allocation import node_allocated
from projections.cluster import Cluster
from projections.migratability import live_migratable
from projections.snapshots import in_progress
from projections.views import (
    MigrationView,
    NodeView,
    PolicyView,
    ResourceView,
    VMIView,
    VMView,
)

JSON = dict[str, Any]


def rfc3339(ts: float | None) -> str | None:
    if ts is None:
        return None
    return _rfc3339_second(math.floor(ts))


@functools.lru_cache(maxsize=4096)
def _rfc3339_second(second: int) -> str:
    # every render formats the object's timestamps again, and they repeat: formatting
    # them was 4% of the api's CPU under a create load
    return dt.datetime.fromtimestamp(second, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _metadata(manifest: JSON, rv: int, created_at: float, **extra: Any) -> JSON:
    meta = dict(manifest.get("metadata") or {})
    meta["resourceVersion"] = str(rv)
    meta.setdefault("creationTimestamp", rfc3339(created_at))
    meta.update({k: v for k, v in extra.items() if v is not None})
    return meta


def _condition(ctype: str, ok: bool, reason: str = "", message: str = "") -> JSON:
    c: JSON = {"type": ctype, "status": "True" if ok else "False"}
    if reason:
        c["reason"] = reason
    if message:
        c["message"] = message
    return c


def _vmi_ready(vmi: VMIView) -> JSON:
    """The VMI's Ready condition (the VM's mirrors it while the VMI exists)."""
    if vmi.phase == "Running" and not vmi.paused:
        return _condition("Ready", True)
    if vmi.deletion_requested_at:
        return _condition("Ready", False, "PodTerminating")
    return _condition("Ready", False, "GuestNotRunning" if vmi.pod_uid else "PodNotExists")


# ------------------------------------------------------------------------- VM
def printable_status(cluster: Cluster, vm: VMView, now: float) -> str:
    """KubeVirt's precedence: the first that applies wins."""
    vmi = cluster.vmi_of_vm(vm)
    if vm.deleted_at is not None:
        return "Terminating"
    if vmi is not None and not vmi.final:
        stopping = vmi.deletion_requested_at is not None or any(
            r.action == "Stop" for r in vm.requests
        )
        if stopping:
            return "Stopping"
        mig = cluster.active_migration(vmi.namespace, vmi.name)
        if mig is not None and mig.phase not in ("Pending",):
            return "Migrating"
        if vmi.phase == "Running":
            return "Paused" if vmi.paused else "Running"
        if vmi.unschedulable:
            return storage.printable(vmi.unschedulable) or "ErrorUnschedulable"
        return "Starting"
    if vmi is not None and vmi.reason == ERR_IMAGE_PULL:
        return ERR_IMAGE_PULL  # KubeVirt ranks it above CrashLoopBackOff
    if vm.start_failure is not None and vm.start_failure.retry_after > now:
        return "CrashLoopBackOff"
    if vmi is not None and vmi.phase == "Running":
        return "Running"
    return "Stopped"


def render_vm(cluster: Cluster, vm: VMView, now: float) -> JSON:
    vmi = cluster.vmi_of_vm(vm)
    obj = vm.manifest  # a fresh decode: ours to change
    obj["metadata"] = _metadata(
        obj,
        vm.resource_version,
        vm.created_at,
        uid=vm.uid,
        generation=vm.generation,
        deletionTimestamp=rfc3339(vm.deleted_at),
    )
    ready = vmi is not None and vmi.phase == "Running" and not vmi.paused
    status: JSON = {
        "printableStatus": printable_status(cluster, vm, now),
        "runStrategy": vm.run_strategy,
        "created": vmi is not None and not vmi.final,
        "ready": ready,
    }
    conditions = [
        # KubeVirt's VM controller: VMINotExists without a VMI, else the VMI's Ready
        _condition("Ready", False, "VMINotExists", "VMI does not exist")
        if vmi is None
        else _vmi_ready(vmi)
    ]
    if vmi is not None and (paused := paused_condition(vmi)) is not None:
        conditions.append(_condition("Paused", True, paused[0], paused[1]))
    if vmi is not None and vmi.unschedulable:
        conditions.append(_condition("Failure", True, "Unschedulable", vmi.unschedulable))
    elif vmi is None and vm.create_failure and vm.create_failure_generation == vm.generation:
        conditions.append(_condition("Failure", True, "FailedCreate", vm.create_failure))
    status["conditions"] = conditions
    if vm.requests:
        status["stateChangeRequests"] = [
            {"action": r.action, **({"uid": r.uid} if r.uid else {})} for r in vm.requests
        ]
    if vm.start_failure is not None:
        f = vm.start_failure
        status["startFailure"] = {
            "consecutiveFailCount": f.consecutive_fail_count,
            "lastFailedVMIUID": f.last_failed_vmi_uid,
            "retryAfterTimestamp": rfc3339(f.retry_after),
        }
    _revision_refs(obj, vm, status)
    status.update(in_progress(cluster, vm))
    obj["status"] = status
    return obj


def _revision_refs(obj: JSON, vm: VMView, status: JSON) -> None:
    """The recorded instance type and preference: `spec.<field>.revisionName` and
    `status.<field>Ref` (KubeVirt's ControllerRevision reference)."""
    spec = obj.setdefault("spec", {})
    for field, rev in vm.revision.items():
        matcher = spec.get(field)
        if isinstance(matcher, dict):
            matcher["revisionName"] = rev["revisionName"]
        status[f"{field}Ref"] = {
            "kind": rev["kind"],
            "name": rev["name"],
            "controllerRevisionRef": {"name": rev["revisionName"]},
        }


# ------------------------------------------------------------------------ VMI
def _interface(i: InterfaceStatus) -> JSON:
    """KubeVirt's VirtualMachineInstanceNetworkInterface: the domain's NIC, with what the
    guest agent says of it (its name in the guest, its addresses; IPv4 first)."""
    out: JSON = {"name": i.name, "mac": i.mac, "infoSource": "domain"}
    if i.interface_name:
        out["interfaceName"] = i.interface_name
        out["infoSource"] = "domain, guest-agent"
    ips = sorted(i.ip_addresses, key=lambda a: ":" in a)  # stable: IPv4 before IPv6
    if ips:
        out["ipAddress"] = ips[0]
        out["ipAddresses"] = ips
    return out


def _volume_status(cluster: Cluster, vmi: VMIView, spec: JSON) -> list[JSON]:
    """KubeVirt's `status.volumeStatus`: every volume in the spec's order, its disk's
    target once the domain exists, a claim's facts for a persistentVolumeClaim or
    dataVolume volume (virt-controller's `persistentVolumeClaimInfo`); hotplugged volumes
    as `volumes.volume_status` says, and those leaving after them."""
    hotplugged = {
        str(e["name"]): e for e in volumes.volume_status(spec, vmi.volume_targets, vmi.pod_name)
    }
    started = vmi.ever_running and not vmi.final
    disks = ((spec.get("domain") or {}).get("devices") or {}).get("disks") or []
    targets = disk_targets.boot_targets(disks) if started else {}
    out: list[JSON] = []
    for volume in spec.get("volumes") or []:
        name = str(volume.get("name") or "")
        if name in hotplugged:
            out.append(hotplugged.pop(name))
            continue
        entry: JSON = {"name": name, "target": targets.get(name, "")}
        claim_name = volumes.claim_of(volume)
        found = storage.find_claim(cluster, vmi.namespace, claim_name) if claim_name else None
        if found is not None:
            claim_spec = found.spec
            mode = str(claim_spec.get("volumeMode") or "Filesystem")
            entry["persistentVolumeClaimInfo"] = {
                "claimName": claim_name,
                "accessModes": list(claim_spec.get("accessModes") or []),
                "volumeMode": mode,
                "capacity": dict(found.status.get("capacity") or {}),
                "requests": dict((claim_spec.get("resources") or {}).get("requests") or {}),
                "filesystemOverhead": "0.055" if mode == "Filesystem" else "0",
            }
        out.append(entry)
    return out + list(hotplugged.values())


def render_vmi(cluster: Cluster, vmi: VMIView) -> JSON:
    obj = vmi.manifest  # a fresh decode: ours to change
    obj["metadata"] = _metadata(
        obj,
        vmi.resource_version,
        vmi.created_at,
        uid=vmi.uid,
        deletionTimestamp=rfc3339(vmi.deletion_requested_at),
    )
    status: JSON = {
        "phase": vmi.phase,
        "phaseTransitionTimestamps": [
            {"phase": p, "phaseTransitionTimestamp": rfc3339(t)} for p, t in vmi.transitions
        ],
    }
    if vmi.node:
        status["nodeName"] = vmi.node
    if vmi.reason:
        status["reason"] = vmi.reason
    conditions = [_vmi_ready(vmi)]
    if (paused := paused_condition(vmi)) is not None:
        conditions.append(_condition("Paused", True, *paused))
    if vmi.unschedulable:
        conditions.append(_condition("PodScheduled", False, "Unschedulable", vmi.unschedulable))
    if vmi.reason == ERR_IMAGE_PULL:
        conditions.append(_condition("Synchronized", False, ERR_IMAGE_PULL, vmi.message))
    elif vmi.sync_failure:
        conditions.append(
            _condition("Synchronized", False, SYNC_FAILED_CONDITION, vmi.sync_failure)
        )
    conditions.append(_condition("LiveMigratable", *live_migratable(obj, cluster)))
    if vmi.agent_connected and vmi.phase == "Running":
        conditions.append(_condition("AgentConnected", True, ""))
    if vmi.domain_type == "qemu":
        conditions.append(
            _condition(
                "SoftwareEmulation",
                True,
                "KVMNotUsable",
                "the guest runs under QEMU's software emulation (TCG): KVM is not usable on "
                "this node",
            )
        )
    status["conditions"] = conditions
    if vmi.ever_running:
        status[DOMAIN_STATUS_KEY] = domain_status(vmi)
    if vmi.active_pods:
        status["activePods"] = dict(vmi.active_pods)
    if volume_status := _volume_status(cluster, vmi, obj.get("spec") or {}):
        status["volumeStatus"] = volume_status
    if vmi.interfaces and not vmi.final:
        status["interfaces"] = [_interface(i) for i in vmi.interfaces]
    mig = cluster.migrations.get(f"{vmi.namespace}/{vmi.migration}") if vmi.migration else None
    if mig is not None:
        status["migrationState"] = migration_state(mig)
        status["migrationMethod"] = "LiveMigration"
    status["qosClass"] = "Burstable"
    if vmi.final:
        status.pop("activePods", None)
    obj["status"] = status
    return obj


#: KubeVirt's Paused conditions (virt-handler's calculatePausedCondition); a domain paused
#: for another reason (libvirt could not name it, ...) gets none
PAUSED_CONDITIONS = {
    "PausedByUser": "VMI was paused by user",
    "PausedIOError": "VMI was paused, low-level IO error detected",
}


def paused_condition(vmi: VMIView) -> tuple[str, str] | None:
    """(reason, message) of the VMI's Paused condition; None when it has none."""
    if not vmi.paused or vmi.pause_reason not in PAUSED_CONDITIONS:
        return None
    return vmi.pause_reason, PAUSED_CONDITIONS[vmi.pause_reason]


#: virtstream's extra: the libvirt domain behind the VMI (KubeVirt's status has no such field)
DOMAIN_STATUS_KEY = "virtstream.io/domain"


def domain_status(vmi: VMIView) -> JSON:
    """The domain's state as the handler last reported it, its type and QEMU's pid."""
    if vmi.final:
        return {"state": "Shutoff", "type": vmi.domain_type}
    st: JSON = {"state": "Paused" if vmi.paused else "Running", "type": vmi.domain_type}
    if vmi.qemu_pid:
        st["qemuPid"] = vmi.qemu_pid
    return st


def migration_state(mig: MigrationView) -> JSON:
    st: JSON = {
        "migrationUid": mig.uid,
        "sourceNode": mig.source_node or None,
        "targetNode": mig.target_node or None,
        "sourcePod": mig.source_pod or None,
        "targetPod": mig.target_pod or None,
        "targetNodeAddress": mig.target_address or None,
        "startTimestamp": rfc3339(mig.start_timestamp),
        "endTimestamp": rfc3339(mig.end_timestamp),
        "completed": mig.phase == "Succeeded",
        "failed": mig.phase == "Failed",
        "failureReason": mig.failure_reason or None,
        "abortStatus": mig.abort_status or None,
        "abortRequested": mig.abort_requested or None,
        "mode": mig.mode or None,
        "migrationPolicyName": mig.policy or None,
    }
    return {k: v for k, v in st.items() if v is not None}


# ------------------------------------------------------------------ migration
def render_migration(mig: MigrationView) -> JSON:
    obj = mig.manifest  # a fresh decode: ours to change
    obj["metadata"] = _metadata(obj, mig.resource_version, mig.created_at, uid=mig.uid)
    status: JSON = {
        "phase": mig.phase,
        "phaseTransitionTimestamps": [
            {"phase": p, "phaseTransitionTimestamp": rfc3339(t)} for p, t in mig.transitions
        ],
        "migrationState": migration_state(mig),
    }
    if mig.data_total:
        status["migrationState"]["dataProcessedBytes"] = mig.data_processed
        status["migrationState"]["dataRemainingBytes"] = mig.data_remaining
        status["migrationState"]["dataTotalBytes"] = mig.data_total
    if mig.message and mig.phase == "Pending":
        status["conditions"] = [_condition("Pending", True, "Pending", mig.message)]
    obj["status"] = status
    return obj


# ----------------------------------------------------------------------- node
def _quantity_cpu(millis: int) -> str:
    return str(millis // 1000) if millis % 1000 == 0 else f"{millis}m"


def _quantity_mem(n: int) -> str:
    return f"{n // 1024}Ki"


def _node_info(info: NodeSystemInfo) -> JSON:
    """Every field of Kubernetes' NodeSystemInfo (the clients' models require each one);
    kube-proxy is not run, so its version is empty, as a kubelet of 1.31+ reports it."""
    return {
        "machineID": info.machine_id,
        "systemUUID": info.system_uuid,
        "bootID": info.boot_id,
        "kubeProxyVersion": "",
        "kubeletVersion": info.kubelet_version,
        "osImage": info.os_image,
        "kernelVersion": info.kernel_version,
        "containerRuntimeVersion": info.container_runtime_version,
        "architecture": info.architecture,
        "operatingSystem": info.operating_system,
    }


def _network_condition(node: NodeView) -> list[JSON]:
    """Kubernetes' NetworkUnavailable node condition, for a qemu node: False with its pod
    network, True (and why) when its guests have only QEMU's user-mode networking."""
    if node.pod_cidr:
        return [_condition("NetworkUnavailable", False, "PodNetworkReady", "")]
    if node.hypervisor != "qemu":
        return []
    why = node.pod_network_message or "the node has no pod network"
    msg = f"guests have QEMU's user-mode networking only: {why}"
    return [_condition("NetworkUnavailable", True, "NoPodNetwork", msg)]


#: the annotations the server writes on a node (a user's write of them is not kept)
NODE_SERVER_ANNOTATIONS: dict[str, Callable[[NodeView], str]] = {
    "kubevirt.io/heartbeat": lambda n: _rfc3339_second(math.floor(n.last_heartbeat)),
    "virtstream.io/hypervisor": lambda n: n.hypervisor,
}


def node_labels(node: NodeView) -> JSON:
    """A node's labels as served: the hostname label is the node's own."""
    return {**node.labels, "kubernetes.io/hostname": node.name}


def render_node(cluster: Cluster, node: NodeView, now: float) -> JSON:
    cpu, mem, count = node_allocated(cluster, node.name)
    cap = node.capacity
    ready = not node.unresponsive
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": node.name,
            "labels": node_labels(node),
            "resourceVersion": str(node.resource_version),
            "creationTimestamp": rfc3339(node.created_at),
            "annotations": {
                **node.annotations,
                **{k: f(node) for k, f in NODE_SERVER_ANNOTATIONS.items()},
            },
        },
        "spec": {
            **({"podCIDR": node.pod_cidr, "podCIDRs": [node.pod_cidr]} if node.pod_cidr else {}),
            **({"unschedulable": True} if node.cordoned else {}),
            **(
                {
                    "taints": [
                        {"key": t.key, "value": t.value, "effect": t.effect}
                        | (
                            {"timeAdded": rfc3339(added)}
                            if t.effect == "NoExecute" and added is not None
                            else {}
                        )
                        for t, added in itertools.zip_longest(node.taints, node.taints_added)
                    ]
                }
                if node.taints
                else {}
            ),
        },
        "status": {
            "capacity": {
                "cpu": _quantity_cpu(cap.cpu_millis),
                "memory": _quantity_mem(cap.memory_bytes),
            },
            # what pods may use: the capacity less what the node reserves for its system
            # (a handler reserves nothing), never less what is allocated (`allocated`)
            "allocatable": {
                "cpu": _quantity_cpu(cap.cpu_millis),
                "memory": _quantity_mem(cap.memory_bytes),
            },
            "allocated": {"cpu": _quantity_cpu(cpu), "memory": _quantity_mem(mem), "vmis": count},
            "conditions": [
                _condition(
                    "Ready",
                    ready,
                    "KubeletReady" if ready else "NodeUnresponsive",
                    "" if ready else "virt-handler is not responsive, marking node as unresponsive",
                ),
                *_network_condition(node),
            ],
            "addresses": [{"type": "InternalIP", "address": node.address}] if node.address else [],
            "nodeInfo": _node_info(node.info),
            # as a Node's kubelet endpoint: where the api reaches the node's handler
            **(
                {"daemonEndpoints": {"consoleEndpoint": {"Port": node.console_port}}}
                if node.console_port
                else {}
            ),
            "schedulable": node.schedulable,
            "draining": node.draining,
            "heartbeatAgeSeconds": max(0.0, round(now - node.last_heartbeat, 3)),
        },
    }


def render_policy(policy: PolicyView) -> JSON:
    obj = policy.manifest  # a fresh decode: ours to change
    obj["metadata"] = _metadata(obj, policy.resource_version, policy.created_at, uid=policy.uid)
    return obj


def render_resource(res: ResourceView) -> JSON:
    """A generic resource: the user's manifest, its metadata, its controller's status."""
    obj = res.manifest  # a fresh decode: ours to change
    obj["metadata"] = _metadata(
        obj, res.resource_version, res.created_at, uid=res.uid, generation=res.generation
    )
    if res.status_json:
        obj["status"] = res.status
    return obj


def render_namespace(view: ResourceView) -> JSON:
    """As the API server serves a namespace: the namespace controller's finalizer, the
    phase."""
    obj = render_resource(view)
    obj["spec"] = {"finalizers": [namespaces.FINALIZER]}
    obj["status"] = {"phase": namespaces.phase(view)}
    return obj


def render_view(cluster: Cluster, kind: KindToken, view: Any, now: float) -> JSON:
    """Any view as the api serves it; `now` for the clock-dependent fields."""
    match own_kind(kind):
        case Kind.VM:
            return render_vm(cluster, view, now)
        case Kind.VMI:
            return render_vmi(cluster, view)
        case Kind.MIGRATION:
            return render_migration(view)
        case Kind.NODE:
            return render_node(cluster, view, now)
        case Kind.POLICY:
            return render_policy(view)
        case None if kind == namespaces.KIND:
            return render_namespace(view)
        case None:
            return render_resource(view)
        case never:
            assert_never(never)
