"""Debian's headless Chromium driven by Playwright (PyPI `playwright`, no browser download:
`executable_path` is the system's chromium), for the web console's tests and benchmark.

Each run gets a fresh user-data dir; screenshots go to `test-artifacts/ui/` (kept by CI,
ignored by git), and `assert_not_blank` checks one shows a page rather than nothing."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from PIL import Image, ImageStat

REPO = Path(__file__).resolve().parents[2]
CHROMIUM = Path("/usr/bin/chromium")
ARTIFACTS = REPO / "test-artifacts" / "ui"
ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
INSTALL = "bash ops/install.sh (installs Debian's chromium when missing)"


def skip_reason() -> str | None:
    if not CHROMIUM.exists():
        return f"the web console's browser tests need {CHROMIUM}: {INSTALL}"
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "the web console's browser tests need playwright (the dev extras)"
    return None


@contextmanager
def chromium(viewport: tuple[int, int] = (1400, 900)) -> Iterator[Any]:
    """A browser context (Playwright's BrowserContext) on a fresh profile; its pages are
    separate tabs, each with its own session storage (so its own login)."""
    from playwright.sync_api import sync_playwright

    profile = tempfile.mkdtemp(prefix="virtstream-chromium-")
    try:
        with sync_playwright() as p:
            context = p.chromium.launch_persistent_context(
                profile,
                executable_path=str(CHROMIUM),
                headless=True,
                args=ARGS,
                ignore_https_errors=True,  # the cluster's own CA signs the api's certificate
                viewport={"width": viewport[0], "height": viewport[1]},
            )
            try:
                yield context
            finally:
                context.close()
    finally:
        shutil.rmtree(profile, ignore_errors=True)


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
