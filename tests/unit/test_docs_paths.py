"""The architecture reference names files and folders a newcomer will open, and symbols in
them (`path: Symbol` or `path: Class.method`): each must exist, so the page cannot drift
from the tree unnoticed."""

from __future__ import annotations

import ast
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
TOPS = {p.name for p in REPO.iterdir() if p.is_dir() and not p.name.startswith(".")}
# a path in backticks, optionally followed by ": symbol"; placeholders (<...>) are not paths
PATH = re.compile(r"`([A-Za-z_][\w./-]*)(?::[^`]*)?`")


def named_paths(text: str) -> set[str]:
    found = set()
    for m in PATH.finditer(text):
        path = m.group(1)
        top = path.split("/")[0]
        if "/" in path and top in TOPS:
            found.add(path)
    return found


def test_every_path_the_architecture_names_exists() -> None:
    paths = named_paths((REPO / "docs/ARCHITECTURE.md").read_text())
    assert len(paths) > 50  # the page is read, not skipped
    missing = sorted(p for p in paths if not (REPO / p).exists())
    assert not missing, f"docs/ARCHITECTURE.md names paths that do not exist: {missing}"


def test_the_reference_stays_short() -> None:
    lines = (REPO / "docs/ARCHITECTURE.md").read_text().splitlines()
    assert len(lines) <= 250, f"{len(lines)} lines: details belong in the area pages"


SYMBOL = re.compile(r"`([A-Za-z_][\w./-]*\.py): ([A-Za-z_][\w.]*)`")


def defines(path: Path, symbol: str) -> bool:
    """`path` defines `symbol` at its top level (`Class.attr`: an attribute of that class)."""
    tree = ast.parse(path.read_text())
    scope: list[ast.stmt] = tree.body
    for part in symbol.split("."):
        found: ast.stmt | None = None
        for node in scope:
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                if node.name == part:
                    found = node
            elif isinstance(node, ast.Assign | ast.AnnAssign):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                if any(isinstance(t, ast.Name) and t.id == part for t in targets):
                    found = node
        if found is None:
            return False
        scope = found.body if isinstance(found, ast.ClassDef) else []
    return True


def test_every_symbol_the_architecture_names_is_defined_where_it_says() -> None:
    text = (REPO / "docs/ARCHITECTURE.md").read_text()
    named = {(m.group(1), m.group(2)) for m in SYMBOL.finditer(text) if "/" in m.group(1)}
    assert len(named) >= 5
    wrong = sorted(f"{p}: {s}" for p, s in named if not defines(REPO / p, s))
    assert not wrong, f"docs/ARCHITECTURE.md names symbols its files do not define: {wrong}"
