"""NetworkAttachmentDefinition (k8s.cni.cncf.io/v1, Multus' kind, namespaced): a secondary
network a VMI's `multus` network names (`networkName: [namespace/]name`, the VMI's own
namespace by default). `spec.config` is a CNI configuration as a JSON string; admission
checks it is one, as Multus' webhook does. A VMI whose multus network names a definition
that does not exist is refused with KubeVirt's words for it (virt-controller's, when it
renders the launcher pod: `failed to locate network attachment definition ns/name`)."""

from __future__ import annotations

import ipaddress
import json
from typing import Any

import msgspec

from core import admission
from events.objects import SpecObject
from kinds.resource import resource_spec
from projections.cluster import Cluster, key

KIND_TOKEN = "nad"
GROUP = "k8s.cni.cncf.io"


class NetworkAttachmentDefinition(SpecObject):
    api_version: str = msgspec.field(default="k8s.cni.cncf.io/v1")
    kind: str = msgspec.field(default="NetworkAttachmentDefinition")


def admit_nad(_: Cluster, typed: Any, __: str) -> tuple[Any, list[Any]]:
    causes = admission.validate_name(typed.metadata.name, typed.metadata.generate_name)
    config = typed.spec.get("config")
    if config is not None:
        try:
            parsed = json.loads(config) if isinstance(config, str) else None
        except ValueError:
            parsed = None
        if not isinstance(parsed, dict):
            msg = "spec.config: invalid CNI configuration: not a JSON object"
            causes.append(admission.cause("FieldValueInvalid", msg, "spec.config"))
    return typed, causes


def nad_key(namespace: str, network_name: str) -> tuple[str, str]:
    """(namespace, name) of a multus `networkName` (KubeVirt's NetAttachDefNamespacedName)."""
    if "/" in network_name:
        ns, name = network_name.split("/", 1)
        return ns, name
    return namespace, network_name


class BridgeIpam(msgspec.Struct, frozen=True, kw_only=True):
    """What a `bridge` definition with `host-local` IPAM gives a pod: an address of `subnet`
    within [first, last], never the gateway's (the bridge's own address)."""

    subnet: str
    gateway: str
    first: str
    last: str


def bridge_ipam(spec: Any) -> BridgeIpam | None:
    """The IPAM of a definition whose CNI configuration is the `bridge` plugin with
    `host-local` addresses (its `subnet`, or its first `ranges` entry, with `rangeStart`,
    `rangeEnd` and `gateway` as the plugin reads them); None for any other (no address)."""
    try:
        config = json.loads(spec.get("config") or "{}")
    except (ValueError, TypeError, AttributeError):
        return None
    plugins = config.get("plugins") if isinstance(config, dict) else None
    if isinstance(plugins, list) and plugins and isinstance(plugins[0], dict):
        config = plugins[0]  # a conflist: the first plugin is the interface's
    if not isinstance(config, dict) or config.get("type") != "bridge":
        return None
    ipam = config.get("ipam")
    if not isinstance(ipam, dict) or ipam.get("type") != "host-local":
        return None
    ranges = ipam.get("ranges")
    block = ipam
    if not ipam.get("subnet") and isinstance(ranges, list) and ranges and ranges[0]:
        block = ranges[0][0] if isinstance(ranges[0], list) else ranges[0]
    try:
        net = ipaddress.ip_network(str(block.get("subnet") or ""), strict=False)
        hosts = (net.network_address + 1, net.broadcast_address - 1)
        gateway = ipaddress.ip_address(str(block.get("gateway") or hosts[0]))
        first = ipaddress.ip_address(str(block.get("rangeStart") or hosts[0]))
        last = ipaddress.ip_address(str(block.get("rangeEnd") or hosts[1]))
    except (ValueError, AttributeError):
        return None
    if net.version != 4 or net.prefixlen > 30:
        return None
    return BridgeIpam(subnet=str(net), gateway=str(gateway), first=str(first), last=str(last))


def missing(cluster: Cluster, namespace: str, networks: list[Any]) -> list[str]:
    """The `ns/name` of each multus network's definition that does not exist."""
    table = cluster.resources[KIND_TOKEN]
    out = []
    for network in networks:
        multus = network.get("multus") if isinstance(network, dict) else None
        if not isinstance(multus, dict) or not multus.get("networkName"):
            continue
        ns, name = nad_key(namespace, str(multus["networkName"]))
        if key(ns, name) not in table:
            out.append(f"{ns}/{name}")
    return out


SPEC = resource_spec(
    group=GROUP,
    version="v1",
    kind="NetworkAttachmentDefinition",
    plural="network-attachment-definitions",
    singular="network-attachment-definition",
    short_names=("net-attach-def",),
    categories=(),
    event_kind=KIND_TOKEN,
    object_type=NetworkAttachmentDefinition,
    admit=admit_nad,
)
