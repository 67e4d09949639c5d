"""Instance types and preferences (instancetype.kubevirt.io/v1beta1), namespaced and
cluster-wide, and the VM admission that resolves them (KubeVirt's VM admitter: a missing
instance type or preference, a VM field the instance type owns)."""

from __future__ import annotations

from typing import Any

import msgspec

from events.meta import ResourceKind
from events.objects import (
    StatusCause,
    VirtualMachine,
    VirtualMachineClusterInstancetype,
    VirtualMachineClusterPreference,
    VirtualMachineInstancetype,
    VirtualMachinePreference,
)
from kinds.resource import resource_spec
from kinds.spec import Scope
from projections import instancetype as it
from projections.cluster import Cluster

JSON = dict[str, Any]
GROUP, VERSION = it.GROUP, "v1beta1"
NOT_FOUND = "FieldValueNotFound"
INVALID = "FieldValueInvalid"


def resolve(cluster: Cluster, vm: VirtualMachine) -> tuple[dict[str, it.Found], list[StatusCause]]:
    """The instance type and preference the VM names (default kinds: the cluster-wide
    ones, as KubeVirt's mutating webhook sets them), or the admitter's causes."""
    namespace = vm.metadata.namespace or "default"
    name = vm.metadata.name or ""
    found: dict[str, it.Found] = {}
    for field, matcher in (
        ("instancetype", vm.spec.instancetype),
        ("preference", vm.spec.preference),
    ):
        if not matcher:
            continue
        matcher.setdefault("kind", it.default_kind(field))
        got = it.find(cluster, namespace, name, field, matcher)
        if isinstance(got, str):
            msg = f"Failure to find {field}: {got}"
            return {}, [StatusCause(type=NOT_FOUND, message=msg, field=f"spec.{field}")]
        found[field] = got
    return found, []


def admit_vm(
    cluster: Cluster, vm: VirtualMachine
) -> tuple[VirtualMachine, JSON | None, list[StatusCause]]:
    """For a VM that names an instance type or preference: (the VM with the preference's
    defaults filled into its template, the template as its VMI would run it for
    validation, causes)."""
    found, causes = resolve(cluster, vm)
    if causes:
        return vm, None, causes
    template = msgspec.to_builtins(vm.spec.template.spec)
    instancetype = found.get("instancetype")
    preference = found.get("preference")
    if instancetype is not None:
        paths = it.conflicts(instancetype.spec, template)
        if paths:
            cause = StatusCause(type=INVALID, message=it.conflict_message(paths), field=paths[0])
            return vm, None, [cause]
    filled = it.apply(None, preference.spec if preference else None, template)
    applied = it.apply(instancetype.spec if instancetype else None, None, filled)
    vm.spec.template.spec = msgspec.convert(filled, type(vm.spec.template.spec))
    return vm, applied, []


INSTANCETYPE = resource_spec(
    group=GROUP,
    version=VERSION,
    kind="VirtualMachineInstancetype",
    plural="virtualmachineinstancetypes",
    singular="virtualmachineinstancetype",
    short_names=("vminstancetype", "vminstancetypes", "vmf", "vmfs"),
    event_kind=ResourceKind.INSTANCETYPE,
    object_type=VirtualMachineInstancetype,
    status_subresource=False,  # KubeVirt's CRD has none
)
CLUSTER_INSTANCETYPE = resource_spec(
    group=GROUP,
    version=VERSION,
    kind="VirtualMachineClusterInstancetype",
    plural="virtualmachineclusterinstancetypes",
    singular="virtualmachineclusterinstancetype",
    short_names=("vmclusterinstancetype", "vmclusterinstancetypes", "vmcf", "vmcfs"),
    categories=(),
    scope=Scope.CLUSTER,
    event_kind=ResourceKind.CLUSTER_INSTANCETYPE,
    object_type=VirtualMachineClusterInstancetype,
    status_subresource=False,  # KubeVirt's CRD has none
)
PREFERENCE = resource_spec(
    group=GROUP,
    version=VERSION,
    kind="VirtualMachinePreference",
    plural="virtualmachinepreferences",
    singular="virtualmachinepreference",
    short_names=("vmpref", "vmprefs", "vmp", "vmps"),
    event_kind=ResourceKind.PREFERENCE,
    object_type=VirtualMachinePreference,
    status_subresource=False,  # KubeVirt's CRD has none
)
CLUSTER_PREFERENCE = resource_spec(
    group=GROUP,
    version=VERSION,
    kind="VirtualMachineClusterPreference",
    plural="virtualmachineclusterpreferences",
    singular="virtualmachineclusterpreference",
    short_names=("vmcp", "vmcps"),
    categories=(),
    scope=Scope.CLUSTER,
    event_kind=ResourceKind.CLUSTER_PREFERENCE,
    object_type=VirtualMachineClusterPreference,
    status_subresource=False,  # KubeVirt's CRD has none
)
SPECS = (INSTANCETYPE, CLUSTER_INSTANCETYPE, PREFERENCE, CLUSTER_PREFERENCE)
