"""Ports handed to services to listen on: outside the kernel's range for outgoing
connections (where any client's connection could take them first), never the same twice."""

from __future__ import annotations

import socket

import pytest

from ops import ports
from ops.ports import ephemeral_range, free_port, in_use


def test_free_ports_lie_below_the_ephemeral_range_and_are_distinct() -> None:
    lo, _ = ephemeral_range()
    ports = [free_port() for _ in range(300)]
    assert len(set(ports)) == len(ports)
    assert all(p < lo for p in ports)
    assert not any(in_use(p) for p in ports[:20])


def test_a_port_held_by_a_connection_is_never_handed_out(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    lo, _ = ephemeral_range()
    with socket.socket() as server, socket.socket() as client:
        server.bind(("127.0.0.1", 0))
        server.listen()
        client.bind(("127.0.0.1", free_port()))  # as if an outgoing connection took it
        client.connect(server.getsockname())
        held = client.getsockname()[1]
        assert held < lo and in_use(held, reuse=False)
        spare = free_port()
        picks = iter([held, spare])
        monkeypatch.setattr(ports.random, "randrange", lambda *_: next(picks))
        monkeypatch.setattr(ports, "_handed_out", set())  # only whether it is in use counts
        assert free_port() == spare
