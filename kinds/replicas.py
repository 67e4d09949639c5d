"""VirtualMachineInstanceReplicaSet (kubevirt.io/v1) and VirtualMachinePool
(pool.kubevirt.io/v1beta1, also served in v1alpha1): replicas, selector, template, and
the `scale` subresource (autoscaling/v1 Scale) that `kubectl scale` uses. Their
controller is services/controller/replicas.py."""

from __future__ import annotations

from typing import Any

import msgspec

from core import admission
from core.context import Append, Outcome, RequestContext
from core.errors import invalid
from core.intents import defaulted, view
from core.kind import Answer, CallArgs, Subresource
from events.catalog import ResourceUpdated
from events.meta import ResourceKind
from events.objects import (
    StatusCause,
    VirtualMachine,
    VirtualMachineInstanceReplicaSet,
    VirtualMachineInstanceSpec,
    VirtualMachinePool,
)
from kinds import versions
from kinds.resource import resource_spec
from kinds.spec import KindSpec, PrinterColumn
from projections.cluster import Cluster
from projections.replicas import label_selector, selector_matches
from projections.views import ResourceView

JSON = dict[str, Any]
SCALE_KIND = ("autoscaling", "v1", "Scale")


def _causes_template(typed: Any, labels: dict[str, str] | None) -> list[StatusCause]:
    causes = admission.validate_name(typed.metadata.name, typed.metadata.generate_name)
    selector = typed.spec.get("selector")
    if not selector:
        causes.append(admission.cause("FieldValueRequired", "missing selector.", "spec.selector"))
    elif not selector_matches(selector, labels or {}):
        causes.append(
            admission.cause("FieldValueInvalid", "selector does not match labels.", "spec.selector")
        )
    replicas = typed.spec.get("replicas")
    if replicas is not None and (not isinstance(replicas, int) or replicas < 0):
        causes.append(
            admission.cause(
                "FieldValueInvalid", "spec.replicas must be a non-negative integer", "spec.replicas"
            )
        )
    return causes


def admit_replicaset(_: Cluster, typed: Any, uid: str) -> tuple[Any, list[Any]]:
    template = typed.spec.get("template")
    if not isinstance(template, dict):
        msg = "missing virtual machine template."
        return typed, [admission.cause("FieldValueRequired", msg, "spec.template")]
    labels = (template.get("metadata") or {}).get("labels")
    causes = _causes_template(typed, labels)
    try:
        spec = msgspec.convert(template.get("spec") or {}, VirtualMachineInstanceSpec)
    except msgspec.ValidationError as exc:
        return typed, [*causes, admission.cause("FieldValueInvalid", str(exc), "spec.template")]
    spec = defaulted(lambda s, u: admission.default_vmi_spec(s, u), spec, uid)
    causes += admission.validate_vmi_spec(spec, "spec.template.spec", template=True)
    template["spec"] = msgspec.to_builtins(spec)
    return typed, causes


def admit_pool(cluster: Cluster, typed: Any, uid: str) -> tuple[Any, list[Any]]:
    template = typed.spec.get("virtualMachineTemplate")
    if not isinstance(template, dict):
        msg = "missing virtual machine template."
        return typed, [admission.cause("FieldValueRequired", msg, "spec.virtualMachineTemplate")]
    labels = (template.get("metadata") or {}).get("labels")
    causes = _causes_template(typed, labels)
    raw_vm = {
        "metadata": {"name": "pool", "namespace": typed.metadata.namespace},
        "spec": template.get("spec") or {},
    }
    try:
        vm = msgspec.convert(raw_vm, VirtualMachine)
    except msgspec.ValidationError as exc:
        field = "spec.virtualMachineTemplate"
        return typed, [*causes, admission.cause("FieldValueInvalid", str(exc), field)]
    from kinds import vm as vm_kind  # the VM admitter, instance types included

    vm, vm_causes = vm_kind.admit(cluster, vm, uid)
    causes += [
        msgspec.structs.replace(
            c, field=(c.field or "").replace("spec.", "spec.virtualMachineTemplate.spec.", 1)
        )
        for c in vm_causes
        if not c.message.startswith("metadata.name")
    ]
    template["spec"] = msgspec.to_builtins(vm.spec)
    return typed, causes


# ------------------------------------------------------------------ scale
def scale_of(obj: JSON) -> JSON:
    """The autoscaling/v1 Scale the CRD's scale subresource serves."""
    meta = obj.get("metadata") or {}
    status = obj.get("status") or {}
    scale_meta = {
        k: meta[k]
        for k in ("name", "namespace", "uid", "resourceVersion", "creationTimestamp")
        if k in meta
    }
    return {
        "kind": "Scale",
        "apiVersion": "autoscaling/v1",
        "metadata": scale_meta,
        "spec": {"replicas": int((obj.get("spec") or {}).get("replicas", 1))},
        "status": {
            "replicas": int(status.get("replicas", 0)),
            "selector": status.get("labelSelector")
            or label_selector((obj.get("spec") or {}).get("selector") or {}),
        },
    }


def _scale_acts(spec_of: Any) -> tuple[Subresource, ...]:
    def get_scale(c: Cluster, ns: str, name: str, _: CallArgs, __: RequestContext) -> Outcome:
        spec: KindSpec = spec_of()
        view(c, spec, ns, name)
        return Outcome((), spec.event_kind, spec.key(ns, name), 200)

    def put_scale(c: Cluster, ns: str, name: str, args: CallArgs, ctx: RequestContext) -> Outcome:
        spec: KindSpec = spec_of()
        found: ResourceView = view(c, spec, ns, name)
        replicas = (args.body.get("spec") or {}).get("replicas")
        if not isinstance(replicas, int) or isinstance(replicas, bool) or replicas < 0:
            cause = StatusCause(
                type="FieldValueInvalid",
                message=f"Invalid value: {replicas!r}: must be greater than or equal to 0",
                field="spec.replicas",
            )
            msg = f'Scale.autoscaling "{name}" is invalid: {cause.field}: {cause.message}'
            raise invalid(spec.resource, name, [cause], msg)
        manifest = found.manifest
        k = spec.key(ns, name)
        if manifest.get("spec", {}).get("replicas") == replicas:
            return Outcome((), spec.event_kind, k, 200)
        manifest.setdefault("spec", {})["replicas"] = replicas
        event = ResourceUpdated(
            meta=ctx.meta(spec.event_kind, ns, name, found.uid), manifest=manifest
        )
        return Outcome((Append(event, found.version),), spec.event_kind, k, 200)

    common = {"answer": Answer.OBJECT, "code": 200, "shape": scale_of, "response_kind": SCALE_KIND}
    return (
        Subresource("scale", put_scale, method="PUT", **common),  # type: ignore[arg-type]
        Subresource("scale", get_scale, method="GET", reads_body=False, **common),  # type: ignore[arg-type]
        Subresource("scale", put_scale, method="PATCH", **common),  # type: ignore[arg-type]
    )


_COLUMNS_DESC = (
    ("Desired", ".spec.replicas", "Number of desired {}"),
    ("Current", ".status.replicas", "Number of managed and not final or deleted {}"),
    ("Ready", ".status.readyReplicas", "Number of managed {} which are ready to receive traffic"),
)


def _printer(what: str) -> tuple[PrinterColumn, ...]:
    cols = tuple(
        PrinterColumn(n, "integer", p, description=d.format(what)) for n, p, d in _COLUMNS_DESC
    )
    return (*cols, PrinterColumn("Age", "date", ".metadata.creationTimestamp"))


REPLICASET: KindSpec = resource_spec(
    group="kubevirt.io",
    version="v1",
    versions=versions.CORE,
    kind="VirtualMachineInstanceReplicaSet",
    plural="virtualmachineinstancereplicasets",
    singular="virtualmachineinstancereplicaset",
    short_names=("vmirs", "vmirss"),
    event_kind=ResourceKind.VMIRS,
    object_type=VirtualMachineInstanceReplicaSet,
    admit=admit_replicaset,
    subresources=_scale_acts(lambda: REPLICASET),
    subresource_group="kubevirt.io",
    printer_columns=_printer("VirtualMachineInstances"),
)
POOL: KindSpec = resource_spec(
    group="pool.kubevirt.io",
    version="v1beta1",
    versions=versions.BETA_OVER_ALPHA,
    kind="VirtualMachinePool",
    plural="virtualmachinepools",
    singular="virtualmachinepool",
    short_names=("vmpool", "vmpools"),
    event_kind=ResourceKind.VMPOOL,
    object_type=VirtualMachinePool,
    admit=admit_pool,
    subresources=_scale_acts(lambda: POOL),
    subresource_group="pool.kubevirt.io",
    printer_columns=_printer("VirtualMachines"),
)
SPECS = (REPLICASET, POOL)
