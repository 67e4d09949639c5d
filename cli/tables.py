"""kubectl-style tables for `virtstream get`: each kind's columns come from its registry
entry (`kinds.spec.KindSpec.columns`)."""

from __future__ import annotations

from typing import Any

from kinds.columns import age
from kinds.registry import REGISTRY, Registry

JSON = dict[str, Any]
__all__ = ["age", "has_table", "header_and_rows", "render"]


def has_table(kind: str, kinds: Registry = REGISTRY) -> bool:
    spec = kinds.get(kind)
    return spec is not None and bool(spec.columns)


def header_and_rows(
    kind: str,
    objs: list[JSON],
    *,
    namespace_column: bool = False,
    wide: bool = False,
    kinds: Registry = REGISTRY,
) -> list[list[str]]:
    columns = [c for c in kinds.resource(kind).columns if wide or not c.wide]
    lines = [(["NAMESPACE"] if namespace_column else []) + [c.header for c in columns]]
    for o in objs:
        cells = [c.cell(o) for c in columns]
        if namespace_column:
            cells = [str(o["metadata"].get("namespace", "")), *cells]
        lines.append(cells)
    return lines


def render(lines: list[list[str]]) -> str:
    widths = [max(len(line[i]) for line in lines) for i in range(len(lines[0]))]
    return "\n".join(
        "   ".join(cell.ljust(w) for cell, w in zip(line, widths, strict=True)).rstrip()
        for line in lines
    )
