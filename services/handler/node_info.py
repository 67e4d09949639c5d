"""The node a handler registers: capacity, labels, address (NodeJoined)."""

from __future__ import annotations

import platform
import socket

import msgspec

from events.catalog import NodeJoined, Resources
from events.meta import CLUSTER_SCOPE, Actor, Aggregate, Kind, Meta
from events.quantity import parse_quantity
from services.launcher.hypervisor import TEST_URI


class NodeConfig(msgspec.Struct, frozen=True, kw_only=True):
    name: str
    cpus: int | None = None
    memory: str | None = None  # a Kubernetes quantity, e.g. "16Gi"
    hypervisor: str = "test"
    address: str = "127.0.0.1"


def host_capacity(uri: str = TEST_URI) -> tuple[int, int]:
    """(cpus, memory bytes) from libvirt's getInfo() (the test driver: 16 CPUs, 3 GiB)."""
    import libvirt

    conn = libvirt.open(uri)
    try:
        info = conn.getInfo()
    finally:
        conn.close()
    return int(info[2]), int(info[1]) * 1024 * 1024


def capacity(cfg: NodeConfig) -> Resources:
    cpus, memory = cfg.cpus, parse_quantity(cfg.memory) if cfg.memory else None
    if cpus is None or memory is None:
        host_cpus, host_memory = host_capacity()
        cpus = host_cpus if cpus is None else cpus
        memory = host_memory if memory is None else memory
    return Resources(cpu_millis=cpus * 1000, memory_bytes=int(memory))


def labels(cfg: NodeConfig) -> dict[str, str]:
    return {
        "kubernetes.io/hostname": cfg.name,
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": {"x86_64": "amd64", "aarch64": "arm64"}.get(
            platform.machine(), platform.machine()
        ),
        "kubevirt.io/schedulable": "true",
        "virtstream.io/host": socket.gethostname(),
    }


def node_joined(cfg: NodeConfig, now: float) -> NodeJoined:
    service = f"virt-handler-{cfg.name}"
    cap = capacity(cfg)
    basis = f"{cap.cpu_millis}/{cap.memory_bytes}/{cfg.address}/{cfg.hypervisor}"
    event_id = f"{service}/NodeJoined/{basis}"
    return NodeJoined(
        meta=Meta(
            event_id=event_id,
            aggregate=Aggregate(kind=Kind.NODE, namespace=CLUSTER_SCOPE, name=cfg.name),
            occurred_at=now,
            correlation_id=event_id,
            actor=Actor(service=service, node=cfg.name),
            node=cfg.name,
        ),
        node=cfg.name,
        capacity=cap,
        labels=labels(cfg),
        address=cfg.address,
        hypervisor=cfg.hypervisor,
    )
