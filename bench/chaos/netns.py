"""Hosts as network namespaces on one bridge, made (and removed) by the suite itself.

A `hub` namespace holds a bridge; each host is a namespace whose `eth0` is one end of a
veth pair, the other end on the bridge. Addresses are in 10.250.<n>.0/24 (n from the run),
so only addresses the suite created, and each namespace's loopback, are ever reached.
Cutting a host's link sets its bridge port down; restoring sets it up again."""

from __future__ import annotations

import contextlib
import ctypes
import os
import subprocess

_CLONE_NEWNET = 0x40000000


def ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True)


class Hosts:
    def __init__(self, names: list[str], run_id: int) -> None:
        self.prefix = f"vsc{run_id % 10000}-"
        self.subnet = f"10.250.{run_id % 250}"
        self.names = names
        self.hub = self.prefix + "hub"
        self.addresses = {name: f"{self.subnet}.{i + 1}" for i, name in enumerate(names)}
        self.ports = {name: f"p{i}" for i, name in enumerate(names)}

    def ns(self, host: str) -> str:
        return self.prefix + host

    def create(self) -> None:
        ip("netns", "add", self.hub)
        ip("-n", self.hub, "link", "set", "lo", "up")
        ip("-n", self.hub, "link", "add", "br0", "type", "bridge")
        ip("-n", self.hub, "link", "set", "br0", "up")
        for host in self.names:
            ns, port = self.ns(host), self.ports[host]
            ip("netns", "add", ns)
            ip("-n", ns, "link", "set", "lo", "up")
            ip("-n", self.hub, "link", "add", port, "type", "veth", "peer", "name", "eth0",
               "netns", ns)  # fmt: skip
            ip("-n", self.hub, "link", "set", port, "master", "br0", "up")
            ip("-n", ns, "addr", "add", f"{self.addresses[host]}/24", "dev", "eth0")
            ip("-n", ns, "link", "set", "eth0", "up")

    def destroy(self) -> None:
        for ns in [self.ns(h) for h in self.names] + [self.hub]:
            with contextlib.suppress(subprocess.CalledProcessError):
                ip("netns", "del", ns)

    def cut(self, host: str) -> None:
        ip("-n", self.hub, "link", "set", self.ports[host], "down")

    def restore(self, host: str) -> None:
        ip("-n", self.hub, "link", "set", self.ports[host], "up")

    def run_in(self, host: str, argv: list[str]) -> list[str]:
        """`argv` run inside the host (`ip netns exec` execs it: the pid is the command's)."""
        return ["ip", "netns", "exec", self.ns(host), *argv]

    def enter(self, host: str) -> None:
        """Move this process (while it has one thread) into the host's namespace."""
        libc = ctypes.CDLL(None, use_errno=True)
        fd = os.open(f"/run/netns/{self.ns(host)}", os.O_RDONLY)
        try:
            if libc.setns(fd, _CLONE_NEWNET) != 0:
                raise OSError(ctypes.get_errno(), "setns")
        finally:
            os.close(fd)
