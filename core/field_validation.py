"""Fields outside the schema, as the API server reports them: `?fieldValidation=` Warn (the
default: kept, and named in `Warning` headers), Strict (refused with 400) or Ignore. Shared by
the HTTP routes and the NATS endpoints, so both say the same. Pure."""

from __future__ import annotations

from typing import Any

from core.errors import bad_request
from core.kind import KindRules
from events.unknown_fields import unknown_fields

JSON = dict[str, Any]
MODES = ("Ignore", "Warn", "Strict")
MAX_WARNINGS = 20  # a body with thousands of unknown fields must not make a huge header


def checked_mode(mode: str) -> str:
    """`fieldValidation`'s value, or 400."""
    if mode not in MODES:
        raise bad_request(f'fieldValidation must be Ignore, Warn or Strict, not "{mode}"')
    return mode


def field_warnings(spec: KindRules, body: JSON, mode: str = "Warn") -> list[str]:
    checked_mode(mode)
    if mode == "Ignore" or body.get("kind") not in (None, spec.kind):
        return []  # another kind's body is refused by the intent, with its own message
    unknown = [f'unknown field "{path}"' for path in unknown_fields(body, spec.object_type)]
    if unknown and mode == "Strict":
        kind = str(body.get("kind") or spec.kind)
        version = str(body.get("apiVersion") or spec.api_version).rpartition("/")[2]
        raise bad_request(
            f'{kind} in version "{version}" cannot be handled as a {spec.kind}: '
            f"strict decoding error: {', '.join(unknown)}"
        )
    return unknown


def warning_header(warnings: list[str] | tuple[str, ...]) -> str:
    """RFC 7234 warnings as the API server sends them: `299 - "text"`, comma-separated. A
    header carries visible ASCII only: any other character of a field name (control
    characters, non-ASCII) is escaped as \\uXXXX, so no body can break the response."""
    shown = list(warnings[:MAX_WARNINGS])
    if len(warnings) > MAX_WARNINGS:
        shown.append(f"and {len(warnings) - MAX_WARNINGS} more unknown fields")
    quoted = (_header_text(w.replace("\\", "\\\\").replace('"', '\\"')) for w in shown)
    return ", ".join(f'299 - "{w}"' for w in quoted)


def _header_text(text: str, limit: int = 512) -> str:
    out = "".join(c if " " <= c <= "~" else f"\\u{ord(c):04x}" for c in text)
    return out if len(out) <= limit else out[: limit - 3] + "..."
