"""List chunking: `limit` and `continue`, as the API server pages a list. Pure.

The continue token is opaque to clients (base64 of the resourceVersion the first page was
served at and the last key it held). Every page answers with that first resourceVersion.
A token whose resourceVersion is older than the watch history can vouch for is answered
410 Expired with the API server's words, so the client lists again from the start. Unlike
the API server's etcd snapshot, later pages are cut from the current projection: an object
changed between pages shows its newer state (never twice, never skipped if it existed
throughout, since pages follow the key order)."""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping
from typing import Any

import msgspec

from core.errors import ApiError, bad_request, gone

JSON = dict[str, Any]
EXPIRED = (
    "The provided continue parameter is too old to display a consistent list result. "
    "You can start a new list without the continue parameter, or use the continue token "
    "in this response to retrieve the remainder of the results. Continuing with the "
    "provided token results in an inconsistent list - objects that were created, modified, "
    "or deleted between the time the first chunk was returned and now may show up in the list."
)


class Token(msgspec.Struct, frozen=True):
    rv: int
    start: str  # the last key of the previous page: this page holds the keys after it


class Page(msgspec.Struct, frozen=True):
    items: list[JSON]
    resource_version: int
    continue_token: str = ""
    remaining: int | None = None


def encode(token: Token) -> str:
    return base64.urlsafe_b64encode(msgspec.json.encode(token)).decode().rstrip("=")


def decode(text: str) -> Token:
    try:
        raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
        return msgspec.json.decode(raw, type=Token)
    except (binascii.Error, ValueError, msgspec.DecodeError):
        raise bad_request(f"invalid continue token: {text!r}") from None


def limit_of(query: Mapping[str, str]) -> int:
    """`?limit=` (0: no limit; a negative or unparsable one is ignored, as the API server
    does)."""
    try:
        return max(0, int(query.get("limit") or 0))
    except ValueError:
        return 0


def start(query: Mapping[str, str], current_rv: int, floor: int) -> Token | None:
    """The page a request asks for: None for the first; 410 when the token expired."""
    text = query.get("continue") or ""
    if not text:
        return None
    token = decode(text)
    if token.rv < floor or token.rv > current_rv:
        raise expired()
    return token


def expired() -> ApiError:
    return gone(EXPIRED)


def page(keyed: list[tuple[str, JSON]], limit: int, token: Token | None, current_rv: int) -> Page:
    """One page of `keyed` ((key, object) in key order) after the token's key."""
    rv = token.rv if token is not None else current_rv
    if token is not None:
        keyed = [(k, o) for k, o in keyed if k > token.start]
    if not limit or len(keyed) <= limit:
        return Page([o for _, o in keyed], rv)
    chunk = keyed[:limit]
    return Page(
        [o for _, o in chunk],
        rv,
        encode(Token(rv, chunk[-1][0])),
        len(keyed) - limit,
    )


def list_metadata(p: Page) -> JSON:
    meta: JSON = {"resourceVersion": str(p.resource_version)}
    if p.continue_token:
        meta["continue"] = p.continue_token
        meta["remainingItemCount"] = p.remaining
    return meta
