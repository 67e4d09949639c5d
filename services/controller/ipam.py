"""IP address management of the pod network (pure): a VMI's address is allocated when its
pod is scheduled and recorded in that PodScheduled, so the log is the only table of who
holds what; an address is free again once the VMI holding it has ended or is gone."""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable


def allocate(cidr: str, held: Iterable[str]) -> str:
    """The lowest host address of `cidr` that is neither the gateway (the first) nor held;
    "" when the node has no pod network or the subnet is full."""
    if not cidr:
        return ""
    taken = set(held)
    hosts = ipaddress.ip_network(cidr, strict=False).hosts()
    next(hosts, None)  # the bridge's own address: the guests' gateway and DHCP server
    for host in hosts:
        if (address := str(host)) not in taken:
            return address
    return ""


def allocate_in(first: str, last: str, reserved: str, held: Iterable[str]) -> str:
    """The lowest address from `first` to `last` that is neither `reserved` (a gateway)
    nor held; "" when none is free (a secondary network's host-local range)."""
    taken = {*held, reserved}
    start, end = int(ipaddress.ip_address(first)), int(ipaddress.ip_address(last))
    for n in range(start, end + 1):
        if (address := str(ipaddress.ip_address(n))) not in taken:
            return address
    return ""
