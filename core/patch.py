"""PATCH bodies: the object a patch makes of the stored one. Pure: the current object,
the patch's bytes and its media type in; the patched object out, or an `ApiError` with the
API server's Status. The caller appends the result as an update (same admission, same
optimistic concurrency as a PUT).

KubeVirt's kinds are custom resources, for which the API server has no patch strategies:
a strategic merge patch of one is 415, as a CRD's endpoint answers (kubectl then says
`application/strategic-merge-patch+json is not supported by ...`). A built-in kind's
endpoint takes it, read here as a JSON merge patch (lists replaced whole: what kubectl
sends for the built-in kinds served, a node's labels, taints (an atomic list) and
`spec.unschedulable`, a namespace's metadata).

A JSON patch that does not decode is 400 with Go's words for it; one that does not apply
(a failed `test`, a path that is not there) is the API server's 422 `the server rejected
our request due to an error in our request`, which carries no detail."""

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
PATCH_TYPES = (JSON_PATCH, MERGE, STRATEGIC, APPLY)  # a built-in kind's, in this order
CUSTOM_PATCH_TYPES = (JSON_PATCH, MERGE, APPLY)  # a custom resource's
MAX_OPERATIONS = 10_000  # the API server's limit on a JSON patch
REJECTED = "the server rejected our request due to an error in our request"


def unsupported_patch_type(mtype: str, strategic: bool = True) -> ApiError:
    """415 as the API server words it, listing what the endpoint takes."""
    accepted = PATCH_TYPES if strategic else CUSTOM_PATCH_TYPES
    return ApiError(
        Status(
            message=f"the body of the request was in an unknown format - accepted media "
            f"types include: {', '.join(accepted)}",
            reason="UnsupportedMediaType",
            code=415,
        )
    )


_GO_TYPES = {dict: "object", str: "string", bool: "bool", int: "number", float: "number"}


def _go_type(value: Any) -> str:
    return _GO_TYPES.get(type(value), "array" if isinstance(value, list) else "null")


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


def check_type(content_type: str, strategic: bool = True) -> str:
    """The patch's media type, or 415 (`strategic`: the kind takes a strategic merge
    patch, as a built-in kind does; a custom resource does not)."""
    mtype = bodies.media_type(content_type)
    if mtype not in (PATCH_TYPES if strategic else CUSTOM_PATCH_TYPES):
        raise unsupported_patch_type(mtype, strategic)
    return mtype


def _json_patch(current: JSON, doc: Any) -> Any:
    if not isinstance(doc, list):
        raise bad_request(
            f"json: cannot unmarshal {_go_type(doc)} into Go value of type jsonpatch.Patch"
        )
    for op in doc:
        if not isinstance(op, dict):
            raise bad_request(
                f"json: cannot unmarshal {_go_type(op)} into Go value of type jsonpatch.Operation"
            )
    if len(doc) > MAX_OPERATIONS:
        raise ApiError(
            Status(
                message="Request entity too large: The allowed maximum operations in a JSON "
                f"patch is {MAX_OPERATIONS}, got {len(doc)}",
                reason="RequestEntityTooLarge",
                code=413,
            )
        )
    try:
        return jsonpatch.JsonPatch(doc).apply(current)
    except (jsonpatch.JsonPatchException, jsonpatch.JsonPointerException, TypeError,
            KeyError, ValueError, IndexError, AttributeError):  # fmt: skip
        raise invalid_request(REJECTED) from None


def apply(current: JSON, raw: bytes, content_type: str, strategic: bool = True) -> JSON:
    """The object `raw` (a patch of `content_type`) makes of `current`."""
    mtype = check_type(content_type, strategic)
    doc = bodies.decode_json(raw, "patch")
    if mtype == APPLY:
        raise unsupported_patch_type(mtype, strategic)  # an apply is not a patch of the object
    if mtype == JSON_PATCH:
        out = _json_patch(current, doc)
    else:
        if not isinstance(doc, dict):
            raise bad_request("Invalid JSON Patch")  # Go's jsonpatch.ErrBadJSONPatch
        out = merge(current, doc)
    if not isinstance(out, dict):
        raise bad_request("the patched object must be a JSON object")
    return out
