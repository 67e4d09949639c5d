"""VirtualMachineExport (export.kubevirt.io/v1; v1beta1 served, deprecated) and the core/v1
Secret that holds an export's token. The export's controller is
services/controller/export.py; its downloads are served by the api
(services/api/export_server.py)."""

from __future__ import annotations

import base64
from typing import Any

from core import admission
from core.kind import SpecRefusal
from events.meta import ResourceKind
from events.objects import Secret, VirtualMachineExport
from kinds import versions
from kinds.resource import resource_spec
from kinds.spec import PrinterColumn
from projections.cluster import Cluster

GROUP, VERSION = "export.kubevirt.io", "v1"


def _admit_export(_: Cluster, typed: Any, __: str) -> tuple[Any, list[Any]]:
    """KubeVirt's VMExport admitter (vmexport-admitter.go): a PVC, a VirtualMachineSnapshot
    or a VirtualMachine, named, of its API group."""
    causes = admission.validate_name(typed.metadata.name, typed.metadata.generate_name)
    source = typed.spec.get("source") or {}
    kind, name, group = source.get("kind"), source.get("name"), source.get("apiGroup")
    invalid = "FieldValueInvalid"
    here = "spec.source"
    match kind:
        case "PersistentVolumeClaim":
            if not name:
                causes.append(
                    admission.cause(invalid, "PVC name must not be empty", f"{here}.name")
                )
            if group:
                message = "PVC API group must be missing or blank"
                causes.append(admission.cause(invalid, message, f"{here}.APIGroup"))
        case "VirtualMachineSnapshot":
            if not name:
                message = "VMSnapshot name must not be empty"
                causes.append(admission.cause(invalid, message, f"{here}.name"))
            if group != "snapshot.kubevirt.io":
                message = "VMSnapshot API group must be snapshot.kubevirt.io"
                causes.append(admission.cause(invalid, message, f"{here}.APIGroup"))
        case "VirtualMachine":
            if not name:
                message = "Virtual Machine name must not be empty"
                causes.append(admission.cause(invalid, message, f"{here}.name"))
            if group != "kubevirt.io":
                message = "VM API group must be kubevirt.io"
                causes.append(admission.cause(invalid, message, f"{here}.APIGroup"))
        case _:
            causes.append(admission.cause(invalid, "invalid kind", f"{here}.kind"))
    return typed, causes


def _admit_secret(_: Cluster, typed: Any, __: str) -> tuple[Any, list[Any]]:
    """The API server folds `stringData` into `data` (base64) on every write, and a
    Secret of no type is `Opaque` (its defaulting)."""
    causes = admission.validate_name(typed.metadata.name, typed.metadata.generate_name)
    if not typed.type:
        typed.type = "Opaque"
    if typed.string_data:
        data = dict(typed.data or {})
        for k, v in typed.string_data.items():
            data[k] = base64.b64encode(str(v).encode()).decode()
        typed.data = data
        typed.string_data = None
    for k, v in (typed.data or {}).items():
        try:
            base64.b64decode(str(v), validate=True)
        except ValueError:
            message = "illegal base64 data at input byte 0"
            causes.append(admission.cause("FieldValueInvalid", message, f"data[{k}]"))
    return typed, causes


EXPORT = resource_spec(
    group=GROUP,
    version=VERSION,
    versions=versions.EXPORT,
    kind="VirtualMachineExport",
    plural="virtualmachineexports",
    singular="virtualmachineexport",
    short_names=("vmexport", "vmexports"),
    event_kind=ResourceKind.EXPORT,
    object_type=VirtualMachineExport,
    admit=_admit_export,
    updatable=False,
    spec_refusal=SpecRefusal(
        "virtualmachineexport-validator.export.kubevirt.io",
        "spec in immutable after creation",
        "FieldValueInvalid",
        "spec",
    ),
    printer_columns=(
        PrinterColumn("SourceKind", "string", ".spec.source.kind"),
        PrinterColumn("SourceName", "string", ".spec.source.name"),
        PrinterColumn("Phase", "string", ".status.phase"),
    ),
)
SECRET = resource_spec(
    group="",
    version="v1",
    kind="Secret",
    plural="secrets",
    singular="secret",
    event_kind=ResourceKind.SECRET,
    object_type=Secret,
    admit=_admit_secret,
    categories=(),
    subresource_group="",
)
SPECS = (EXPORT, SECRET)
