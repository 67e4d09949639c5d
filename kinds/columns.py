"""Table columns: a kind's printer columns (KubeVirt's, for kubectl's Table output) and the
columns of `virtstream get`, derived from them and printed as kubectl prints them (an age
for a date, blank for a missing value, kubectl's node STATUS `Ready,SchedulingDisabled`).
Pure: a cell gets the clock as `now`."""

from __future__ import annotations

import datetime as dt
import functools
import re
from collections.abc import Callable
from typing import Any

import msgspec

JSON = dict[str, Any]


class PrinterColumn(msgspec.Struct, frozen=True):
    """A CRD's additionalPrinterColumn (KubeVirt's own, for kubectl's Table output)."""

    name: str
    type: str
    json_path: str
    priority: int = 0
    description: str = ""


class Column(msgspec.Struct, frozen=True):
    """A column of `virtstream get`'s table: `cell(object, now)`; `wide` ones only with
    `-o wide`; an `aging` one (an age) changes with the clock alone, so a watch prints no
    row for it."""

    header: str
    cell: Callable[[JSON, float], str]
    wide: bool = False
    aging: bool = False


# What the API server's table convertor shows for a kind without printer columns.
DEFAULT_PRINTER_COLUMNS = (PrinterColumn("Age", "date", ".metadata.creationTimestamp"),)

# `.a.b`, `[0]`, `[?(@.type=='Ready')]`: the simple JSONPath CRD printer columns use.
_STEP = re.compile(
    r"\.([A-Za-z0-9_-]+)|\[(\d+)\]|\[\?\(@\.([A-Za-z0-9_-]+)==['\"]([^'\"]*)['\"]\)\]"
)


def lookup(obj: Any, path: str) -> Any:
    """The first value `path` selects in `obj`, or None."""
    values = [obj]
    pos = 0
    while pos < len(path):
        m = _STEP.match(path, pos)
        if m is None:
            return None
        pos = m.end()
        field, index, key, want = m.groups()
        nxt: list[Any] = []
        for v in values:
            if field is not None and isinstance(v, dict) and field in v:
                nxt.append(v[field])
            elif index is not None and isinstance(v, list) and int(index) < len(v):
                nxt.append(v[int(index)])
            elif key is not None and isinstance(v, list):
                nxt.extend(i for i in v if isinstance(i, dict) and str(i.get(key)) == want)
        values = nxt
    return values[0] if values else None


def text(value: Any) -> str:
    """A cell as kubectl prints it: blank when absent, `true`/`false` for a boolean."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def since(timestamp: Any, now: float) -> str:
    """An RFC 3339 time as an age at `now` (`45s`, `12m`, `5h`, `3d`)."""
    if not isinstance(timestamp, str) or not timestamp:
        return "<unknown>"
    try:
        then = dt.datetime.fromisoformat(timestamp.replace("Z", "+00:00"))
    except ValueError:
        return timestamp
    if then.tzinfo is None:
        then = then.replace(tzinfo=dt.UTC)
    secs = max(0, int(now - then.timestamp()))
    if secs < 120:
        return f"{secs}s"
    if secs < 3600 * 3:
        return f"{secs // 60}m"
    if secs < 86400 * 2:
        return f"{secs // 3600}h"
    return f"{secs // 86400}d"


def age(obj: JSON, now: float) -> str:
    return since((obj.get("metadata") or {}).get("creationTimestamp"), now)


def name(obj: JSON, _now: float = 0.0) -> str:
    return str(obj["metadata"]["name"])


NAME = Column("NAME", name)
AGE = Column("AGE", age, aging=True)


def printed(column: PrinterColumn) -> Column:
    """A printer column as `virtstream get` shows it: kubectl's upper-case header, a date
    as an age, wide when it has a priority."""
    path, wide = column.json_path, column.priority > 0
    if column.type == "date":
        return Column(column.name.upper(), lambda o, now: since(lookup(o, path), now), wide, True)
    return Column(column.name.upper(), lambda o, _now: text(lookup(o, path)), wide)


@functools.cache
def table_of(printer_columns: tuple[PrinterColumn, ...]) -> tuple[Column, ...]:
    """`virtstream get`'s columns for these printer columns: NAME, then each of them
    (the API server's default, an age, for none)."""
    return (NAME, *map(printed, printer_columns or DEFAULT_PRINTER_COLUMNS))


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
    out = str(n)
    for i, suffix in enumerate(_BINARY, start=1):
        if n % (1 << (10 * i)):
            break
        out = f"{n >> (10 * i)}{suffix}"
    return out
