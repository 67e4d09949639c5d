"""The launcher pods: each VMI's virt-launcher as the core/v1 Pod KubeVirt would have made
for it (`pkg/virt-controller/services/template.go`), rendered on read from the VMI as the
api serves it. Nothing is folded or stored for a pod: its name, labels, phase, conditions
and containers all follow from the VMI's rendered object, so a watch of pods is a watch
of VMIs converted (`render_pod`), and a get or list renders the VMIs it needs.

Pure: no clock, no I/O."""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Iterator, Mapping
from typing import Any

from projections.allocation import vmi_requests
from projections.cluster import Cluster
from projections.replay import gone
from projections.views import VMIView

JSON = dict[str, Any]
PREFIX = "virt-launcher-"
_SUFFIX_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"  # Kubernetes' generateName alphabet
SUFFIX_LENGTH = 5
# KubeVirt's labels and annotations on a launcher pod (api/core/v1/types.go)
APP_LABEL = "kubevirt.io"
CREATED_BY_LABEL = "kubevirt.io/created-by"
VM_NAME_LABEL = "vm.kubevirt.io/name"  # DeprecatedVirtualMachineNameLabel: the host name
VMI_ID_LABEL = "vmi.kubevirt.io/id"
DOMAIN_LABEL = "kubevirt.io/domain"
DOMAIN_ANNOTATION = "kubevirt.io/domain"
UNPAUSED_GATE = "kubevirt.io/virtual-machine-unpaused"
COMPUTE = "compute"
CONSOLE_LOG = "guest-console-log"
LAUNCHER_IMAGE = "quay.io/kubevirt/virt-launcher:v1.6.0"
# the uid namespace of the pods' uids
_POD_UIDS = uuid.UUID("6a1f3c1e-8d2b-4f0e-9a57-1c3b5d7e9f20")


def pod_name(vmi_name: str, uid: str) -> str:
    """`virt-launcher-<vmi>-xxxxx`, the suffix derived from `uid` (the VMI's; a migration
    target's pod uid for its target pod, as the controller names it in its events) in
    Kubernetes' generateName alphabet."""
    digest = hashlib.sha256(uid.encode()).digest()
    suffix = "".join(_SUFFIX_ALPHABET[b % len(_SUFFIX_ALPHABET)] for b in digest[:SUFFIX_LENGTH])
    return f"{PREFIX}{vmi_name}-{suffix}"


def view_pod_name(vmi: VMIView) -> str:
    """The VMI's launcher pod: one name for its whole life (a migration's target pod is
    shown under it too), so a watch, a get and a list always agree on it."""
    return pod_name(vmi.name, vmi.uid)


def pod_name_of(vmi: JSON) -> str:
    """`view_pod_name` of the rendered VMI (what a watch has)."""
    meta = vmi.get("metadata") or {}
    return pod_name(str(meta.get("name", "")), str(meta.get("uid", "")))


def launcher_uid(vmi_uid: str, pod: str) -> str:
    """The pod's uid: one for its whole life, derived from its VMI's (the scheduler's pod
    uids, which `status.activePods` lists, come and go with scheduling and migrations)."""
    return str(uuid.uuid5(_POD_UIDS, f"{vmi_uid}/{pod}"))


def vmi_id(name: str) -> str:
    """KubeVirt's `vmi.kubevirt.io/id` label value (apimachinery.CalculateVirtualMachine
    InstanceID): the name, or past 63 characters its head and a hash."""
    if len(name) <= 63:
        return name
    return f"{name[: 63 - 8 - 1]}-{hashlib.sha1(name.encode()).hexdigest()[:8]}"


def pod_labels(name: str, uid: str, vmi_labels: Mapping[str, str] | None) -> dict[str, str]:
    """template.go's podLabels: the VMI's labels, then KubeVirt's own."""
    return {
        **(vmi_labels or {}),
        APP_LABEL: "virt-launcher",
        CREATED_BY_LABEL: uid,
        VM_NAME_LABEL: name,
        VMI_ID_LABEL: vmi_id(name),
    }


def _pod_annotations(name: str, vmi_annotations: Mapping[str, str] | None) -> dict[str, str]:
    """template.go's generatePodAnnotations: the VMI's (but kubectl's and KubeVirt's
    observed versions), the domain, the default container, migration over unix sockets."""
    kept = {
        k: v
        for k, v in (vmi_annotations or {}).items()
        if not k.startswith(
            (
                "kubectl.kubernetes.io",
                "kubevirt.io/storage-observed-api-version",
                "kubevirt.io/latest-observed-api-version",
            )
        )
    }
    return {
        **kept,
        DOMAIN_ANNOTATION: name,
        "kubectl.kubernetes.io/default-container": COMPUTE,
        "kubevirt.io/migrationTransportUnix": "true",
        "descheduler.alpha.kubernetes.io/request-evict-only": "",
    }


def _transitions(status: JSON) -> dict[str, str]:
    return {
        str(t.get("phase")): str(t.get("phaseTransitionTimestamp"))
        for t in status.get("phaseTransitionTimestamps") or []
        if t.get("phaseTransitionTimestamp")
    }


def pod_phase(vmi_phase: str, scheduled: bool) -> str:
    """The launcher pod's phase through the VMI's life: Pending until its node runs the
    launcher, Running while the launcher runs, then as the VMI ended."""
    if vmi_phase in ("Succeeded", "Failed", "Unknown"):
        return vmi_phase
    if vmi_phase in ("Scheduled", "Running") and scheduled:
        return "Running"
    return "Pending"


def _condition(ctype: str, ok: bool, at: str | None, reason: str = "", message: str = "") -> JSON:
    c: JSON = {"type": ctype, "status": "True" if ok else "False", "lastProbeTime": None}
    c["lastTransitionTime"] = at
    if reason:
        c["reason"] = reason
    if message:
        c["message"] = message
    return c


def _vmi_condition(status: JSON, ctype: str) -> JSON | None:
    return next((c for c in status.get("conditions") or [] if c.get("type") == ctype), None)


def _memory(n: int) -> str:
    for unit, size in (("Gi", 1 << 30), ("Mi", 1 << 20), ("Ki", 1 << 10)):
        if n and n % size == 0:
            return f"{n // size}{unit}"
    return str(n)


def _resources(vmi: JSON) -> JSON:
    """The compute container's requests: what the scheduler reserves for the VMI
    (`projections/allocation.py`), so `kubectl describe node` adds up as the node does."""
    cpu, memory = vmi_requests(vmi)
    cpu_text = f"{cpu // 1000}" if cpu % 1000 == 0 else f"{cpu}m"
    return {"requests": {"cpu": cpu_text, "memory": _memory(memory)}}


def _container_state(phase: str, started: str | None, finished: str | None) -> JSON:
    if phase == "Running":
        return {"running": {"startedAt": started}}
    if phase == "Succeeded":
        done = {"exitCode": 0, "reason": "Completed"}
        return {"terminated": {**done, "startedAt": started, "finishedAt": finished}}
    if phase == "Failed":
        done = {"exitCode": 1, "reason": "Error"}
        return {"terminated": {**done, "startedAt": started, "finishedAt": finished}}
    return {"waiting": {"reason": "ContainerCreating"}}


def has_console_log(vmi: JSON) -> bool:
    """KubeVirt adds the `guest-console-log` container to a VMI with a serial console."""
    devices = ((vmi.get("spec") or {}).get("domain") or {}).get("devices") or {}
    return devices.get("autoattachSerialConsole") is not False and (
        devices.get("logSerialConsole") is not False
    )


def pod_ip(vmi: JSON) -> str:
    """The pod's address: the VMI's first interface's (its pod network's, as the guest
    agent reports it); "" before that."""
    for iface in (vmi.get("status") or {}).get("interfaces") or []:
        addresses = [str(a) for a in iface.get("ipAddresses") or [] if a]
        v4 = [a for a in addresses if ":" not in a]  # a pod's primary IP: never link-local v6
        if v4:
            return v4[0]
        if iface.get("ipAddress") and not str(iface["ipAddress"]).startswith("fe80:"):
            return str(iface["ipAddress"])
    return ""


def render_pod(vmi: JSON, pod_address: str = "") -> JSON:
    """The launcher pod of a VMI as the api renders it (its resourceVersion the VMI's);
    `pod_address`: the pod network's address the VMI was scheduled with (a pod's IP is its
    network's from the start, as CNI gives it, not once the guest agent reports it)."""
    meta = vmi.get("metadata") or {}
    status = vmi.get("status") or {}
    spec = vmi.get("spec") or {}
    name, uid, ns = str(meta.get("name", "")), str(meta.get("uid", "")), meta.get("namespace")
    node = str(status.get("nodeName") or "")
    vmi_phase = str(status.get("phase") or "Pending")
    phase = pod_phase(vmi_phase, bool(node))
    times = _transitions(status)
    created = meta.get("creationTimestamp")
    scheduled_at = times.get("Scheduling") or times.get("Scheduled") or created
    started = times.get("Scheduled") or times.get("Running") or scheduled_at
    finished = times.get(vmi_phase) if phase in ("Succeeded", "Failed") else None
    pod = pod_name_of(vmi)
    pod_uid = launcher_uid(uid, pod)
    grace = spec.get("terminationGracePeriodSeconds")
    containers: list[JSON] = [
        {
            "name": COMPUTE,
            "image": LAUNCHER_IMAGE,
            "imagePullPolicy": "IfNotPresent",
            "command": [
                "/usr/bin/virt-launcher-monitor",
                "--qemu-timeout",
                "5m",
                "--name",
                name,
                "--uid",
                uid,
                "--namespace",
                ns,
            ],
            "resources": _resources(vmi),
            "terminationMessagePath": "/dev/termination-log",
            "terminationMessagePolicy": "File",
        }
    ]
    if has_console_log(vmi):
        containers.append(
            {
                "name": CONSOLE_LOG,
                "image": LAUNCHER_IMAGE,
                "imagePullPolicy": "IfNotPresent",
                "command": ["/usr/bin/virt-tail"],
                "args": ["--logfile", f"/var/run/kubevirt-private/{uid}/virt-serial0-log"],
                "resources": {"requests": {"cpu": "5m", "memory": "35M"}},
                "terminationMessagePath": "/dev/termination-log",
                "terminationMessagePolicy": "File",
            }
        )
    running = phase == "Running"
    vmi_ready = _vmi_condition(status, "Ready") or {}
    paused = (_vmi_condition(status, "Paused") or {}).get("status") == "True"
    containers_ready = running and vmi_phase == "Running"
    ready = containers_ready and not paused
    conditions: list[JSON] = [
        _condition(UNPAUSED_GATE, not paused, started if running else None),
    ]
    if node:
        conditions.append(_condition("PodReadyToStartContainers", True, scheduled_at))
        conditions.append(_condition("Initialized", True, scheduled_at))
        reason = "" if ready else ("PodCompleted" if not running and phase != "Pending" else "")
        conditions.append(
            _condition("Ready", ready, vmi_ready.get("lastTransitionTime") or started, reason)
        )
        conditions.append(_condition("ContainersReady", containers_ready, started, reason))
        conditions.append(_condition("PodScheduled", True, scheduled_at))
    else:
        unschedulable = _vmi_condition(status, "PodScheduled")
        if unschedulable is not None:
            conditions.append(
                _condition(
                    "PodScheduled",
                    False,
                    created,
                    "Unschedulable",
                    str(unschedulable.get("message") or ""),
                )
            )
    pod_status: JSON = {"phase": phase, "conditions": conditions, "qosClass": "Burstable"}
    if node:
        address = pod_address or pod_ip(vmi)
        pod_status["hostIP"] = "127.0.0.1"
        pod_status["hostIPs"] = [{"ip": "127.0.0.1"}]
        if address:
            pod_status["podIP"] = address
            pod_status["podIPs"] = [{"ip": address}]
        pod_status["startTime"] = scheduled_at
        state = _container_state(phase, started, finished)
        pod_status["containerStatuses"] = [
            {
                "name": c["name"],
                "image": LAUNCHER_IMAGE,
                "imageID": LAUNCHER_IMAGE,
                "containerID": f"libvirt://{pod_uid}/{c['name']}",
                "ready": containers_ready,
                "restartCount": 0,
                "started": running,
                "state": state,
            }
            for c in containers
        ]
    pod_meta: JSON = {
        "name": pod,
        "generateName": f"{PREFIX}{name}-",
        "namespace": ns,
        "uid": pod_uid,
        "resourceVersion": meta.get("resourceVersion"),
        "creationTimestamp": created,
        "labels": pod_labels(name, uid, meta.get("labels")),
        "annotations": _pod_annotations(name, meta.get("annotations")),
        "ownerReferences": [
            {
                "apiVersion": vmi.get("apiVersion") or "kubevirt.io/v1",
                "kind": "VirtualMachineInstance",
                "name": name,
                "uid": uid,
                "controller": True,
                "blockOwnerDeletion": True,
            }
        ],
    }
    if meta.get("deletionTimestamp"):
        pod_meta["deletionTimestamp"] = meta["deletionTimestamp"]
        pod_meta["deletionGracePeriodSeconds"] = (grace if grace is not None else 30) + 15
    pod_spec: JSON = {
        "containers": containers,
        "restartPolicy": "Never",
        "terminationGracePeriodSeconds": (grace if grace is not None else 30) + 15,
        "dnsPolicy": "ClusterFirst",
        "serviceAccountName": "default",
        "serviceAccount": "default",
        "schedulerName": spec.get("schedulerName") or "default-scheduler",
        "hostname": spec.get("hostname") or name,
        "nodeSelector": {"kubevirt.io/schedulable": "true", **(spec.get("nodeSelector") or {})},
        "readinessGates": [{"conditionType": UNPAUSED_GATE}],
        "enableServiceLinks": False,
        "priority": 0,
        "preemptionPolicy": "PreemptLowerPriority",
        "securityContext": {"runAsUser": 107, "runAsGroup": 107, "fsGroup": 107},
    }
    if node:
        pod_spec["nodeName"] = node
    if spec.get("tolerations"):
        pod_spec["tolerations"] = spec["tolerations"]
    if spec.get("affinity"):
        pod_spec["affinity"] = spec["affinity"]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": pod_meta,
        "spec": pod_spec,
        "status": pod_status,
    }


class PodTable(Mapping[str, VMIView]):
    """The pods' table as the api's reads want it, over the fold's VMIs without a copy:
    `ns/virt-launcher-<vmi>-xxxxx` → the VMI. A get looks one VMI up by the name in the
    pod's (O(1)); only a list walks them."""

    def __init__(self, cluster: Cluster) -> None:
        self.vmis = cluster.vmis

    def __getitem__(self, k: str) -> VMIView:
        ns, _, pod = k.rpartition("/")
        vmi_name = pod.removeprefix(PREFIX)[: -(SUFFIX_LENGTH + 1)]
        if not pod.startswith(PREFIX) or not vmi_name:
            raise KeyError(k)
        vmi = self.vmis.get(f"{ns}/{vmi_name}")
        if vmi is None or gone(vmi) or view_pod_name(vmi) != pod:
            raise KeyError(k)
        return vmi

    def __iter__(self) -> Iterator[str]:
        for vmi in self.vmis.values():
            if not gone(vmi):
                yield f"{vmi.namespace}/{view_pod_name(vmi)}"

    def __len__(self) -> int:
        return sum(1 for _ in self)
