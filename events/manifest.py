"""Loading and dumping KubeVirt manifests without losing fields we do not model.

msgspec ignores unknown fields on decode, so the typed view alone would silently drop
whatever KubeVirt users wrote that virtstream does not know. `dump` therefore overlays the
typed view onto the original raw document: unmodelled keys at any depth survive, modelled
ones take the typed (possibly defaulted or mutated) value. Which type a document is, by its
apiVersion and kind, the kind registry says (`kinds.registry.Registry.object_type`).
"""

from __future__ import annotations

from typing import Any, TypeVar

import msgspec
import yaml

T = TypeVar("T")


class ManifestError(ValueError):
    """A document that cannot be read as the object it claims to be."""


def api_group(api_version: str) -> str:
    """ "kubevirt.io/v1" -> "kubevirt.io"; "v1" (core) -> ""."""
    return api_version.rpartition("/")[0]


def load(raw: dict[str, Any], type_: type[T]) -> T:
    """Typed view of a raw document: strict types, unknown fields ignored (kept by dump)."""
    try:
        return msgspec.convert(raw, type_)
    except msgspec.ValidationError as exc:
        raise ManifestError(str(exc)) from exc


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
