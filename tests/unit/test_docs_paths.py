"""The architecture reference names files and folders a newcomer will open: each must
exist, so the page cannot drift from the tree unnoticed."""

from __future__ import annotations

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
