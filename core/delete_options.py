"""DeleteOptions, for any kind with a delete intent: `gracePeriodSeconds` (handed to the
kind's intent), `propagationPolicy`, and `preconditions` (uid, resourceVersion), checked
against the projection in the same pure decision as the delete, so a failed precondition
is a 409 and nothing is appended. Query parameters win over the body, as kubectl sends
either. Pure."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from core import intents
from core.errors import bad_request, conflict, invalid_request
from core.kind import KindRules
from projections.cluster import Cluster

JSON = dict[str, Any]
# The owner's dependents are always deleted (the controller tears a VM's VMI down):
# Foreground and Background differ only in when the owner disappears, which the fold's
# own teardown decides. Orphaning would need the controller to leave them: refused.
POLICIES = ("Foreground", "Background")


@dataclass(frozen=True)
class DeleteOptions:
    propagation: str | None = None
    uid: str | None = None
    resource_version: str | None = None

    @classmethod
    def parse(cls, query: Mapping[str, str], body: JSON) -> DeleteOptions:
        policy = query.get("propagationPolicy") or body.get("propagationPolicy")
        if policy is not None and policy not in POLICIES:
            supported = ", ".join(f'"{p}"' for p in POLICIES)
            raise invalid_request(
                f'propagationPolicy: Unsupported value: "{policy}": supported values: {supported}'
            )
        pre = body.get("preconditions") or {}
        if not isinstance(pre, dict):
            raise bad_request("preconditions must be an object")
        uid, rv = pre.get("uid"), pre.get("resourceVersion")
        for field, value in (("uid", uid), ("resourceVersion", rv)):
            if value is not None and not isinstance(value, str):
                raise bad_request(f"preconditions.{field} must be a string")
        return cls(policy, uid or None, rv or None)


def check(
    cluster: Cluster, spec: KindRules, namespace: str, name: str, opts: DeleteOptions
) -> None:
    """The preconditions, in the API server's words (409 Conflict)."""
    if opts.uid is None and opts.resource_version is None:
        return
    current = intents.view(cluster, spec, namespace, name)
    if opts.uid is not None and opts.uid != current.uid:
        raise conflict(
            spec.resource,
            name,
            f"Precondition failed: UID in precondition: {opts.uid}, "
            f"UID in object meta: {current.uid}",
        )
    rv = str(current.resource_version)
    if opts.resource_version is not None and opts.resource_version != rv:
        raise conflict(
            spec.resource,
            name,
            "Precondition failed: ResourceVersion in precondition: "
            f"{opts.resource_version}, ResourceVersion in object meta: {rv}",
        )
