"""Instance types and preferences (instancetype.kubevirt.io): finding the one a VM names,
KubeVirt's conflict rule, and applying both to a VMI spec. Pure: JSON in, JSON out.

An instance type owns the VM's CPU and memory: a VM that sets any of them itself conflicts
("VM field(s) ... conflicts with selected instance type"). A preference only fills what the
VM leaves unset."""

from __future__ import annotations

import copy
from typing import Any, NamedTuple

from events.meta import ResourceKind
from projections.cluster import Cluster, key

JSON = dict[str, Any]
GROUP = "instancetype.kubevirt.io"
CLUSTER_INSTANCETYPE = "VirtualMachineClusterInstancetype"
CLUSTER_PREFERENCE = "VirtualMachineClusterPreference"
# matcher kind (as users write it, any case) → (aggregate kind, plural, cluster-scoped)
_KINDS: dict[str, tuple[ResourceKind, str, bool]] = {
    "virtualmachineinstancetype": (ResourceKind.INSTANCETYPE, "virtualmachineinstancetypes", False),
    "virtualmachineclusterinstancetype": (
        ResourceKind.CLUSTER_INSTANCETYPE,
        "virtualmachineclusterinstancetypes",
        True,
    ),
    "virtualmachinepreference": (ResourceKind.PREFERENCE, "virtualmachinepreferences", False),
    "virtualmachineclusterpreference": (
        ResourceKind.CLUSTER_PREFERENCE,
        "virtualmachineclusterpreferences",
        True,
    ),
}


class Found(NamedTuple):
    kind: str  # KubeVirt's Kind, e.g. VirtualMachineClusterInstancetype
    name: str
    spec: JSON
    revision_name: str


def default_kind(field: str) -> str:
    return CLUSTER_INSTANCETYPE if field == "instancetype" else CLUSTER_PREFERENCE


def find(cluster: Cluster, namespace: str, vm_name: str, field: str, matcher: JSON) -> Found | str:
    """The instance type (`field` "instancetype") or preference a VM's matcher names, or
    KubeVirt's error text when there is none."""
    kind = str(matcher.get("kind") or default_kind(field))
    name = str(matcher.get("name") or "")
    entry = _KINDS.get(kind.lower())
    wanted = "instancetype" if field == "instancetype" else "preference"
    if entry is None or wanted not in kind.lower():
        return f"got unexpected kind in {wanted.capitalize()}Matcher: {kind}"
    agg_kind, plural, cluster_scoped = entry
    table = cluster.resources[agg_kind]
    view = table.get(name if cluster_scoped else key(namespace, name))
    if view is None:
        return f'{plural}.{GROUP} "{name}" not found'
    canonical = next(k for k, v in _CANONICAL.items() if v == agg_kind)
    # KubeVirt's ControllerRevision name: <vm>-<object>-<object uid>-<object generation>
    revision = f"{vm_name}-{name}-{view.uid}-{view.generation}"
    return Found(canonical, name, view.spec, revision)


_CANONICAL = {
    "VirtualMachineInstancetype": ResourceKind.INSTANCETYPE,
    CLUSTER_INSTANCETYPE: ResourceKind.CLUSTER_INSTANCETYPE,
    "VirtualMachinePreference": ResourceKind.PREFERENCE,
    CLUSTER_PREFERENCE: ResourceKind.CLUSTER_PREFERENCE,
}


def revision(found: Found) -> JSON:
    """What VMRevisionRecorded keeps of it (KubeVirt's ControllerRevision data)."""
    return {
        "kind": found.kind,
        "name": found.name,
        "revisionName": found.revision_name,
        "spec": found.spec,
    }


# ------------------------------------------------------------------- conflicts
def conflicts(instancetype: JSON, vmi_spec: JSON, base: str = "spec.template.spec") -> list[str]:
    """The VM's own fields the instance type would overwrite (KubeVirt's validateCPU and
    applyMemory), as field paths."""
    domain = vmi_spec.get("domain") or {}
    resources = domain.get("resources") or {}
    requests, limits = resources.get("requests") or {}, resources.get("limits") or {}
    cpu, memory = domain.get("cpu") or {}, domain.get("memory") or {}
    it_cpu, it_mem = instancetype.get("cpu") or {}, instancetype.get("memory") or {}
    out: list[str] = []
    if "cpu" in requests:
        out.append("domain.resources.requests.cpu")
    if "cpu" in limits:
        out.append("domain.resources.limits.cpu")
    out += [f"domain.cpu.{f}" for f in ("sockets", "cores", "threads") if cpu.get(f)]
    if cpu.get("model") and it_cpu.get("model") is not None:
        out.append("domain.cpu.model")
    for f in ("dedicatedCPUPlacement", "isolateEmulatorThread"):
        if cpu.get(f) and it_cpu.get(f) is not None:
            out.append(f"domain.cpu.{f}")
    for f in ("numa", "realtime"):
        if cpu.get(f) is not None and it_cpu.get(f) is not None:
            out.append(f"domain.cpu.{f}")
    # memory: the first conflict only, as KubeVirt's applyMemory returns early
    for present, path in (
        (memory.get("guest") is not None, "domain.memory.guest"),
        (
            memory.get("hugepages") is not None and it_mem.get("hugepages") is not None,
            "domain.memory.hugepages",
        ),
        (
            memory.get("maxGuest") is not None and it_mem.get("maxGuest") is not None,
            "domain.memory.maxGuest",
        ),
        ("memory" in requests, "domain.resources.requests.memory"),
        ("memory" in limits, "domain.resources.limits.memory"),
    ):
        if present:
            out.append(path)
            break
    return [f"{base}.{p}" for p in out]


def conflict_message(paths: list[str]) -> str:
    return f"VM field(s) {', '.join(paths)} conflicts with selected instance type"


# ----------------------------------------------------------------------- apply
def apply(instancetype: JSON | None, preference: JSON | None, vmi_spec: JSON) -> JSON:
    """The VMI spec with the instance type applied and the preference's defaults filled in;
    a new dict (the caller's is not changed)."""
    spec = copy.deepcopy(vmi_spec)
    domain = spec.setdefault("domain", {})
    pref = preference or {}
    if instancetype is not None:
        _apply_cpu(instancetype.get("cpu") or {}, pref, domain)
        _apply_memory(instancetype.get("memory") or {}, domain)
        if instancetype.get("ioThreadsPolicy") and not domain.get("ioThreadsPolicy"):
            domain["ioThreadsPolicy"] = instancetype["ioThreadsPolicy"]
        if instancetype.get("nodeSelector") and not spec.get("nodeSelector"):
            spec["nodeSelector"] = dict(instancetype["nodeSelector"])
        if instancetype.get("schedulerName") and not spec.get("schedulerName"):
            spec["schedulerName"] = instancetype["schedulerName"]
    _fill_preference(pref, spec, domain)
    return spec


def _topology(vcpus: int, preference: JSON) -> JSON:
    topo = {"sockets": 1, "cores": 1, "threads": 1}
    if vcpus == 1:
        return topo
    preferred = str((preference.get("cpu") or {}).get("preferredCPUTopology") or "sockets")
    match preferred:
        case "cores" | "preferCores":
            topo["cores"] = vcpus
        case "threads" | "preferThreads":
            topo["threads"] = vcpus
        case "spread" | "preferSpread":
            spread = preference.get("preferSpreadSocketToCoreRatio") or 2
            ratio = int(spread)
            topo["cores"], topo["sockets"] = ratio, max(1, vcpus // ratio)
        case _:  # sockets, any
            topo["sockets"] = vcpus
    return topo


def _apply_cpu(it_cpu: JSON, preference: JSON, domain: JSON) -> None:
    cpu = domain.setdefault("cpu", {})
    for f in ("model", "dedicatedCPUPlacement", "isolateEmulatorThread", "maxSockets"):
        if it_cpu.get(f) is not None:
            cpu[f] = it_cpu[f]
    for f in ("numa", "realtime"):
        if it_cpu.get(f) is not None:
            cpu[f] = copy.deepcopy(it_cpu[f])
    cpu.update(_topology(int(it_cpu.get("guest") or 1), preference))


def _apply_memory(it_mem: JSON, domain: JSON) -> None:
    memory = domain.setdefault("memory", {})
    if it_mem.get("guest") is not None:
        memory["guest"] = it_mem["guest"]
    for f in ("hugepages", "maxGuest"):
        if it_mem.get(f) is not None:
            memory[f] = copy.deepcopy(it_mem[f])


def _fill_preference(pref: JSON, spec: JSON, domain: JSON) -> None:
    """Only what the VM left unset."""
    devices_pref = pref.get("devices") or {}
    devices = domain.setdefault("devices", {})
    bus = devices_pref.get("preferredDiskBus")
    if bus:  # a volume without a disk gets one on the preferred bus
        named = {d.get("name") for d in devices.get("disks") or []}
        for volume in spec.get("volumes") or []:
            if volume.get("name") not in named:
                devices.setdefault("disks", []).append({"name": volume.get("name")})
    for disk in devices.get("disks") or []:
        target = disk.get("disk")
        if bus and isinstance(target, dict) and not target.get("bus"):
            target["bus"] = bus
        if bus and not any(k in disk for k in ("disk", "cdrom", "lun")):
            disk["disk"] = {"bus": bus}
    model = devices_pref.get("preferredInterfaceModel")
    for iface in devices.get("interfaces") or []:
        if model and not iface.get("model"):
            iface["model"] = model
    if "preferredRng" in devices_pref and "rng" not in devices:
        devices["rng"] = copy.deepcopy(devices_pref["preferredRng"])
    firmware_pref = pref.get("firmware") or {}
    if firmware_pref.get("preferredEfi") is not None:
        firmware = domain.setdefault("firmware", {})
        if not firmware.get("bootloader"):
            firmware["bootloader"] = {"efi": copy.deepcopy(firmware_pref["preferredEfi"])}
    features_pref = pref.get("features") or {}
    if features_pref.get("preferredSmm") is not None:
        features = domain.setdefault("features", {})
        features.setdefault("smm", copy.deepcopy(features_pref["preferredSmm"]))
    machine = (pref.get("machine") or {}).get("preferredMachineType")
    if machine and not (domain.get("machine") or {}).get("type"):
        domain["machine"] = {"type": machine}
    grace = pref.get("preferredTerminationGracePeriodSeconds")
    if grace is not None and spec.get("terminationGracePeriodSeconds") is None:
        spec["terminationGracePeriodSeconds"] = grace
