"""Services' endpoints, derived on read: the launcher pods (`launcher_pods.py`) a Service's
selector matches, each with its address, as the endpoints controller would list them.
Also the allocation of a Service's cluster IP and node ports (pure: from its uid and the
Services that exist). Pure."""

from __future__ import annotations

import hashlib
import ipaddress
from collections.abc import Iterator, Mapping
from typing import Any

from projections.cluster import Cluster
from projections.launcher_pods import launcher_uid, pod_labels, view_pod_name
from projections.render import rfc3339
from projections.views import ResourceView, VMIView

JSON = dict[str, Any]
KIND = "service"  # the subject token of Services (a generic kind)
NODE_PORTS = range(30000, 32768)  # the API server's default --service-node-port-range
SERVICE_CIDR = ipaddress.ip_network("10.96.0.0/12")  # kubeadm's default service CIDR


def services(cluster: Cluster) -> dict[str, ResourceView]:
    return cluster.resources[KIND]


def used_node_ports(cluster: Cluster, but: str = "") -> set[int]:
    """The node ports every Service (except `but`, "ns/name") holds."""
    out: set[int] = set()
    for k, svc in services(cluster).items():
        if k != but:
            out.update(p["nodePort"] for p in node_ports(svc.spec))
    return out


def node_ports(spec: Mapping[str, Any]) -> list[JSON]:
    """The ports of a Service spec that have a node port."""
    return [p for p in spec.get("ports") or [] if isinstance(p.get("nodePort"), int)]


def _start(uid: str, salt: str, size: int) -> int:
    return int.from_bytes(hashlib.sha256(f"{uid}/{salt}".encode()).digest()[:4]) % size


def allocate_node_port(uid: str, index: int, held: set[int]) -> int | None:
    """A free node port, the first free one from a point the Service's uid gives (so
    Services made at once do not race for the lowest); None when the range is full."""
    size = len(NODE_PORTS)
    start = _start(uid, f"port{index}", size)
    for i in range(size):
        port = NODE_PORTS.start + (start + i) % size
        if port not in held:
            return port
    return None


def allocate_cluster_ip(cluster: Cluster, uid: str) -> str:
    """An address of the service CIDR no other Service holds (never its first, the API
    server's `kubernetes` Service)."""
    held = {str(s.spec.get("clusterIP") or "") for s in services(cluster).values()}
    size = SERVICE_CIDR.num_addresses - 2
    start = _start(uid, "ip", size)
    for i in range(size):
        address = str(SERVICE_CIDR.network_address + 2 + (start + i) % size)
        if address not in held:
            return address
    return "None"


def matches(selector: Mapping[str, str], labels: Mapping[str, str]) -> bool:
    return all(labels.get(k) == v for k, v in selector.items())


def vmi_pod_labels(vmi: VMIView) -> dict[str, str]:
    labels = (vmi.manifest.get("metadata") or {}).get("labels")
    return pod_labels(vmi.name, vmi.uid, labels)


def selected(cluster: Cluster, namespace: str, selector: Mapping[str, str]) -> Iterator[VMIView]:
    """The VMIs of `namespace` whose launcher pods the selector matches (an empty selector
    selects nothing: such a Service's endpoints are the user's)."""
    if not selector:
        return
    for vmi in cluster.vmis.values():
        if vmi.namespace == namespace and not vmi.final and matches(selector, vmi_pod_labels(vmi)):
            yield vmi


def address_of(vmi: VMIView) -> str:
    """The pod's address: its pod network's (PodScheduled), else what the guest agent
    reports of its first interface."""
    if vmi.pod_address:
        return vmi.pod_address
    return next((a for i in vmi.interfaces for a in i.ip_addresses if ":" not in a), "")


def ready(vmi: VMIView) -> bool:
    return vmi.phase == "Running" and not vmi.paused and vmi.deletion_requested_at is None


def target_port(port: Mapping[str, Any]) -> int | str:
    target = port.get("targetPort")
    return target if target not in (None, "", 0) else int(port.get("port") or 0)


def render_endpoints(cluster: Cluster, svc: ResourceView) -> JSON:
    """core/v1 Endpoints of the Service: one subset, its ready and not ready addresses."""
    spec = svc.spec
    obj: JSON = {
        "apiVersion": "v1",
        "kind": "Endpoints",
        "metadata": {
            "name": svc.name,
            "namespace": svc.namespace,
            "uid": svc.uid,
            "resourceVersion": str(cluster.last_seq),
            "creationTimestamp": rfc3339(svc.created_at),
            "labels": {"endpoints.kubernetes.io/managed-by": "endpoint-controller"},
        },
    }
    addresses: list[JSON] = []
    not_ready: list[JSON] = []
    for vmi in selected(cluster, svc.namespace, spec.get("selector") or {}):
        ip = address_of(vmi)
        if not ip:
            continue  # the endpoints controller skips a pod without an address
        entry: JSON = {
            "ip": ip,
            "targetRef": {
                "kind": "Pod",
                "namespace": vmi.namespace,
                "name": view_pod_name(vmi),
                "uid": launcher_uid(vmi.uid, view_pod_name(vmi)),
            },
        }
        if vmi.node:
            entry["nodeName"] = vmi.node
        (addresses if ready(vmi) else not_ready).append(entry)
    ports = [
        {
            k: v
            for k, v in (
                ("name", p.get("name")),
                ("port", target_port(p)),
                ("protocol", p.get("protocol") or "TCP"),
            )
            if v is not None
        }
        for p in spec.get("ports") or []
        if isinstance(target_port(p), int)
    ]
    if addresses or not_ready:
        subset: JSON = {"ports": ports}
        if addresses:
            subset["addresses"] = addresses
        if not_ready:
            subset["notReadyAddresses"] = not_ready
        obj["subsets"] = [subset]
    return obj


def render_endpoint_slice(cluster: Cluster, svc: ResourceView) -> JSON:
    """The Service's discovery.k8s.io/v1 EndpointSlice (one, named as the Service): the
    Endpoints' addresses with their conditions."""
    eps = render_endpoints(cluster, svc)
    subset = (eps.get("subsets") or [{}])[0]
    endpoints = [
        {
            "addresses": [a["ip"]],
            "conditions": {"ready": ok, "serving": ok, "terminating": False},
            **({"nodeName": a["nodeName"]} if a.get("nodeName") else {}),
            "targetRef": a["targetRef"],
        }
        for key, ok in (("addresses", True), ("notReadyAddresses", False))
        for a in subset.get(key) or []
    ]
    meta = dict(eps["metadata"])
    meta["labels"] = {
        "kubernetes.io/service-name": svc.name,
        "endpointslice.kubernetes.io/managed-by": "endpointslice-controller.k8s.io",
    }
    meta["ownerReferences"] = [
        {"apiVersion": "v1", "kind": "Service", "name": svc.name, "uid": svc.uid,
         "controller": True, "blockOwnerDeletion": True}
    ]  # fmt: skip
    ports = [
        {
            "name": p.get("name") or "",
            "port": target_port(p),
            "protocol": p.get("protocol") or "TCP",
        }
        for p in svc.spec.get("ports") or []
        if isinstance(target_port(p), int)
    ]
    return {
        "apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSlice",
        "metadata": meta,
        "addressType": "IPv4",
        "endpoints": endpoints or None,
        "ports": ports,
    }
