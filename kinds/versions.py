"""The versions KubeVirt serves its groups in, as its CRDs declare them
(virt-operator's `crds.go`; kubevirt.io's from `core/v1/register.go`). Every served
version of a group has the same schema, so each conversion changes `apiVersion` only
(the CRDs' `None` strategy)."""

from __future__ import annotations

from kinds.spec import Version

# kubevirt.io: VirtualMachine, VirtualMachineInstance, -ReplicaSet, -Migration
CORE = (
    Version(name="v1", storage=True),
    Version(
        name="v1alpha3",
        deprecation_warning="kubevirt.io/v1alpha3 is now deprecated and will be removed in a "
        "future release.",
    ),
)
# kubevirt.io VirtualMachineInstancePreset: deprecated in both, stored in v1alpha3
PRESET = (
    Version(
        name="v1",
        deprecation_warning="kubevirt.io/v1 VirtualMachineInstancePresets is now deprecated "
        "and will be removed in v2.",
    ),
    Version(
        name="v1alpha3",
        storage=True,
        deprecation_warning="kubevirt.io/v1alpha3 VirtualMachineInstancePresets is now "
        "deprecated and will be removed in v2.",
    ),
)
# export.kubevirt.io: v1 stored, v1beta1 served and deprecated
EXPORT = (
    Version(name="v1", storage=True),
    Version(
        name="v1beta1",
        deprecation_warning="export.kubevirt.io/v1beta1 VirtualMachineExport is now deprecated "
        "and will be removed in a future version.",
    ),
)
# pool.kubevirt.io, snapshot.kubevirt.io and clone.kubevirt.io: v1beta1 stored, v1alpha1 served
BETA_OVER_ALPHA = (Version(name="v1beta1", storage=True), Version(name="v1alpha1"))
