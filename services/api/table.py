"""`Accept: application/json;as=Table;v=v1;g=meta.k8s.io`: objects as a meta.k8s.io/v1
Table with the kind's printer columns, as the API server's CRD table convertor builds it
(a Name column, then KubeVirt's additionalPrinterColumns; Name and Age when a kind has
none), so `kubectl get` prints KubeVirt's columns. Pure."""

from __future__ import annotations

import datetime as dt
from typing import Any

from kinds.columns import PrinterColumn, lookup
from kinds.spec import KindSpec

JSON = dict[str, Any]
NAME_DESCRIPTION = (
    "Name must be unique within a namespace. Is required when creating resources, "
    "although some resources may allow a client to request the generation of an "
    "appropriate name automatically."
)


def wants_table(accept: str) -> bool:
    """The first acceptable media type is a meta.k8s.io Table."""
    for part in accept.split(","):
        fields = [p.strip() for p in part.split(";")]
        params = dict(p.partition("=")[::2] for p in fields[1:])
        if params.get("as") == "Table" and params.get("g") == "meta.k8s.io":
            return True
        if fields[0] in ("application/json", "*/*"):
            return False
    return False


def human_duration(seconds: float) -> str:
    """apimachinery's `duration.HumanDuration`, which the API server's table convertor
    prints a date column with (`12s`, `5m3s`, `3h`, `2d4h`)."""
    s = int(seconds)
    if seconds < -1:
        return "<invalid>"
    if s < 0:
        return "0s"
    if s < 120:
        return f"{s}s"
    m = s // 60
    if m < 10:
        return f"{m}m{s % 60}s" if s % 60 else f"{m}m"
    if m < 180:
        return f"{m}m"
    h = s // 3600
    if h < 8:
        return f"{h}h{m % 60}m" if m % 60 else f"{h}h"
    if h < 48:
        return f"{h}h"
    d = h // 24
    if h < 24 * 8:
        return f"{d}d{h % 24}h" if h % 24 else f"{d}d"
    if d < 365 * 2:
        return f"{d}d"
    y = d // 365
    if d < 365 * 8:
        return f"{y}y{d % 365}d" if d % 365 else f"{y}y"
    return f"{y}y"


def _age(value: Any, now: float | None) -> Any:
    if now is None or not isinstance(value, str):
        return value
    try:
        then = dt.datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return value
    return human_duration(now - then)


def _cell(column: PrinterColumn, obj: JSON, now: float | None = None) -> Any:
    value = lookup(obj, column.json_path)
    if value is None or column.type == "date":
        return _age(value, now)  # without a clock: the timestamp itself
    if column.type == "string":
        return value if isinstance(value, str) else str(value).lower()
    return value


NAMESPACE_COLUMNS = (
    PrinterColumn("Status", "string", ".status.phase"),
    PrinterColumn("Age", "date", ".metadata.creationTimestamp"),
)


def columns(spec: KindSpec) -> tuple[PrinterColumn, ...]:
    return spec.shown_printer_columns


def table(
    cols: tuple[PrinterColumn, ...],
    items: list[JSON],
    resource_version: str = "",
    now: float | None = None,
) -> JSON:
    """`now`: the clock date columns are aged against."""
    definitions = [
        {
            "name": "Name",
            "type": "string",
            "format": "name",
            "description": NAME_DESCRIPTION,
            "priority": 0,
        },
        *(
            {
                "name": c.name,
                "type": c.type,
                "format": "",
                "description": c.description,
                "priority": c.priority,
            }
            for c in cols
        ),
    ]
    rows = [
        {
            "cells": [obj.get("metadata", {}).get("name"), *(_cell(c, obj, now) for c in cols)],
            "object": {
                "kind": "PartialObjectMetadata",
                "apiVersion": "meta.k8s.io/v1",
                "metadata": obj.get("metadata", {}),
            },
        }
        for obj in items
    ]
    return {
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": {"resourceVersion": resource_version},
        "columnDefinitions": definitions,
        "rows": rows,
    }
