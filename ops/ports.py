"""TCP ports on this machine: a free one for a service, and whether one is taken already
(checked before anything starts, so a taken port is one clear line, not a crash loop)."""

from __future__ import annotations

import random
import socket
from pathlib import Path

EPHEMERAL_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")
#: listening ports are picked from here up to the start of the ephemeral range
LISTEN_FLOOR = 20000

_handed_out: set[int] = set()


def ephemeral_range() -> tuple[int, int]:
    """The ports the kernel gives outgoing connections (Linux's default if unreadable)."""
    try:
        lo, hi = (int(p) for p in EPHEMERAL_RANGE.read_text().split())
    except (OSError, ValueError):
        return 32768, 60999
    return lo, hi


def reserve(*ports: int) -> None:
    """Ports this process will listen on that were chosen elsewhere (`up --port`): never
    handed out by `free_port`, which cannot see them taken before they are bound."""
    _handed_out.update(p for p in ports if p)


def free_port(host: str = "127.0.0.1") -> int:
    """A port nobody listens on or connects from now, for a service to listen on later.

    Picked below the ephemeral range: a port the kernel handed out (bind to 0) can be
    taken as the local port of any outgoing connection (a NATS client, a browser) before
    the service binds it, and a long-lived connection keeps it taken for good. Never the
    same port twice from one process, for the same reason."""
    lo, _ = ephemeral_range()
    if lo - LISTEN_FLOOR >= 1000:
        for _ in range(200):
            port = random.randrange(LISTEN_FLOOR, lo)
            if port in _handed_out or in_use(port, host, reuse=False):
                continue
            _handed_out.add(port)
            return port
    with socket.socket() as s:
        s.bind((host, 0))
        port = int(s.getsockname()[1])
    _handed_out.add(port)
    return port


def in_use(port: int, host: str = "127.0.0.1", *, reuse: bool = True) -> bool:
    """Whether a listener could not bind `host:port` now (with `reuse`, SO_REUSEADDR as
    servers set it, so a port in TIME_WAIT counts as free)."""
    with socket.socket() as s:
        if reuse:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return True
    return False


def taken(ports: dict[str, int], host: str = "127.0.0.1") -> list[str]:
    """`{"NATS (--nats-port)": 4222, ...}` → a phrase for each one already in use."""
    return [f"{what} port {port}" for what, port in ports.items() if port and in_use(port, host)]
