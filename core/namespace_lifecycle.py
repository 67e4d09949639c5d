"""The API server's NamespaceLifecycle admission, pure: nothing is created in a namespace
that does not exist (404 `namespaces "x" not found`) or whose deletion has begun (403,
`unable to create new content in namespace x because it is being terminated`); the
immortal namespaces are never deleted. It runs before the rest of a create (the name's
checks, the webhooks), as the admission plugin runs before the object's validation; only
a namespace that is no DNS label, which could never exist, gets the name check's 422."""

from __future__ import annotations

from core.errors import Resource, forbidden, not_found
from events.objects import StatusCause
from projections import namespaces
from projections.cluster import Cluster

NAMESPACES = Resource("namespaces", "", "Namespace")
TERMINATING_CAUSE = "NamespaceTerminating"  # corev1.NamespaceTerminatingCause


def admit_create(cluster: Cluster, res: Resource, namespace: str, name: str) -> None:
    """Raise the refusal of a create of `name` (of `res`) into `namespace`."""
    found = namespaces.find(cluster, namespace)
    if found is None:
        raise not_found(NAMESPACES, namespace)
    if namespaces.phase(found) == namespaces.TERMINATING:
        cause = StatusCause(
            type=TERMINATING_CAUSE,
            message=f"namespace {namespace} is being terminated",
            field="metadata.namespace",
        )
        why = (
            f"unable to create new content in namespace {namespace} because it is being terminated"
        )
        raise forbidden(res, name, why, [cause])


def admit_delete(res: Resource, name: str) -> None:
    """An immortal namespace's refusal of a delete (any other kind: nothing)."""
    same = (res.plural, res.group) == (NAMESPACES.plural, NAMESPACES.group)
    if same and name in namespaces.IMMORTAL:
        raise forbidden(NAMESPACES, name, "this namespace may not be deleted")
