"""kubectl-style tables for `virtstream get`: each kind's columns come from its registry
entry (`kinds.spec.KindSpec.table_columns`, derived from its printer columns)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from kinds.columns import Column
from kinds.registry import REGISTRY, Registry

JSON = dict[str, Any]
__all__ = ["WatchPrinter", "has_table", "header_and_rows", "render"]


def has_table(kind: str, kinds: Registry = REGISTRY) -> bool:
    spec = kinds.get(kind)
    return spec is not None and bool(spec.table_columns)


def _columns(kind: str, wide: bool, kinds: Registry) -> list[Column]:
    return [c for c in kinds.resource(kind).table_columns if wide or not c.wide]


def header_and_rows(
    kind: str,
    objs: list[JSON],
    *,
    namespace_column: bool = False,
    wide: bool = False,
    kinds: Registry = REGISTRY,
    now: float | None = None,
) -> list[list[str]]:
    """The header and one row per object; ages at `now` (the clock when None)."""
    at = time.time() if now is None else now
    columns = _columns(kind, wide, kinds)
    lines = [(["NAMESPACE"] if namespace_column else []) + [c.header for c in columns]]
    for o in objs:
        cells = [c.cell(o, at) for c in columns]
        if namespace_column:
            cells = [str(o["metadata"].get("namespace", "")), *cells]
        lines.append(cells)
    return lines


def render(lines: list[list[str]]) -> str:
    widths = [max(len(line[i]) for line in lines) for i in range(len(lines[0]))]
    return "\n".join(_line(line, widths) for line in lines)


WATCH_MIN_WIDTH = 12


class WatchPrinter:
    """`get -w` rows as kubectl prints them: the list's table, then one row per change in
    the same columns (widened only when a cell no longer fits). A change that shows
    nothing new (only an age moved, or a deletion of what the last row showed) prints no
    row."""

    def __init__(
        self,
        kind: str,
        *,
        namespace_column: bool,
        wide: bool,
        out: Callable[[str], None],
        kinds: Registry = REGISTRY,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.kind, self.ns_col, self.wide, self.out, self.kinds, self.clock = (
            kind, namespace_column, wide, out, kinds, clock,
        )  # fmt: skip
        self.widths: list[int] = []
        self.shown: dict[str, list[str]] = {}
        header = header_and_rows(
            kind, [], namespace_column=namespace_column, wide=wide, kinds=kinds
        )
        self.header = header[0]
        first = 1 if namespace_column else 0
        self.ages = {first + i for i, c in enumerate(_columns(kind, wide, kinds)) if c.aging}

    def start(self, objs: list[JSON]) -> None:
        if objs:
            self._print([self._cells(o) for o in objs], header=True, objs=objs)

    def row(self, obj: JSON, *, deleted: bool = False) -> None:
        cells = self._cells(obj)
        key = _key(obj)
        if not self._same(self.shown.get(key), cells):
            self._print([cells], header=not self.widths, objs=[obj])
        if deleted:  # a later object of that name is news again
            self.shown.pop(key, None)

    def _cells(self, obj: JSON) -> list[str]:
        lines = header_and_rows(
            self.kind,
            [obj],
            namespace_column=self.ns_col,
            wide=self.wide,
            kinds=self.kinds,
            now=self.clock(),
        )
        return lines[1]

    def _same(self, before: list[str] | None, after: list[str]) -> bool:
        if before is None:
            return False
        skip = self.ages
        return [c for i, c in enumerate(before) if i not in skip] == [
            c for i, c in enumerate(after) if i not in skip
        ]

    def _print(self, rows: list[list[str]], *, header: bool, objs: list[JSON]) -> None:
        lines = [self.header, *rows] if header else rows
        widths = [max(len(line[i]) for line in lines) for i in range(len(self.header))]
        if not self.widths:
            # room for the values that come later (`Scheduling`, `Terminating`), so that
            # the columns rarely have to move
            self.widths = [4 if i in self.ages else WATCH_MIN_WIDTH for i in range(len(widths))]
        self.widths = [max(w, old) for w, old in zip(widths, self.widths, strict=True)]
        for line in lines:
            self.out(_line(line, self.widths))
        for obj, cells in zip(objs, rows, strict=True):
            self.shown[_key(obj)] = cells


def _key(obj: JSON) -> str:
    md = obj.get("metadata") or {}
    return f"{md.get('namespace', '')}/{md.get('name', '')}"


def _line(cells: list[str], widths: list[int]) -> str:
    return "   ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True)).rstrip()
