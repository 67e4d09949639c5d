"""VirtualMachineClone (clone.kubevirt.io/v1beta1). Its controller is
services/controller/clone.py: a snapshot of the source VM, a restore of it onto the
target name with the clone's patches, as KubeVirt does."""

from __future__ import annotations

import json
import re
from typing import Any

from core import admission
from events.meta import ResourceKind
from events.objects import VirtualMachineClone
from kinds import versions
from kinds.resource import resource_spec
from kinds.spec import PrinterColumn
from projections.cluster import Cluster

GROUP, VERSION = "clone.kubevirt.io", "v1beta1"
SOURCE_KINDS = ("VirtualMachine", "VirtualMachineSnapshot")
TARGET_KINDS = ("VirtualMachine",)
VOLUME_NAME_POLICIES = ("RandomizeNames", "PrefixTargetName")
_RULES = "%s filter %s is invalid: cannot contain a %s character (%s); FilterRules: %s"
# what Go's net.ParseMAC takes for the 6-byte addresses a guest NIC has
_MAC = re.compile(
    r"^([0-9A-Fa-f]{2}([:-])[0-9A-Fa-f]{2}(\2[0-9A-Fa-f]{2}){4}"
    r"|[0-9A-Fa-f]{4}\.[0-9A-Fa-f]{4}\.[0-9A-Fa-f]{4})$"
)


def filter_causes(filters: Any, field: str) -> list[Any]:
    """KubeVirt's filter rules: `!` only first, `*` only last, `!` alone is no filter."""
    causes: list[Any] = []
    for f in filters if isinstance(filters, list) else []:
        f = str(f)
        if len(f) == 1:
            if f == "!":
                causes.append(
                    admission.cause(
                        "FieldValueInvalid", "a negation character is not a valid filter", field
                    )
                )
            continue
        if "!" in f[1:]:
            rule = "NegationChar can be only used at the beginning of the filter"
            message = _RULES % (field, f, "negation", "!", rule)
            causes.append(admission.cause("FieldValueInvalid", message, field))
        if "*" in f[:-1]:
            rule = "WildcardChar can be only at the end of the filter"
            message = _RULES % (field, f, "wildcard", "*", rule)
            causes.append(admission.cause("FieldValueInvalid", message, field))
    return causes


def _admit(_: Cluster, typed: Any, __: str) -> tuple[Any, list[Any]]:
    """KubeVirt's VirtualMachineClone admitter (vmclone-admitter.go), its messages and
    fields as it words them."""
    causes = admission.validate_name(typed.metadata.name, typed.metadata.generate_name)
    spec = typed.spec
    template = spec.get("template") or {}
    causes += filter_causes(spec.get("annotationFilters"), "spec.annotations")
    causes += filter_causes(spec.get("labelFilters"), "spec.labels")
    causes += filter_causes(template.get("annotationFilters"), "spec.template.annotations")
    causes += filter_causes(template.get("labelFilters"), "spec.template.labels")
    source = spec.get("source") or None
    target = spec.get("target") or None
    invalid = "FieldValueInvalid"
    if (source or {}).get("kind") not in SOURCE_KINDS:
        causes.append(admission.cause(invalid, "Source kind is not supported", "spec.Source.Kind"))
    if target is not None and target.get("kind") not in TARGET_KINDS:
        causes.append(admission.cause(invalid, "Target kind is not supported", "spec.Target.Kind"))
    if source is None:
        causes.append(admission.cause(invalid, "Source cannot be nil", "spec.Source"))
    else:
        if not source.get("apiGroup"):
            causes.append(
                admission.cause(
                    invalid, "Source's APIGroup cannot be empty", "spec.Source.APIGroup"
                )
            )
        if not source.get("kind"):
            causes.append(admission.cause(invalid, "Source's Kind cannot be empty", "spec.Source"))
        if not source.get("name"):
            causes.append(
                admission.cause(invalid, "Source's name cannot be empty", "spec.Source.Name")
            )
    if (
        source is not None
        and target is not None
        and source.get("kind") == target.get("kind") == "VirtualMachine"
        and target.get("name") == source.get("name")
    ):
        causes.append(
            admission.cause(
                invalid,
                "Target name cannot be equal to source name when both are VirtualMachines",
                "spec.target.name",
            )
        )
    for iface, mac in sorted((spec.get("newMacAddresses") or {}).items()):
        if mac and not _MAC.match(str(mac)):
            causes.append(
                admission.cause(
                    invalid,
                    f"interface {iface} has malformed MAC address ({mac}).",
                    f"spec.newMacAddresses.{iface}",
                )
            )
    for i, patch in enumerate(spec.get("patches") or []):
        try:
            json.loads(str(patch))
        except ValueError:
            causes.append(
                admission.cause(invalid, f"patch is not valid JSON ({patch})", f"spec.patches[{i}]")
            )
    policy = spec.get("volumeNamePolicy")
    if policy is not None and policy not in VOLUME_NAME_POLICIES:
        causes.append(
            admission.cause(
                "FieldValueNotSupported",
                f'VolumeNamePolicy "{policy}" is not supported',
                "spec.volumeNamePolicy",
            )
        )
    return typed, causes


SPEC = resource_spec(
    group=GROUP,
    version=VERSION,
    versions=versions.BETA_OVER_ALPHA,
    kind="VirtualMachineClone",
    plural="virtualmachineclones",
    singular="virtualmachineclone",
    short_names=("vmclone", "vmclones"),
    event_kind=ResourceKind.CLONE,
    object_type=VirtualMachineClone,
    admit=_admit,
    printer_columns=(
        PrinterColumn("Phase", "string", ".status.phase"),
        PrinterColumn("SourceVirtualMachine", "string", ".spec.source.name"),
        PrinterColumn("TargetVirtualMachine", "string", ".spec.target.name"),
    ),
)
SPECS = (SPEC,)
