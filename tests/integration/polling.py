"""Polling helper for tests that drive a `virtstream up` subprocess over HTTP."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import httpx

from client import credentials


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


def up_client(url: str | int, timeout: float = 5.0, wait: float = 60.0) -> httpx.Client:
    """An httpx client for the api a `virtstream up` serves at `url` (or on that loopback
    port), with the credentials `up` wrote, found as every project client finds them
    (client/credentials.py); waits for `up` to have written them."""
    server = f"http://127.0.0.1:{url}" if isinstance(url, int) else url
    return httpx.Client(**credentials.httpx_options(server, wait), timeout=timeout)


def status_of(http: httpx.Client, path: str) -> dict[str, Any]:
    """The status of the object at `path`; an error answer (the object not made yet) raises
    httpx.HTTPStatusError, which `until` counts as not yet."""
    status: dict[str, Any] = http.get(path).raise_for_status().json()["status"]
    return status
