"""A write of an object's `status` subresource (`PUT|PATCH .../NAME/status`, the CRDs'
`subresources: status`). Here a status is never stored as written: it is folded from the
events virt-controller and virt-handler record, so a status write that changes nothing is
answered with the object (what a client's read-modify-write of an unchanged status
expects) and one that changes it is refused, appending nothing. As on the API server's
status endpoint, what the write says of anything but the status is ignored. Pure."""

from __future__ import annotations

from typing import Any

from core import admission
from core.errors import bad_request, invalid, stale
from core.kind import KindRules

JSON = dict[str, Any]
DERIVED = (
    "the status is recorded from the cluster's events by its controllers and node agents: "
    "it cannot be written"
)


def check(spec: KindRules, name: str, current: JSON, written: Any) -> None:
    """`current`: the object as served; `written`: the PUT's body, or what the PATCH made
    of `current`. Raises the refusal; returns when the write changes nothing."""
    if not isinstance(written, dict):
        raise bad_request("the body of the request must be an object")
    meta = written.get("metadata") or {}
    rv = meta.get("resourceVersion") if isinstance(meta, dict) else None
    if rv and rv != (current.get("metadata") or {}).get("resourceVersion"):
        raise stale(spec.resource, name)
    if written.get("status") == current.get("status"):
        return
    res = spec.resource
    qualified = f"{res.kind}.{res.group}" if res.group else res.kind
    cause = admission.cause("FieldValueForbidden", f"Forbidden: {DERIVED}", "status")
    raise invalid(
        res, name, [cause], f'{qualified} "{name}" is invalid: status: Forbidden: {DERIVED}'
    )
