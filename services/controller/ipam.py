"""IP address management of the pod network (pure): a VMI's address is allocated when its
pod is scheduled and recorded in that PodScheduled, so the log is the only table of who
holds what; an address is free again once the VMI holding it has ended or is gone."""

from __future__ import annotations

import ipaddress
from collections.abc import Container


class Taken:
    """Addresses held in any of several sets, asked without copying them (a cluster's
    held addresses grow with it; a placement asks for a few)."""

    def __init__(self, *held: Container[str]) -> None:
        self.held = held

    def __contains__(self, address: object) -> bool:
        return any(address in h for h in self.held)


def allocate(cidr: str, taken: Container[str]) -> str:
    """The lowest host address of `cidr` that is neither the gateway (the first) nor taken;
    "" when the node has no pod network or the subnet is full."""
    if not cidr:
        return ""
    hosts = ipaddress.ip_network(cidr, strict=False).hosts()
    next(hosts, None)  # the bridge's own address: the guests' gateway and DHCP server
    for host in hosts:
        if (address := str(host)) not in taken:
            return address
    return ""


def allocate_in(first: str, last: str, reserved: str, taken: Container[str]) -> str:
    """The lowest address from `first` to `last` that is neither `reserved` (a gateway)
    nor taken; "" when none is free (a secondary network's host-local range)."""
    start, end = int(ipaddress.ip_address(first)), int(ipaddress.ip_address(last))
    for n in range(start, end + 1):
        if (address := str(ipaddress.ip_address(n))) not in taken and address != reserved:
            return address
    return ""
