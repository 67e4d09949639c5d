"""Namespaces as the cluster holds them (core/v1 Namespace, a generic kind folded by
`evolve_resource`): which exist, which are terminating, what lives in one, and how one
is served (`projections/render.py: render_namespace`). Pure."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from events.meta import Kind, KindToken, ResourceKind
from projections.cluster import Cluster
from projections.views import MigrationView, ResourceView

KIND = ResourceKind.NAMESPACE
# what a Kubernetes API server creates at its start (its system namespaces controller),
# and KubeVirt's own (its operator's)
SYSTEM = ("default", "kube-node-lease", "kube-public", "kube-system", "kubevirt")
# NamespaceLifecycle's immortal namespaces: a delete is refused
IMMORTAL = frozenset({"default", "kube-public", "kube-system"})
FINALIZER = "kubernetes"  # the namespace controller's, in spec.finalizers
ACTIVE, TERMINATING = "Active", "Terminating"
NAME_LABEL = "kubernetes.io/metadata.name"  # the API server sets it on every namespace


def find(cluster: Cluster, name: str) -> ResourceView | None:
    return cluster.resources[KIND].get(name)


def phase(view: ResourceView) -> str:
    """Terminating from the moment its deletion began until it is gone."""
    return TERMINATING if view.marked else ACTIVE


def _tables(cluster: Cluster) -> list[tuple[KindToken, dict[str, Any]]]:
    """The namespaced kinds' views (a cluster-scoped generic kind's namespace is none)."""
    return [(k, t) for k, t in cluster.object_tables() if k not in (Kind.POLICY, KIND)]


def contents(cluster: Cluster, name: str) -> Iterator[tuple[KindToken, Any]]:
    """Every object that lives in the namespace (a finished migration that was deleted
    lives nowhere)."""
    for kind, table in _tables(cluster):
        for view in table.values():
            if view.namespace != name:
                continue
            if isinstance(view, MigrationView) and view.gone:
                continue
            yield kind, view


def in_use(cluster: Cluster) -> set[str]:
    """The namespaces objects live in (a log written before namespaces were objects has
    objects in namespaces that were never created)."""
    return {
        view.namespace
        for _, table in _tables(cluster)
        for view in table.values()
        if view.namespace and not (isinstance(view, MigrationView) and view.gone)
    }
