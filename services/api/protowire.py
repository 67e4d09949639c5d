"""The protobuf bodies the api reads: kubectl sends `SelfSubjectAccessReview`,
`SelfSubjectRulesReview`, a `Namespace` (`kubectl create namespace`), a `Secret`
(`kubectl create secret`) and a `ConfigMap` (`kubectl create configmap`) (built-in
Kubernetes types) as `application/vnd.kubernetes.protobuf`, with no JSON fallback.
Kubernetes' generated protobuf types are not packaged for Python, so this reads the wire
format (varints and length-delimited fields, all this message uses) into the same JSON
shape the JSON body has."""

from __future__ import annotations

import base64
from typing import Any

MAGIC = b"k8s\x00"  # Kubernetes' protobuf envelope: magic, then runtime.Unknown
RESOURCE_FIELDS = (
    "namespace", "verb", "group", "version", "resource", "subresource", "name",
)  # fmt: skip
NON_RESOURCE_FIELDS = ("path", "verb")


class ProtoError(ValueError):
    pass


def _varint(data: bytes, i: int) -> tuple[int, int]:
    shift = value = 0
    while True:
        if i >= len(data) or shift > 63:
            raise ProtoError("truncated varint")
        b = data[i]
        i += 1
        value |= (b & 0x7F) << shift
        if not b & 0x80:
            return value, i
        shift += 7


def repeated(data: bytes) -> dict[int, list[bytes]]:
    """Field number → every length-delimited value (a repeated field, a map's entries)."""
    out: dict[int, list[bytes]] = {}
    i = 0
    while i < len(data):
        key, i = _varint(data, i)
        number, wire = key >> 3, key & 7
        if wire == 0:
            _, i = _varint(data, i)
        elif wire == 2:
            size, i = _varint(data, i)
            if i + size > len(data):
                raise ProtoError("truncated field")
            out.setdefault(number, []).append(data[i : i + size])
            i += size
        elif wire in (1, 5):
            i += 8 if wire == 1 else 4
        else:
            raise ProtoError(f"unsupported wire type {wire}")
    return out


def fields(data: bytes) -> dict[int, bytes]:
    """Field number → bytes of its last length-delimited value (others are skipped)."""
    return {number: values[-1] for number, values in repeated(data).items()}


def _strings(data: bytes, names: tuple[str, ...]) -> dict[str, str]:
    f = fields(data)
    return {name: f[n].decode() for n, name in enumerate(names, 1) if f.get(n)}


def access_review(body: bytes) -> dict[str, Any]:
    """A protobuf SelfSubjectAccessReview as its JSON document (spec only)."""
    if not body.startswith(MAGIC):
        raise ProtoError("not a Kubernetes protobuf message")
    raw = fields(body[len(MAGIC) :]).get(2, b"")
    spec = fields(fields(raw).get(2, b""))
    out: dict[str, Any] = {}
    if 1 in spec:
        out["resourceAttributes"] = _strings(spec[1], RESOURCE_FIELDS)
    if 2 in spec:
        out["nonResourceAttributes"] = _strings(spec[2], NON_RESOURCE_FIELDS)
    return {"spec": out}


def rules_review_namespace(body: bytes) -> str:
    """A protobuf SelfSubjectRulesReview's `spec.namespace` (its spec's only field)."""
    if not body.startswith(MAGIC):
        raise ProtoError("not a Kubernetes protobuf message")
    raw = fields(body[len(MAGIC) :]).get(2, b"")
    spec = fields(fields(raw).get(2, b""))
    return spec.get(1, b"").decode()


PROTOBUF = "application/vnd.kubernetes.protobuf"
# ObjectMeta's string fields a client sets, by field number (generated.proto)
META_STRINGS = {1: "name", 2: "generateName", 3: "namespace", 5: "uid", 6: "resourceVersion"}
META_LABELS, META_ANNOTATIONS, META_FINALIZERS = 11, 12, 14


def _map(entries: list[bytes]) -> dict[str, str]:
    out = {}
    for entry in entries:
        f = fields(entry)
        out[f.get(1, b"").decode()] = f.get(2, b"").decode()
    return out


def object_meta(data: bytes) -> dict[str, Any]:
    """An ObjectMeta's fields a client writes (names, labels, annotations, finalizers)."""
    f = repeated(data)
    out: dict[str, Any] = {
        name: f[n][-1].decode() for n, name in META_STRINGS.items() if f.get(n) and f[n][-1]
    }
    if f.get(META_LABELS):
        out["labels"] = _map(f[META_LABELS])
    if f.get(META_ANNOTATIONS):
        out["annotations"] = _map(f[META_ANNOTATIONS])
    if f.get(META_FINALIZERS):
        out["finalizers"] = [v.decode() for v in f[META_FINALIZERS]]
    return out


def _object(body: bytes) -> bytes:
    """The object a Kubernetes protobuf body carries (the envelope's `runtime.Unknown`'s
    raw field)."""
    if not body.startswith(MAGIC):
        raise ProtoError("not a Kubernetes protobuf message")
    return fields(body[len(MAGIC) :]).get(2, b"")


def _document(kind: str, f: dict[int, list[bytes]]) -> dict[str, Any]:
    """A core/v1 object's JSON document with its metadata (field 1)."""
    meta = object_meta(f[1][-1]) if f.get(1) else {}
    return {"apiVersion": "v1", "kind": kind, "metadata": meta}


def _base64(entries: list[bytes]) -> dict[str, str]:
    """A map<string, bytes> as JSON carries it: base64 by key."""
    return {k: base64.b64encode(v).decode() for k, v in _bytes_map(entries).items()}


def namespace(body: bytes) -> dict[str, Any]:
    """A protobuf core/v1 Namespace as its JSON document: its metadata (its spec and
    status are the server's)."""
    meta = fields(_object(body)).get(1, b"")
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": object_meta(meta)}


def _varints(data: bytes) -> dict[int, int]:
    """Field number → its last varint value (bools, ints); the other fields skipped."""
    out: dict[int, int] = {}
    i = 0
    while i < len(data):
        key, i = _varint(data, i)
        number, wire = key >> 3, key & 7
        if wire == 0:
            out[number], i = _varint(data, i)
        elif wire == 2:
            size, i = _varint(data, i)
            i += size
        elif wire in (1, 5):
            i += 8 if wire == 1 else 4
        else:
            raise ProtoError(f"unsupported wire type {wire}")
    return out


def _bytes_map(entries: list[bytes]) -> dict[str, bytes]:
    out = {}
    for entry in entries:
        f = fields(entry)
        out[f.get(1, b"").decode()] = f.get(2, b"")
    return out


def secret(body: bytes) -> dict[str, Any]:
    """A protobuf core/v1 Secret (`kubectl create secret generic|tls|docker-registry`) as
    its JSON document: metadata = 1, data = 2 (bytes, base64 in JSON), type = 3,
    stringData = 4, immutable = 5."""
    raw = _object(body)
    f = repeated(raw)
    out = _document("Secret", f)
    if f.get(2):
        out["data"] = _base64(f[2])
    if f.get(3) and f[3][-1]:
        out["type"] = f[3][-1].decode()
    if f.get(4):
        out["stringData"] = _map(f[4])
    flags = _varints(raw)
    if 5 in flags:
        out["immutable"] = bool(flags[5])
    return out


def configmap(body: bytes) -> dict[str, Any]:
    """A protobuf core/v1 ConfigMap (`kubectl create configmap`) as its JSON document:
    metadata = 1, data = 2 (text), binaryData = 3 (bytes, base64 in JSON), immutable = 4."""
    raw = _object(body)
    f = repeated(raw)
    out = _document("ConfigMap", f)
    if f.get(2):
        out["data"] = _map(f[2])
    if f.get(3):
        out["binaryData"] = _base64(f[3])
    flags = _varints(raw)
    if 4 in flags:
        out["immutable"] = bool(flags[4])
    return out


# --------------------------------------------------------------- writing
OPENAPI_V2 = "application/com.github.proto-openapi.spec.v2@v1.0+protobuf"


def _key(number: int, wire: int) -> bytes:
    return _encode_varint((number << 3) | wire)


def _encode_varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _bytes_field(number: int, data: bytes) -> bytes:
    return _key(number, 2) + _encode_varint(len(data)) + data


def openapi_v2(title: str, version: str) -> bytes:
    """An OpenAPI v2 document as gnostic's protobuf (`openapi_v2.Document`: swagger = 1,
    info = 2 with title = 1 and version = 2), without paths or definitions: what kubectl
    reads when the OpenAPI v3 documents lack a kind (`--validate` then skips the kind
    it cannot find, and the kind's mapping says `no matches for kind`)."""
    info = _bytes_field(1, title.encode()) + _bytes_field(2, version.encode())
    return _bytes_field(1, b"2.0") + _bytes_field(2, info)
