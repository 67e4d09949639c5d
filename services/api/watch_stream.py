"""A watch's response stream, as the API server writes it: one JSON event per line;
`timeoutSeconds` ends it; `allowWatchBookmarks=true` adds BOOKMARK events (the
resourceVersion the client may resume from) when the watch has been quiet for a while and
just before it times out; a Table `Accept` turns each object into a one-row Table (what
`kubectl get -w` prints); a resourceVersion older than the history is one ERROR event with
a 410 Expired Status."""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass
from typing import Any

import msgspec

from core.errors import bad_request, gone, invalid_request
from kinds.spec import KindSpec
from readside.watch import Watcher
from services.api import table

JSON = dict[str, Any]
WATCH_MAX_SECONDS = 3600.0  # the API server's longest default watch (2 x minRequestTimeout)
BOOKMARK_SECONDS = 60.0  # the watch cache's bookmark period
BOOKMARK_LEAD = 1.0  # a bookmark this long before the timeout, so the client can resume
CHUNK_EVENTS = 64  # at most this many queued events share one write
_json = msgspec.json.Encoder()


@dataclass(frozen=True)
class WatchOptions:
    resource_version: int | None
    timeout_seconds: float | None
    bookmarks: bool
    as_table: bool
    send_initial_events: bool = False

    @classmethod
    def parse(cls, query: Mapping[str, str], accept: str) -> WatchOptions:
        rv_text = query.get("resourceVersion") or ""
        try:
            rv = int(rv_text) if rv_text else None
            timeout_seconds = float(query.get("timeoutSeconds") or 0) or None
        except ValueError:
            raise bad_request(f"invalid resourceVersion or timeoutSeconds: {rv_text!r}") from None
        if timeout_seconds is not None:
            if not math.isfinite(timeout_seconds) or timeout_seconds < 0:
                raise bad_request(f"invalid timeoutSeconds: {query.get('timeoutSeconds')!r}")
            timeout_seconds = min(timeout_seconds, WATCH_MAX_SECONDS)
        bookmarks = _flag(query, "allowWatchBookmarks")
        initial = _flag(query, "sendInitialEvents")
        if initial and not bookmarks:
            raise invalid_request(
                "allowWatchBookmarks: Required value: sendInitialEvents requires "
                "setting allowWatchBookmarks to true"
            )
        if initial:  # a watch-list: the current objects, then the end-of-initial bookmark
            rv = None
        return cls(rv, timeout_seconds, bookmarks, table.wants_table(accept), initial)


def _flag(query: Mapping[str, str], name: str) -> bool:
    return (query.get(name) or "").lower() in ("true", "1")


def expired(message: str) -> AsyncIterator[bytes]:
    """Kubernetes answers an expired watch with 200 and an ERROR event holding a 410."""
    status = msgspec.to_builtins(gone(message).status)

    async def one() -> AsyncIterator[bytes]:
        yield _json.encode({"type": "ERROR", "object": status}) + b"\n"

    return one()


def _as_table(spec: KindSpec, event: JSON) -> JSON:
    obj = event["object"]
    rv = str((obj.get("metadata") or {}).get("resourceVersion", ""))
    return {
        "type": event["type"],
        "object": table.table(table.columns(spec), [obj], rv, time.time()),
    }


INITIAL_EVENTS_END = "k8s.io/initial-events-end"


def bookmark(spec: KindSpec, rv: int, *, initial_end: bool = False) -> JSON:
    """A BOOKMARK; the one that ends a watch-list's initial events is annotated so
    (client-go's reflector waits for it before it reports the list synced)."""
    meta: JSON = {"resourceVersion": str(rv)}
    if initial_end:
        meta["annotations"] = {INITIAL_EVENTS_END: "true"}
    return {
        "type": "BOOKMARK",
        "object": {"kind": spec.kind, "apiVersion": spec.api_version, "metadata": meta},
    }


def stream(
    spec: KindSpec,
    watcher: Watcher,
    opts: WatchOptions,
    last_seq: Callable[[], int],
    done: Callable[[Watcher], None],
) -> AsyncIterator[bytes]:
    """The lines of one watch; `last_seq` is the projection's folded sequence (a bookmark
    is sent only when the watcher's queue is empty, so everything up to it was sent)."""

    async def lines() -> AsyncIterator[bytes]:
        now = time.monotonic()
        deadline = now + opts.timeout_seconds if opts.timeout_seconds else None
        next_mark = _next_mark(now, deadline) if opts.bookmarks else None
        try:
            while True:
                now = time.monotonic()
                if deadline is not None and now >= deadline:
                    return
                if watcher.queue.empty():
                    due = [t for t in (deadline, next_mark) if t is not None]
                    wait = max(0.0, min(due) - now) if due else None
                    try:
                        async with asyncio.timeout(wait):
                            item = await watcher.queue.get()
                    except TimeoutError:
                        if next_mark is not None and time.monotonic() >= next_mark:
                            if watcher.queue.empty():
                                yield _json.encode(bookmark(spec, last_seq())) + b"\n"
                            next_mark = _next_mark(time.monotonic(), deadline, after=next_mark)
                        continue
                else:
                    item = watcher.queue.get_nowait()
                # what is queued already goes out in the same write (a burst's events, a
                # watch's initial list): one send and one syscall for up to a chunk's lines
                lines: list[bytes] = []
                while item is not None:
                    lines.append(_json.encode(_as_table(spec, item) if opts.as_table else item))
                    if len(lines) >= CHUNK_EVENTS or watcher.queue.empty():
                        break
                    item = watcher.queue.get_nowait()
                if lines:
                    yield b"\n".join(lines) + b"\n"
                if item is None:
                    return
        finally:
            done(watcher)

    return lines()


def _next_mark(now: float, deadline: float | None, after: float | None = None) -> float | None:
    """The next bookmark: a period from now, or just before the timeout, whichever comes
    first; none once the one before the timeout was sent."""
    mark = now + BOOKMARK_SECONDS
    if deadline is not None:
        lead = deadline - BOOKMARK_LEAD
        if after is not None and after >= lead:
            return None
        mark = min(mark, max(lead, now))
    return mark
