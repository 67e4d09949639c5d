"""The supervisor's stop order with real processes: the bus (`stop_last`) gets its SIGTERM
only once every other service has exited, so the clients drain against a live server
instead of waiting on reconnects until they are killed; when the supervisor is killed, the
bus outlives it (no parent-death signal) until `stop_recorded` stops it after them."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import msgspec

from host.procs import pid_alive
from ops.supervisor import Recorded, ServiceSpec, Supervisor, stop_recorded
from tests.integration.polling import until

REPO = Path(__file__).resolve().parents[2]

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


# A supervisor with a state file, as `up` runs it, until it is killed.
SUPERVISOR = """
import sys, time
from pathlib import Path
from ops.supervisor import ServiceSpec, Supervisor
tmp, program = Path(sys.argv[1]), sys.argv[2]
py = (sys.executable, "-c", program)
bus, client = tmp / "bus", tmp / "client"
sup = Supervisor(tmp / "logs", say=lambda _: None, state_file=tmp / "up.json")
sup.add(ServiceSpec(name="bus", command=(*py, str(bus), str(client), "0"), stop_last=True))
sup.add(ServiceSpec(name="client", command=(*py, str(client), str(bus), "0.5")))
while True:
    time.sleep(1)
"""


def test_a_killed_supervisors_bus_outlives_it_and_is_stopped_after_its_clients(
    tmp_path: Path,
) -> None:
    bus, client = tmp_path / "bus", tmp_path / "client"
    sup = subprocess.Popen([sys.executable, "-c", SUPERVISOR, str(tmp_path), PROGRAM], cwd=REPO)
    try:
        until(lambda: all(Path(f"{f}.ready").exists() for f in (bus, client)), 20, "services")
        state = tmp_path / "up.json"
        until(lambda: len(msgspec.json.decode(state.read_bytes())) == 2, 5, "both recorded")
        recorded = msgspec.json.decode(state.read_bytes(), type=dict[str, Recorded])
        assert recorded["bus"].last and not recorded["client"].last
    finally:
        sup.kill()  # SIGKILL: the client gets its parent-death SIGTERM, the bus does not
        sup.wait()
    until(lambda: not pid_alive(recorded["client"].pid), 10, "the client gone with it")
    assert client.read_text() == "client running"  # it drained against a live bus
    assert pid_alive(recorded["bus"].pid) and not bus.exists()
    assert stop_recorded(tmp_path / "up.json") == ["bus"]
    assert bus.read_text() == "client gone"
    assert not pid_alive(recorded["bus"].pid)
