"""VirtualMachineInstancePreset (kubevirt.io, deprecated): served in v1 and v1alpha3 (its
storage version), every request answered with KubeVirt's deprecation warning; stored
and listed, its admission KubeVirt's (a preset needs a domain). Presets are not applied
to the VMIs their selector matches: KubeVirt deprecated that merge in favour of instance
types and preferences."""

from __future__ import annotations

from typing import Any

from core import admission
from events.objects import VirtualMachineInstancePreset
from kinds import versions
from kinds.resource import resource_spec
from projections.cluster import Cluster

KIND_TOKEN = "vmipreset"


def admit_preset(_: Cluster, typed: Any, __: str) -> tuple[Any, list[Any]]:
    """KubeVirt's vmipreset admitter: a spec without a domain is refused."""
    causes = admission.validate_name(typed.metadata.name, typed.metadata.generate_name)
    if typed.spec.get("domain") is None:
        causes.append(admission.cause("FieldValueRequired", "missing domain.", "spec.domain"))
    return typed, causes


SPEC = resource_spec(
    group="kubevirt.io",
    version="v1alpha3",
    versions=versions.PRESET,
    kind="VirtualMachineInstancePreset",
    plural="virtualmachineinstancepresets",
    singular="virtualmachineinstancepreset",
    short_names=("vmipreset", "vmipresets"),
    event_kind=KIND_TOKEN,
    object_type=VirtualMachineInstancePreset,
    admit=admit_preset,
    status_subresource=False,  # KubeVirt's CRD has none
)
