"""What a phase of a benchmark asked of nats-server: messages in and out per connection
(by user), and events stored, read from the server's monitoring port (`up
--nats-monitoring`: /connz, /jsz) before and after the phase."""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import httpx

_HTTP = re.compile(r'^http:\s*"([^"]+)"', re.MULTILINE)


def monitoring_url(data_dir: Path) -> str:
    """The embedded server's monitoring address, from the configuration `up` wrote."""
    conf = (data_dir / "nats" / "nats-server.conf").read_text()
    found = _HTTP.search(conf)
    if found is None:
        raise SystemExit("nats-server has no monitoring port: start `up` with --nats-monitoring")
    return f"http://{found.group(1)}"


@dataclass(frozen=True)
class Traffic:
    by_user: dict[str, tuple[int, int]]  # user → (messages in, messages out), summed
    stored: int  # messages the event stream holds


def snapshot(url: str, stream: str = "VIRT") -> Traffic:
    conns = httpx.get(f"{url}/connz", params={"auth": "true", "limit": 4096}, timeout=5).json()
    by_user: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for c in conns.get("connections", []):
        user = re.sub(r"-\d+$", "-N", c.get("authorized_user") or "(anonymous)")
        by_user[user][0] += c["in_msgs"]
        by_user[user][1] += c["out_msgs"]
    js = httpx.get(f"{url}/jsz", params={"streams": "true"}, timeout=5).json()
    stored = sum(
        s.get("state", {}).get("messages", 0)
        for account in js.get("account_details", [])
        for s in account.get("stream_detail", [])
        if s.get("name") == stream
    )
    return Traffic({u: (v[0], v[1]) for u, v in by_user.items()}, stored)


def per_vmi(before: Traffic, after: Traffic, n: int) -> dict[str, object]:
    """Messages per VMI into and out of nats-server, in all and by user, and events."""
    delta = {
        user: (i - before.by_user.get(user, (0, 0))[0], o - before.by_user.get(user, (0, 0))[1])
        for user, (i, o) in sorted(after.by_user.items())
    }
    return {
        "events": round((after.stored - before.stored) / n, 2),
        "in": round(sum(i for i, _ in delta.values()) / n, 1),  # summed before rounding
        "out": round(sum(o for _, o in delta.values()) / n, 1),
        "by_user": {u: (round(i / n, 1), round(o / n, 1)) for u, (i, o) in delta.items()},
    }


def line(t: dict[str, object]) -> str:
    by = t["by_user"]
    assert isinstance(by, dict)
    cells = ", ".join(f"{u} {i}/{o}" for u, (i, o) in by.items() if i or o)
    return (
        f"nats-server messages per VMI: in {t['in']}, out {t['out']} ({t['events']} events "
        f"stored); in/out by user: {cells}"
    )
