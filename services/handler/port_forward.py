"""The VMI's `portforward` subresource on its node: one TCP connection to a port of the guest.

The guest's network is QEMU's user-mode one (`domain_xml._add_interfaces`), which nothing
outside QEMU can reach. For each connection the server asks QEMU (its monitor, through the
node's libvirtd) for a host forward on loopback to the guest's port, with port 0 so the
kernel picks a free one; QEMU's `info usernet` tells which. The server connects to it and
removes the forward at once: the connection stays, and the listener lived only as long as
the connect took."""

from __future__ import annotations

import re
import threading
import xml.etree.ElementTree as ET
from dataclasses import dataclass

import libvirt

#: `info usernet`: `TCP[HOST_FORWARD]  9  127.0.0.1 39615  10.0.2.15  22  0  0`
_FORWARD = re.compile(r"TCP\[HOST_FORWARD\]\s+\d+\s+(\S+)\s+(\d+)\s+(\S+)\s+(\d+)")
_LOCK = threading.Lock()  # one forward added at a time: the new one is the one not seen before


class NoNetwork(Exception):
    """The domain has no user-mode interface to forward through."""


@dataclass(frozen=True)
class Forward:
    netdev: str
    host_port: int


def forwards(info_usernet: str) -> set[tuple[int, int]]:
    """The TCP host forwards `info usernet` lists, as (host port, guest port) (pure)."""
    return {(int(m[2]), int(m[4])) for m in _FORWARD.finditer(info_usernet)}


def netdev_of(domain_xml: str) -> str | None:
    """QEMU's id of the first user-mode interface's netdev (libvirt: `host` + its alias)."""
    for el in ET.fromstring(domain_xml).iterfind("./devices/interface"):
        alias = el.find("alias")
        if el.get("type") == "user" and alias is not None and alias.get("name"):
            return f"host{alias.get('name')}"
    return None


def _hmp(dom: libvirt.virDomain, command: str) -> str:
    import libvirt_qemu

    flags = libvirt_qemu.VIR_DOMAIN_QEMU_MONITOR_COMMAND_HMP
    return str(libvirt_qemu.qemuMonitorCommand(dom, command, flags))


def open_forward(uri: str, domain: str, guest_port: int) -> Forward:
    """A host forward on loopback to `guest_port` of the running `domain`."""
    conn = libvirt.open(uri)
    try:
        dom = conn.lookupByName(domain)
        netdev = netdev_of(str(dom.XMLDesc(0)))
        if netdev is None:
            raise NoNetwork(f"the domain {domain} has no interface")
        with _LOCK:
            before = forwards(_hmp(dom, "info usernet"))
            answer = _hmp(dom, f"hostfwd_add {netdev} tcp:127.0.0.1:0-:{guest_port}")
            if answer.strip():  # HMP answers nothing when it worked
                raise NoNetwork(answer.strip())
            new = [h for h, g in forwards(_hmp(dom, "info usernet")) - before if g == guest_port]
        if not new:
            raise NoNetwork(f"QEMU listed no forward to port {guest_port}")
        return Forward(netdev, new[0])
    finally:
        conn.close()


def close_forward(uri: str, domain: str, forward: Forward) -> None:
    """Remove the host forward (connections made through it stay)."""
    conn = libvirt.open(uri)
    try:
        dom = conn.lookupByName(domain)
        _hmp(dom, f"hostfwd_remove {forward.netdev} tcp:127.0.0.1:{forward.host_port}")
    except libvirt.libvirtError:
        pass  # the domain is gone, and its forwards with it
    finally:
        conn.close()
