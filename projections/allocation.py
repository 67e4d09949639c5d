"""What a VMI reserves on its node, and what a node has allocated: the rule the scheduler,
the placement index, the node view and the metrics share."""

from __future__ import annotations

from typing import Any

from events.quantity import parse_cpu_millis, parse_quantity
from projections.cluster import Cluster

JSON = dict[str, Any]

# Memory the launcher and QEMU need beside the guest's RAM; the scheduler counts it too.
VMI_MEMORY_OVERHEAD = 64 * 1024 * 1024


def vmi_requests(manifest: JSON) -> tuple[int, int]:
    """(cpu millis, memory bytes) the scheduler reserves for a VMI, overhead included."""
    domain = (manifest.get("spec") or {}).get("domain") or {}
    res = domain.get("resources") or {}
    req, lim = res.get("requests") or {}, res.get("limits") or {}
    mem = req.get("memory") or lim.get("memory") or (domain.get("memory") or {}).get("guest")
    cpu = req.get("cpu") or lim.get("cpu")
    if cpu is None:
        topo = domain.get("cpu") or {}
        vcpus = (topo.get("sockets") or 1) * (topo.get("cores") or 1) * (topo.get("threads") or 1)
        cpu_millis = 100 * vcpus  # KubeVirt's default request is a tenth of a CPU per vCPU
    else:
        cpu_millis = parse_cpu_millis(cpu)
    mem_bytes = parse_quantity(mem) if mem is not None else 0
    return cpu_millis, mem_bytes + VMI_MEMORY_OVERHEAD


def node_allocated(cluster: Cluster, node: str) -> tuple[int, int, int]:
    """(cpu millis, memory bytes, VMI count) held by non-final VMIs placed on `node`,
    including migration targets being prepared there."""
    cpu = mem = n = 0
    for vmi in cluster.vmis_on(node):
        if vmi.final:
            continue
        c, m = vmi_requests(vmi.manifest)
        cpu, mem, n = cpu + c, mem + m, n + 1
    for mig in cluster.migrations.values():
        if mig.target_node == node and not mig.final:
            moving = cluster.vmis.get(f"{mig.namespace}/{mig.vmi_name}")
            if moving is not None:
                c, m = vmi_requests(moving.manifest)
                cpu, mem = cpu + c, mem + m
    return cpu, mem, n
