"""kubectl-style tables for `virtstream get`."""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Callable
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


def _status(obj: JSON) -> JSON:
    return obj.get("status") or {}


def _ready(obj: JSON) -> str:
    for c in _status(obj).get("conditions") or []:
        if c.get("type") == "Ready":
            return str(c.get("status", "False"))
    return "False"


def _vmi_ip(obj: JSON) -> str:
    for iface in _status(obj).get("interfaces") or []:
        if iface.get("ipAddress"):
            return str(iface["ipAddress"])
    return ""


Row = Callable[[JSON], list[str]]
COLUMNS: dict[str, tuple[list[str], Row]] = {
    "VirtualMachine": (
        ["NAME", "AGE", "STATUS", "READY"],
        lambda o: [
            o["metadata"]["name"],
            age(o),
            str(_status(o).get("printableStatus", "")),
            str(bool(_status(o).get("ready"))),
        ],
    ),
    "VirtualMachineInstance": (
        ["NAME", "AGE", "PHASE", "IP", "NODENAME", "READY"],
        lambda o: [
            o["metadata"]["name"],
            age(o),
            str(_status(o).get("phase", "")),
            _vmi_ip(o),
            str(_status(o).get("nodeName", "")),
            _ready(o),
        ],
    ),
    "VirtualMachineInstanceMigration": (
        ["NAME", "PHASE", "VMI"],
        lambda o: [
            o["metadata"]["name"],
            str(_status(o).get("phase", "")),
            str((o.get("spec") or {}).get("vmiName", "")),
        ],
    ),
    "Node": (
        ["NAME", "STATUS", "VMIS", "CPU", "MEMORY", "AGE"],
        lambda o: [
            o["metadata"]["name"],
            ("Ready" if _ready(o) == "True" else "NotReady")
            + ("" if _status(o).get("schedulable", True) else ",SchedulingDisabled"),
            str((_status(o).get("allocated") or {}).get("vmis", 0)),
            f"{(_status(o).get('allocated') or {}).get('cpu', '0')}/"
            f"{(_status(o).get('capacity') or {}).get('cpu', '0')}",
            f"{(_status(o).get('allocated') or {}).get('memory', '0')}/"
            f"{(_status(o).get('capacity') or {}).get('memory', '0')}",
            age(o),
        ],
    ),
    "MigrationPolicy": (["NAME", "AGE"], lambda o: [o["metadata"]["name"], age(o)]),
}


def header_and_rows(
    kind: str, objs: list[JSON], *, namespace_column: bool = False, wide: bool = False
) -> list[list[str]]:
    head, row = COLUMNS[kind]
    lines = [(["NAMESPACE"] if namespace_column else []) + head]
    for o in objs:
        cells = row(o)
        if namespace_column:
            cells = [str(o["metadata"].get("namespace", "")), *cells]
        lines.append(cells)
    if wide and kind == "VirtualMachine":
        lines[0].append("RUNSTRATEGY")
        for line, o in zip(lines[1:], objs, strict=True):
            line.append(str(_status(o).get("runStrategy", "")))
    return lines


def render(lines: list[list[str]]) -> str:
    widths = [max(len(line[i]) for line in lines) for i in range(len(lines[0]))]
    return "\n".join(
        "   ".join(cell.ljust(w) for cell, w in zip(line, widths, strict=True)).rstrip()
        for line in lines
    )
