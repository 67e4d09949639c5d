"""Loading and dumping KubeVirt manifests without losing fields we do not model.

msgspec ignores unknown fields on decode, so the typed view alone would silently drop
whatever KubeVirt users wrote that virtstream does not know. `dump` therefore overlays the
typed view onto the original raw document: unmodelled keys at any depth survive, modelled
ones take the typed (possibly defaulted or mutated) value.
"""

from __future__ import annotations

from typing import Any, TypeVar

import msgspec
import yaml

from events.objects import (
    MigrationPolicy,
    Node,
    Status,
    VirtualMachine,
    VirtualMachineClusterInstancetype,
    VirtualMachineClusterPreference,
    VirtualMachineInstance,
    VirtualMachineInstanceMigration,
    VirtualMachineInstanceReplicaSet,
    VirtualMachineInstancetype,
    VirtualMachinePool,
    VirtualMachinePreference,
    VirtualMachineRestore,
    VirtualMachineSnapshot,
    VirtualMachineSnapshotContent,
)

T = TypeVar("T")

# (API group, kind) -> type; the core group is "".
OBJECT_TYPES: dict[tuple[str, str], type[Any]] = {
    ("kubevirt.io", "VirtualMachine"): VirtualMachine,
    ("kubevirt.io", "VirtualMachineInstance"): VirtualMachineInstance,
    ("kubevirt.io", "VirtualMachineInstanceMigration"): VirtualMachineInstanceMigration,
    ("migrations.kubevirt.io", "MigrationPolicy"): MigrationPolicy,
    ("", "Node"): Node,
    ("instancetype.kubevirt.io", "VirtualMachineInstancetype"): VirtualMachineInstancetype,
    ("instancetype.kubevirt.io", "VirtualMachineClusterInstancetype"): (
        VirtualMachineClusterInstancetype
    ),
    ("instancetype.kubevirt.io", "VirtualMachinePreference"): VirtualMachinePreference,
    ("instancetype.kubevirt.io", "VirtualMachineClusterPreference"): (
        VirtualMachineClusterPreference
    ),
    ("kubevirt.io", "VirtualMachineInstanceReplicaSet"): VirtualMachineInstanceReplicaSet,
    ("pool.kubevirt.io", "VirtualMachinePool"): VirtualMachinePool,
    ("snapshot.kubevirt.io", "VirtualMachineSnapshot"): VirtualMachineSnapshot,
    ("snapshot.kubevirt.io", "VirtualMachineSnapshotContent"): VirtualMachineSnapshotContent,
    ("snapshot.kubevirt.io", "VirtualMachineRestore"): VirtualMachineRestore,
    ("", "Status"): Status,
}


class ManifestError(ValueError):
    """A document that cannot be read as the object it claims to be."""


def api_group(api_version: str) -> str:
    """ "kubevirt.io/v1" -> "kubevirt.io"; "v1" (core) -> ""."""
    return api_version.rpartition("/")[0]


def object_type(raw: dict[str, Any]) -> type[Any]:
    """The Struct type for a raw document, by its apiVersion group and kind."""
    key = (api_group(str(raw.get("apiVersion", ""))), str(raw.get("kind", "")))
    try:
        return OBJECT_TYPES[key]
    except KeyError:
        raise ManifestError(
            f"no kind {key[1]!r} is registered for version {raw.get('apiVersion')!r}"
        ) from None


def load(raw: dict[str, Any], type_: type[T]) -> T:
    """Typed view of a raw document: strict types, unknown fields ignored (kept by dump)."""
    try:
        return msgspec.convert(raw, type_)
    except msgspec.ValidationError as exc:
        raise ManifestError(str(exc)) from exc


def load_any(raw: dict[str, Any]) -> Any:
    """Typed view of a raw document whose type is given by its apiVersion and kind."""
    return load(raw, object_type(raw))


def dump(obj: Any, raw: dict[str, Any] | None = None) -> dict[str, Any]:
    """Builtins of `obj`, overlaid onto `raw` so unmodelled keys survive.

    Note: overlaying cannot express removal; a modelled field set back to None keeps the
    raw value. Callers that remove fields should drop them from `raw` too.
    """
    typed = msgspec.to_builtins(obj)
    if raw is None:
        return typed
    return _overlay(typed, raw)


def _overlay(typed: Any, raw: Any) -> Any:
    if isinstance(typed, dict) and isinstance(raw, dict):
        merged = dict(raw)
        for key, value in typed.items():
            merged[key] = _overlay(value, raw[key]) if key in raw else value
        return merged
    if isinstance(typed, list) and isinstance(raw, list) and len(typed) == len(raw):
        return [_overlay(t, r) for t, r in zip(typed, raw, strict=True)]
    return typed


class _PlainLoader(yaml.SafeLoader):
    """SafeLoader that keeps timestamps as strings, as they are in Kubernetes' JSON."""


_PlainLoader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag != "tag:yaml.org,2002:timestamp"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}


def yaml_documents(text: str) -> list[dict[str, Any]]:
    """Every non-empty document of a (multi-document) YAML text."""
    docs: list[dict[str, Any]] = []
    for doc in yaml.load_all(text, Loader=_PlainLoader):
        if doc is None:
            continue
        if not isinstance(doc, dict):
            raise ManifestError(f"a manifest must be a mapping, got {type(doc).__name__}")
        docs.append(doc)
    return docs
