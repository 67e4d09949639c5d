"""TCP ports on this machine: a free one for a service, and whether one is taken already
(checked before anything starts, so a taken port is one clear line, not a crash loop)."""

from __future__ import annotations

import socket


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def in_use(port: int, host: str = "127.0.0.1") -> bool:
    """Whether a listener could not bind `host:port` now (SO_REUSEADDR as servers set it,
    so a port in TIME_WAIT counts as free)."""
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return True
    return False


def taken(ports: dict[str, int], host: str = "127.0.0.1") -> list[str]:
    """`{"NATS (--nats-port)": 4222, ...}` → a phrase for each one already in use."""
    return [f"{what} port {port}" for what, port in ports.items() if port and in_use(port, host)]
