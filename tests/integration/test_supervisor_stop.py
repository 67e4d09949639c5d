"""The supervisor's stop order with real processes: the bus (`stop_last`) gets its SIGTERM
only once every other service has exited, so the clients drain against a live server
instead of waiting on reconnects until they are killed."""

from __future__ import annotations

import sys
from pathlib import Path

from ops.supervisor import ServiceSpec, Supervisor
from tests.integration.polling import until

# A service that, on SIGTERM, writes what it saw (whether the client had stopped) and exits.
PROGRAM = """
import os, signal, sys, time
mine, other = sys.argv[1], sys.argv[2]
def stop(*_):
    time.sleep(float(sys.argv[3]))  # a drain that takes a while
    open(mine, "w").write("client gone" if os.path.exists(other) else "client running")
    sys.exit(0)
signal.signal(signal.SIGTERM, stop)
open(mine + ".ready", "w").close()
while True:
    time.sleep(0.05)
"""


def test_the_bus_stops_after_its_clients(tmp_path: Path) -> None:
    sup = Supervisor(tmp_path / "logs", say=lambda _: None)
    bus, client = tmp_path / "bus", tmp_path / "client"
    py = (sys.executable, "-c", PROGRAM)
    sup.add(ServiceSpec(name="bus", command=(*py, str(bus), str(client), "0"), stop_last=True))
    sup.add(ServiceSpec(name="client", command=(*py, str(client), str(bus), "0.5")))
    try:
        until(lambda: all(Path(f"{f}.ready").exists() for f in (bus, client)), 10, "services")
        sup.stop(timeout=10)
    finally:
        for s in sup.services:
            s.kill()
    assert client.read_text() == "client running"  # the bus was still up while it drained
    assert bus.read_text() == "client gone"
