"""ConfigMap (core/v1, namespaced): configuration by key, as the API server keeps it.
Automation creates them beside VMs (`kubectl create configmap`, which sends protobuf:
services/api/protowire.py reads it). Admission is the API server's validation: keys of
the config-key alphabet, no key in both `data` and `binaryData`, at most 1 MiB in all,
and the data of an `immutable` one never changes."""

from __future__ import annotations

import base64
import re
from typing import Any

import msgspec

from core import admission, names
from core.errors import ApiError
from events.objects import KubeObject, ObjectMeta, StatusCause, _always
from kinds.resource import resource_spec
from projections.cluster import Cluster, key

KIND_TOKEN = "configmap"
MAX_BYTES = 1024 * 1024  # the API server's limit on a ConfigMap's data (corev1.MaxSecretSize)
_KEY = re.compile(r"[-._a-zA-Z0-9]+")
KEY_MESSAGE = (
    "a valid config key must consist of alphanumeric characters, '-', '_' or '.' "
    "(e.g. 'key.name',  or 'KEY_NAME',  or 'key-name', regex used for validation is "
    "'[-._a-zA-Z0-9]+')"
)


class ConfigMap(KubeObject):
    """core/v1 ConfigMap: `data` text by key, `binaryData` base64 by key."""

    api_version: str = _always("v1")
    kind: str = _always("ConfigMap")
    metadata: ObjectMeta = msgspec.field(default_factory=ObjectMeta)
    data: dict[str, str] | None = None
    binary_data: dict[str, str] | None = None
    immutable: bool | None = None


def key_errors(name: str) -> list[str]:
    """Kubernetes' IsConfigMapKey: what is wrong with a data key (nothing: [])."""
    errors = []
    if len(name) > 253:
        errors.append("must be no more than 253 characters")
    if not _KEY.fullmatch(name):
        errors.append(KEY_MESSAGE)
    if name in (".", ".."):
        errors.append(f"must not be '{name}'")
    elif name.startswith(".."):
        errors.append("must not start with '..'")
    return errors


def admit_configmap(cluster: Cluster, typed: Any, _uid: str) -> tuple[Any, list[Any]]:
    """`ValidateConfigMap`, refused as the API server refuses a core kind (`ConfigMap "x"
    is invalid: ...`), not as a webhook."""
    name = typed.metadata.name or ""
    causes = admission.validate_name(name, typed.metadata.generate_name)
    if causes:
        return typed, causes
    data: dict[str, str] = typed.data or {}
    binary: dict[str, str] = typed.binary_data or {}
    errors: list[StatusCause] = []
    size = 0
    for field, entries in (("data", data), ("binaryData", binary)):
        for k, v in entries.items():
            errors += [names.invalid(f"{field}[{k}]", k, e) for e in key_errors(k)]
            if field == "data":
                size += len(str(v).encode())
                continue
            try:
                size += len(base64.b64decode(str(v), validate=True))
            except ValueError:
                detail = "illegal base64 data at input byte 0"
                errors.append(names.invalid(f"binaryData[{k}]", k, detail))
    for k in sorted(set(data) & set(binary)):
        errors.append(names.invalid(f"data[{k}]", k, "duplicate of key present in binaryData"))
    if size > MAX_BYTES:
        message = f"Too long: must have at most {MAX_BYTES} bytes"
        errors.append(StatusCause(type="FieldValueTooLong", message=message, field=""))
    old = cluster.resources[KIND_TOKEN].get(key(typed.metadata.namespace or "", name))
    if old is not None and old.manifest.get("immutable"):
        before = old.manifest
        forbidden = "Forbidden: field is immutable when `immutable` is set"
        if (before.get("data") or {}) != data or (before.get("binaryData") or {}) != binary:
            errors.append(StatusCause(type="FieldValueForbidden", message=forbidden, field="data"))
        if not typed.immutable:
            errors.append(
                StatusCause(type="FieldValueForbidden", message=forbidden, field="immutable")
            )
    if errors:
        raise ApiError(names.invalid_object("ConfigMap", "", name, errors))
    return typed, []


SPEC = resource_spec(
    group="",
    version="v1",
    kind="ConfigMap",
    plural="configmaps",
    singular="configmap",
    short_names=("cm",),
    categories=(),
    event_kind=KIND_TOKEN,
    object_type=ConfigMap,
    admit=admit_configmap,
    subresource_group="",
    status_subresource=False,
)
