"""The guest's NICs as the VMI's interfaces (pure): the live domain XML names each NIC's
MAC by its alias (`ua-<interface name>`, as KubeVirt's domains have it), the guest agent
names the addresses it holds by MAC."""

from __future__ import annotations

import xml.etree.ElementTree as ET

from services.launcher.protocol import GuestInterface

ALIAS_PREFIX = "ua-"


def guest_interfaces(
    live_xml: str, addresses: dict[str, tuple[str, tuple[str, ...]]]
) -> tuple[GuestInterface, ...]:
    """The VMI's interfaces in the domain's order, each with what the agent says of the NIC
    with its MAC (the guest's name for it and its addresses; none when the agent does not
    know it)."""
    out = []
    for el in ET.fromstring(live_xml).iterfind("./devices/interface"):
        alias, mac = el.find("alias"), el.find("mac")
        if alias is None or mac is None or not alias.get("name", "").startswith(ALIAS_PREFIX):
            continue
        address = mac.get("address", "").lower()
        guest_name, ips = addresses.get(address, ("", ()))
        name = alias.get("name", "").removeprefix(ALIAS_PREFIX)
        out.append(GuestInterface(name=name, mac=address, interface_name=guest_name,
                                  ip_addresses=ips))  # fmt: skip
    return tuple(out)


def taps(live_xml: str) -> dict[str, tuple[str, str]]:
    """The tap NICs of a live domain (the pod network's, a secondary network's) by the
    VMI's interface name: each one's tap on the host (libvirt's `vnetN`) and its MAC; none
    before libvirt named them."""
    out = {}
    for el in ET.fromstring(live_xml).iterfind("./devices/interface"):
        target, mac, alias = el.find("target"), el.find("mac"), el.find("alias")
        if el.get("type") != "ethernet" or target is None or mac is None or alias is None:
            continue
        name = alias.get("name", "").removeprefix(ALIAS_PREFIX)
        out[name] = (target.get("dev", ""), mac.get("address", "").lower())
    return out
