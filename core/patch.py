"""PATCH bodies: the object a patch makes of the stored one. Pure: the current object,
the patch's bytes and its media type in; the patched object out, or an `ApiError` with the
API server's Status. The caller appends the result as an update (same admission, same
optimistic concurrency as a PUT).

Strategic merge patch is read as a JSON merge patch: for custom resources the API server
has no patch strategies to follow, and KubeVirt's kinds are custom resources."""

from __future__ import annotations

import copy
from typing import Any

import jsonpatch

from core import bodies
from core.errors import ApiError, bad_request, invalid_request
from events.objects import Status

JSON = dict[str, Any]
MERGE = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"
STRATEGIC = "application/strategic-merge-patch+json"
APPLY = "application/apply-patch+yaml"  # server-side apply: `field_manager.apply`
PATCH_TYPES = (JSON_PATCH, MERGE, APPLY, STRATEGIC)


def unsupported_patch_type(mtype: str) -> ApiError:
    """415 as the API server words it."""
    return ApiError(
        Status(
            message=f"the body of the request was in an unknown format - accepted media "
            f"types include: {', '.join(PATCH_TYPES)}",
            reason="UnsupportedMediaType",
            code=415,
        )
    )


def merge(target: Any, patch: Any) -> Any:
    """RFC 7386: objects merge key by key, `null` removes, anything else replaces."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = merge(out.get(key), value)
    return out


def check_type(content_type: str) -> str:
    """The patch's media type, or 415."""
    mtype = bodies.media_type(content_type)
    if mtype not in PATCH_TYPES:
        raise unsupported_patch_type(mtype)
    return mtype


def apply(current: JSON, raw: bytes, content_type: str) -> JSON:
    """The object `raw` (a patch of `content_type`) makes of `current`."""
    mtype = check_type(content_type)
    doc = bodies.decode_json(raw, "patch")
    if mtype == APPLY:
        raise unsupported_patch_type(mtype)  # an apply is not a patch of the object
    if mtype == JSON_PATCH:
        if not isinstance(doc, list):
            raise bad_request("the JSON patch must be an array of operations")
        try:
            out = jsonpatch.JsonPatch(doc).apply(current)
        except (jsonpatch.JsonPatchException, jsonpatch.JsonPointerException) as exc:
            raise invalid_request(
                f"the server rejected our request due to an error in our request: {exc}"
            ) from None
        except (TypeError, KeyError, ValueError) as exc:
            raise bad_request(f"invalid JSON patch: {exc}") from None
    else:
        if not isinstance(doc, dict):
            raise bad_request("the merge patch must be a JSON object")
        out = merge(current, doc)
    if not isinstance(out, dict):
        raise bad_request("the patched object must be a JSON object")
    return out
