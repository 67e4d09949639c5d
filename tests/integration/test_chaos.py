"""The chaos suite's short run (bench/chaos): hosts are network namespaces, faults one at a
time over a VM workload; after each, no acknowledged create is lost, no VM ran twice and
`virtstream verify` passes; every VM is Running again and the final state is the
fault-free one. Needs root; opt in with VIRTSTREAM_CHAOS=1 (about three minutes)."""

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
    os.geteuid() != 0 or not shutil.which("ip") or not os.environ.get("VIRTSTREAM_CHAOS"),
    reason="root, iproute2 and VIRTSTREAM_CHAOS=1 are needed",
)


@pytest.mark.timeout(900)
def test_no_fault_loses_or_doubles_a_vm() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "bench.chaos", "--json"], cwd=REPO, capture_output=True,
        timeout=880,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    result = json.loads(done.stdout.decode().splitlines()[-1])
    for row in result["faults"]:
        assert "error" not in row, row
        assert row["lost"] == [] and row["duplicated"] == [], row
        assert row["verify"], row
        assert row["recovered_s"] is not None, row
    assert result["final"]["equal_to_fault_free"], result["final"]
