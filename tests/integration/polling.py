"""Polling helper for tests that drive a `virtstream up` subprocess over HTTP."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import httpx


def until(
    probe: Callable[[], Any], timeout: float = 30.0, what: str = "condition", every: float = 0.05
) -> Any:
    """The probe's first truthy value; HTTP errors and missing keys count as not yet."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            value = probe()
            if value:
                return value
        except (httpx.HTTPError, KeyError):
            pass
        time.sleep(every)
    raise AssertionError(f"timed out waiting for {what}")
