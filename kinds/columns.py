"""Cells the CLI's tables share (kubectl's formatting of ages and conditions)."""

from __future__ import annotations

import datetime as dt
import time
from typing import Any

JSON = dict[str, Any]


def age(obj: JSON, now: float | None = None) -> str:
    ts = (obj.get("metadata") or {}).get("creationTimestamp")
    if not ts:
        return "<unknown>"
    created = dt.datetime.strptime(ts, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=dt.UTC).timestamp()
    secs = max(0, int((now or time.time()) - created))
    if secs < 120:
        return f"{secs}s"
    if secs < 3600 * 3:
        return f"{secs // 60}m"
    if secs < 86400 * 2:
        return f"{secs // 3600}h"
    return f"{secs // 86400}d"


def name(obj: JSON) -> str:
    return str(obj["metadata"]["name"])


def status(obj: JSON) -> JSON:
    return obj.get("status") or {}


def condition(obj: JSON, ctype: str) -> str:
    for c in status(obj).get("conditions") or []:
        if c.get("type") == ctype:
            return str(c.get("status", "False"))
    return "False"


def ready(obj: JSON) -> str:
    return condition(obj, "Ready")


_BINARY = ("Ki", "Mi", "Gi", "Ti", "Pi", "Ei")


def binary_quantity(n: int) -> str:
    """Bytes in Kubernetes' canonical binary form: the largest suffix that keeps the number
    whole (`1664Mi`, `2Gi`, not `1703936Ki`)."""
    if n == 0:
        return "0"
    text = str(n)
    for i, suffix in enumerate(_BINARY, start=1):
        if n % (1 << (10 * i)):
            break
        text = f"{n >> (10 * i)}{suffix}"
    return text
