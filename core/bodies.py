"""Request bodies: which media types the api reads, and the limits that keep one hostile
body from costing more than a bounded amount of work (Kubernetes' API server bounds them
too: 3 MiB, a JSON depth limit, YAML alias expansion limits).

Pure: bytes and a Content-Type in, a JSON object out, or an `ApiError` with a Status.
"""

from __future__ import annotations

from typing import Any

import msgspec
import yaml

from core.errors import ApiError, bad_request
from events.manifest import ManifestError, yaml_documents
from events.objects import Status

JSON = dict[str, Any]

MAX_BODY_BYTES = 3 * 1024 * 1024  # the API server's request body limit
MAX_DEPTH = 100  # real manifests nest ~15 deep; 1,000 levels used to exhaust the stack
MAX_NODES = 200_000  # values after YAML alias expansion (a "billion laughs" document)
JSON_TYPES = ("application/json",)
YAML_TYPES = ("application/yaml", "application/x-yaml", "text/yaml", "text/x-yaml")
ACCEPTED = ("application/json", "application/yaml")


def unsupported_media_type() -> ApiError:
    """415 as the API server words it."""
    return ApiError(
        Status(
            message="the body of the request was in an unknown format - accepted media "
            f"types include: {', '.join(ACCEPTED)}",
            reason="UnsupportedMediaType",
            code=415,
        )
    )


def media_type(content_type: str) -> str:
    """`application/json; charset=utf-8` → `application/json`."""
    return content_type.split(";", 1)[0].strip().lower()


def _unknown(why: str) -> ApiError:
    return bad_request(f"the body of the request was in an unknown format: {why}")


def check_shape(body: Any) -> None:
    """Depth and size of a decoded body, walked without recursion."""
    stack: list[tuple[Any, int]] = [(body, 1)]
    nodes = 0
    while stack:
        value, depth = stack.pop()
        nodes += 1
        if depth > MAX_DEPTH:
            raise _unknown(f"nested deeper than {MAX_DEPTH} levels")
        if nodes > MAX_NODES:
            raise _unknown(f"more than {MAX_NODES} values")
        if isinstance(value, dict):
            stack.extend((v, depth + 1) for v in value.values())
        elif isinstance(value, list):
            stack.extend((v, depth + 1) for v in value)


def decode_json(raw: bytes, what: str = "the body of the request") -> Any:
    """JSON of any shape, within the depth and size limits (a 400 otherwise)."""
    try:
        value = msgspec.json.decode(raw)
    except RecursionError:
        raise _unknown(f"nested deeper than {MAX_DEPTH} levels") from None
    except msgspec.DecodeError as exc:
        raise bad_request(f"error decoding {what}: {exc}") from None
    check_shape(value)
    return value


def parse(raw: bytes, content_type: str) -> JSON:
    """The body as one JSON object. A declared media type must be JSON or YAML (415
    otherwise); without one the body is sniffed, as before: JSON if it starts like JSON."""
    if not raw.strip():
        return {}
    mtype = media_type(content_type)
    if mtype and mtype not in JSON_TYPES + YAML_TYPES:
        raise unsupported_media_type()
    try:
        if mtype in YAML_TYPES or (not mtype and not raw.lstrip().startswith((b"{", b"["))):
            docs = yaml_documents(raw.decode())
            if len(docs) != 1:
                raise bad_request("the body must hold exactly one object")
            body: Any = docs[0]
        else:
            body = msgspec.json.decode(raw)
    except RecursionError:
        raise _unknown(f"nested deeper than {MAX_DEPTH} levels") from None
    except (msgspec.DecodeError, ManifestError, yaml.YAMLError, UnicodeDecodeError) as exc:
        raise _unknown(str(exc)) from None
    if not isinstance(body, dict):
        raise bad_request("the body of the request must be an object")
    check_shape(body)
    return body


def without_nulls(obj: Any) -> Any:
    """The object less its fields whose value is null, at every depth: what the API server
    stores of a create or an update (a typed field left nil is omitted; a custom resource's
    structural schema prunes nulls), so that a client sending `"field": null` finds the
    object without it, as a merge patch with that null would leave it."""
    if isinstance(obj, dict):
        return {k: without_nulls(v) for k, v in obj.items() if v is not None}
    if isinstance(obj, list):
        return [without_nulls(v) for v in obj]
    return obj
