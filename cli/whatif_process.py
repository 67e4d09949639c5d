"""`virtstream whatif -o json` (no change) run as a process of its own, summed up: for a
caller that must not fork (the demo runs in a thread of `up`) or reads another cluster's
log (the chaos suite)."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any


def summary(nats_url: str, timeout: float = 300.0) -> dict[str, Any]:
    """The what-if's events, the decisions it found recorded and reproduced, how many
    differ and the first three; `{"error": ...}` when it gave no report."""
    cmd = [sys.executable, "-m", "cli.main", "whatif", "-o", "json", "--nats-url", nats_url]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)
        report = json.loads(done.stdout)
    except subprocess.TimeoutExpired:
        return {"error": f"no report within {timeout:g} s"}
    except ValueError:
        said = done.stderr.strip().splitlines()
        return {"error": said[-1] if said else f"exit {done.returncode}, no report"}
    s = report["summary"]
    return {
        "events": report["events"],
        "recorded": s["live_decisions"],
        "reproduced": s["reproduced"],
        "differences": len(report["differences"]),
        "first": report["differences"][:3],
    }
