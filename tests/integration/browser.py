"""The web console's browser tests: Debian's headless Chromium (`ops/chromium.py`),
screenshots kept in `test-artifacts/ui/` (CI's artifacts, ignored by git), and
`assert_not_blank`, which checks one shows something drawn rather than nothing."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from PIL import Image, ImageStat

from ops.chromium import chromium, missing

REPO = Path(__file__).resolve().parents[2]
ARTIFACTS = REPO / "test-artifacts" / "ui"
__all__ = ["ARTIFACTS", "assert_not_blank", "chromium", "screenshot", "skip_reason"]


def skip_reason() -> str | None:
    why = missing()
    return f"the web console's browser tests need a browser: {why}" if why else None


def screenshot(page: Any, name: str) -> Path:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    path = ARTIFACTS / f"{name}.png"
    page.screenshot(path=str(path), full_page=False)
    assert_not_blank(path)
    return path


def assert_not_blank(path: Path, min_colours: int = 16) -> None:
    """Something was drawn: several colours (a page has many; a guest's text screen has
    a few), and more than one tone in quantity."""
    with Image.open(path) as img:
        rgb = img.convert("RGB")
        colours = rgb.getcolors(maxcolors=1 << 16)
        distinct = len(colours) if colours is not None else 1 << 16
        spread = ImageStat.Stat(rgb.convert("L")).stddev[0]
    assert distinct >= min_colours and spread >= 8.0, (
        f"{path} looks blank ({distinct} colours, sd {spread:.1f})"
    )
