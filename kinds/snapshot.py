"""VirtualMachineSnapshot, VirtualMachineSnapshotContent and VirtualMachineRestore
(snapshot.kubevirt.io/v1beta1). Their controller is services/controller/snapshot.py."""

from __future__ import annotations

from typing import Any

from core import admission
from core.kind import SpecRefusal
from events.meta import ResourceKind
from events.objects import (
    VirtualMachineRestore,
    VirtualMachineSnapshot,
    VirtualMachineSnapshotContent,
)
from kinds import versions
from kinds.resource import resource_spec
from kinds.spec import PrinterColumn
from projections.cluster import Cluster

JSON = dict[str, Any]
GROUP, VERSION = "snapshot.kubevirt.io", "v1beta1"


def _admit_source(field: str) -> Any:
    """KubeVirt's snapshot and restore admitters: the source (target) must be a
    VirtualMachine of the core API group, named."""

    def admit(_: Cluster, typed: Any, __: str) -> tuple[Any, list[Any]]:
        causes = admission.validate_name(typed.metadata.name, typed.metadata.generate_name)
        ref = typed.spec.get(field) or {}
        path = f"spec.{field}"
        if not ref:
            causes.append(admission.cause("FieldValueRequired", f"missing {field}", path))
        elif ref.get("apiGroup") not in (None, "", "kubevirt.io"):
            causes.append(
                admission.cause(
                    "FieldValueInvalid",
                    "missing apiGroup"
                    if not ref.get("apiGroup")
                    else f"invalid apiGroup {ref.get('apiGroup')!r}",
                    f"{path}.apiGroup",
                )
            )
        elif ref.get("kind") != "VirtualMachine":
            causes.append(
                admission.cause(
                    "FieldValueInvalid", f"invalid kind {ref.get('kind')!r}", f"{path}.kind"
                )
            )
        elif not ref.get("name"):
            causes.append(admission.cause("FieldValueRequired", "missing name", f"{path}.name"))
        return typed, causes

    return admit


def _admit_restore(cluster: Cluster, typed: Any, uid: str) -> tuple[Any, list[Any]]:
    """The restore admitter also refuses a restore onto a target another unfinished restore
    is restoring (vmrestore-admitter.go: `VirtualMachineRestore "x" in progress`)."""
    typed, causes = _admit_source("target")(cluster, typed, uid)
    target = typed.spec.get("target")
    for other in cluster.resources[ResourceKind.RESTORE].values():
        if other.namespace != typed.metadata.namespace or other.spec.get("target") != target:
            continue
        if not other.status.get("complete"):
            message = f'VirtualMachineRestore "{other.name}" in progress'
            causes.append(admission.cause("FieldValueInvalid", message, "spec.target"))
    return typed, causes


def _immutable(webhook: str) -> SpecRefusal:
    """KubeVirt's snapshot and restore webhooks refuse any change of the spec so."""
    return SpecRefusal(
        f"{webhook}-validator.snapshot.kubevirt.io",
        "spec in immutable after creation",
        "FieldValueInvalid",
        "spec",
    )


SNAPSHOT = resource_spec(
    group=GROUP,
    version=VERSION,
    versions=versions.BETA_OVER_ALPHA,
    kind="VirtualMachineSnapshot",
    plural="virtualmachinesnapshots",
    singular="virtualmachinesnapshot",
    short_names=("vmsnapshot", "vmsnapshots"),
    event_kind=ResourceKind.SNAPSHOT,
    object_type=VirtualMachineSnapshot,
    admit=_admit_source("source"),
    updatable=False,
    spec_refusal=_immutable("virtualmachinesnapshot"),
    printer_columns=(
        PrinterColumn("SourceKind", "string", ".spec.source.kind"),
        PrinterColumn("SourceName", "string", ".spec.source.name"),
        PrinterColumn("Phase", "string", ".status.phase"),
        PrinterColumn("ReadyToUse", "boolean", ".status.readyToUse"),
        PrinterColumn("CreationTime", "date", ".status.creationTime"),
        PrinterColumn("Error", "string", ".status.error.message"),
    ),
)
CONTENT = resource_spec(
    group=GROUP,
    version=VERSION,
    versions=versions.BETA_OVER_ALPHA,
    kind="VirtualMachineSnapshotContent",
    plural="virtualmachinesnapshotcontents",
    singular="virtualmachinesnapshotcontent",
    short_names=("vmsnapshotcontent", "vmsnapshotcontents"),
    event_kind=ResourceKind.SNAPSHOT_CONTENT,
    object_type=VirtualMachineSnapshotContent,
    updatable=False,
    printer_columns=(
        PrinterColumn("ReadyToUse", "boolean", ".status.readyToUse"),
        PrinterColumn("CreationTime", "date", ".status.creationTime"),
        PrinterColumn("Error", "string", ".status.error.message"),
    ),
)
RESTORE = resource_spec(
    group=GROUP,
    version=VERSION,
    versions=versions.BETA_OVER_ALPHA,
    kind="VirtualMachineRestore",
    plural="virtualmachinerestores",
    singular="virtualmachinerestore",
    short_names=("vmrestore", "vmrestores"),
    event_kind=ResourceKind.RESTORE,
    object_type=VirtualMachineRestore,
    admit=_admit_restore,
    updatable=False,
    spec_refusal=_immutable("virtualmachinerestore"),
    printer_columns=(
        PrinterColumn("TargetKind", "string", ".spec.target.kind"),
        PrinterColumn("TargetName", "string", ".spec.target.name"),
        PrinterColumn("Complete", "boolean", ".status.complete"),
        PrinterColumn("RestoreTime", "date", ".status.restoreTime"),
        PrinterColumn("Error", "string", ".status.error.message"),
    ),
)
SPECS = (SNAPSHOT, CONTENT, RESTORE)
