"""Small builders for events and manifests in tests."""

from __future__ import annotations

import time
import uuid
from typing import Any

from events.meta import Actor, Aggregate, Kind, KindToken, Meta


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
