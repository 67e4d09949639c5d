"""Small builders for events and manifests in tests."""

from __future__ import annotations

import time
import uuid
from typing import Any

from events.catalog import ResourceCreated
from events.envelope import Stored
from events.meta import CLUSTER_SCOPE, Actor, Aggregate, Kind, KindToken, Meta, ResourceKind
from projections import namespaces
from projections.cluster import Cluster


def meta(
    kind: KindToken = Kind.VM,
    name: str = "vm1",
    namespace: str = "default",
    *,
    node: str = "",
    event_id: str | None = None,
    correlation_id: str = "corr",
    causation_id: str = "",
    at: float | None = None,
) -> Meta:
    return Meta(
        event_id=event_id or uuid.uuid4().hex,
        aggregate=Aggregate(kind=kind, namespace=namespace, name=name),
        occurred_at=time.time() if at is None else at,
        correlation_id=correlation_id,
        causation_id=causation_id,
        actor=Actor(service="test"),
        node=node,
    )


def vm_manifest(
    name: str = "vm1",
    strategy: str = "Always",
    *,
    memory: str = "1Gi",
    cpu: str | None = None,
    labels: dict[str, str] | None = None,
    spec: dict[str, Any] | None = None,
) -> dict[str, Any]:
    resources: dict[str, Any] = {"requests": {"memory": memory}}
    if cpu:
        resources["requests"]["cpu"] = cpu
    tspec = {"domain": {"devices": {}, "resources": resources}, **(spec or {})}
    return {
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachine",
        "metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}"},
        "spec": {
            "runStrategy": strategy,
            "template": {"metadata": {"labels": labels or {"app": name}}, "spec": tspec},
        },
    }


def vmi_manifest(name: str, **kw: Any) -> dict[str, Any]:
    m = vm_manifest(name, **kw)
    return {
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachineInstance",
        "metadata": {
            **m["spec"]["template"]["metadata"],
            "name": name,
            "namespace": "default",
            "uid": f"vmi-uid-{name}",
        },
        "spec": m["spec"]["template"]["spec"],
    }


def with_namespaces(*names: str, cluster: Cluster | None = None) -> Cluster:
    """`cluster` (a new one by default) holding the system namespaces the api creates at
    its start (`default`, `kubevirt`, ...) and `names`: a create is admitted only into a
    namespace that exists. Folded at sequence 0, so a test's own sequences stay as
    written."""
    c = Cluster() if cluster is None else cluster
    for name in (*namespaces.SYSTEM, *names):
        manifest = {
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": {"name": name, "uid": f"ns-uid-{name}"},
        }
        event = ResourceCreated(
            meta=meta(ResourceKind.NAMESPACE, name, CLUSTER_SCOPE, at=0.0), manifest=manifest
        )
        c.apply(Stored(seq=0, subject="", time=0.0, event=event))
    return c
