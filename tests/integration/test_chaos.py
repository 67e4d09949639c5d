"""The chaos suite (bench/chaos): hosts are network namespaces, faults one at a time over a
100-VM workload (kill -9 of the api, the active controller, a handler, a launcher, the
NATS meta leader, a handler host's link cut past the node timeout, and `virtstream up`
itself); after each, no acknowledged create is lost, no VM ran twice and `virtstream
verify` passes; every VM is Running again and the final state is the fault-free one; and a
what-if over the whole log finds every decision as it was recorded. Needs root and iproute2
(about two minutes)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or not shutil.which("ip"),
    reason="network namespaces need root and iproute2",
)


@pytest.mark.timeout(900)
def test_no_fault_loses_or_doubles_a_vm() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "bench.chaos", "--json"], cwd=REPO, capture_output=True,
        timeout=880,
    )  # fmt: skip
    out = done.stdout.decode().splitlines()
    assert out, done.stderr.decode()[-2000:]
    result = json.loads(out[-1])
    assert [row["fault"].split(" (")[0] for row in result["faults"]][-1] == "kill -9 up"
    for row in result["faults"]:
        assert "error" not in row, row
        assert row["lost"] == [] and row["duplicated"] == [], row
        # pytest shortens a dict: name what verify said and what kept the row unsettled
        assert row["verify"], f"{row['fault']}: verify said {row.get('verify_said')!r}"
        assert row["recovered_s"] is not None, f"{row['fault']}: {row.get('unsettled')}"
    assert result["final"]["equal_to_fault_free"], result["final"]
    # the log the faults left replays through today's deciders as it was decided
    whatif = result["final"]["whatif"]
    assert "error" not in whatif and whatif["events"] > 0, whatif
    assert whatif["differences"] == 0, whatif["first"]
    assert done.returncode == 0, done.stderr.decode()[-2000:]  # a failed row fails the run
