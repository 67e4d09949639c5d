"""Debian's headless Chromium driven by Playwright (PyPI `playwright`, a dev dependency;
no browser download: `executable_path` is the system's chromium, which ops/install.sh
installs when missing), for the web console's browser tests and its benchmark."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

CHROMIUM = Path("/usr/bin/chromium")
ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
INSTALL = "bash ops/install.sh (installs Debian's chromium when missing)"


def missing() -> str | None:
    """Why no browser can be driven here, or None."""
    if not CHROMIUM.exists():
        return f"no {CHROMIUM}: {INSTALL}"
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "no playwright (the dev extras: pip install -e '.[dev]')"
    return None


@contextmanager
def chromium(viewport: tuple[int, int] = (1400, 900)) -> Iterator[Any]:
    """A headless browser context (Playwright's BrowserContext) on a fresh user-data dir;
    its pages are separate tabs, each with its own session storage (its own login). The
    api's certificate is signed by the cluster's own CA, so certificate errors are
    ignored."""
    from playwright.sync_api import sync_playwright

    profile = tempfile.mkdtemp(prefix="virtstream-chromium-")
    try:
        with sync_playwright() as p:
            context = p.chromium.launch_persistent_context(
                profile,
                executable_path=str(CHROMIUM),
                headless=True,
                args=ARGS,
                ignore_https_errors=True,
                viewport={"width": viewport[0], "height": viewport[1]},
            )
            try:
                yield context
            finally:
                context.close()
    finally:
        shutil.rmtree(profile, ignore_errors=True)
