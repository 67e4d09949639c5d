"""The api's OpenAPI document with its request bodies described.

The routes read raw bodies (JSON or YAML, validated by admission with KubeVirt's messages),
so the framework cannot infer their shape: each kind's create and update take its object
type (the msgspec Struct the api loads), subresources take a JSON object. Clients and API
fuzzers can then build real VMs from `/openapi.json`."""

from __future__ import annotations

import copy
from typing import Any

import msgspec

from core.bodies import YAML_TYPES
from core.names import LABEL_MAX, LABEL_PATTERN, SUBDOMAIN_MAX, SUBDOMAIN_PATTERN
from kinds.registry import Registry

LABEL = {"type": "string", "pattern": f"^{LABEL_PATTERN}$", "maxLength": LABEL_MAX}
SUBDOMAIN = {"type": "string", "pattern": f"^{SUBDOMAIN_PATTERN}$", "maxLength": SUBDOMAIN_MAX}
# A minimal valid object per kind, for readers and for fuzzers' explicit examples.
EXAMPLES: dict[str, JSON] = {
    "VirtualMachine": {
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachine",
        "metadata": {"name": "example"},
        "spec": {
            "runStrategy": "Halted",
            "template": {"spec": {"domain": {"memory": {"guest": "64Mi"}}}},
        },
    },
    "VirtualMachineInstance": {
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachineInstance",
        "metadata": {"name": "example"},
        "spec": {"domain": {"memory": {"guest": "64Mi"}}},
    },
}

JSON = dict[str, Any]
REF = "#/components/schemas/{name}"
_OBJECT: JSON = {"type": "object"}


def _body(schema: JSON, required: bool = True, example: JSON | None = None) -> JSON:
    media: JSON = {"schema": schema}
    if example is not None:
        media["example"] = example
    content = {"application/json": media}
    content.update({t: {"schema": schema} for t in YAML_TYPES[:1]})
    return {"required": required, "content": content}


def _names(paths: JSON) -> None:
    """Path namespaces are DNS labels and names DNS subdomains (what the api accepts)."""
    for item in paths.values():
        for op in item.values():
            for param in op.get("parameters", []) if isinstance(op, dict) else []:
                if param.get("in") == "path" and param.get("name") in ("ns", "name"):
                    param["schema"] = dict(LABEL if param["name"] == "ns" else SUBDOMAIN)


def describe(schema: JSON, kinds: Registry) -> JSON:
    """`schema` (the framework's document) with request bodies for every write route."""
    out = copy.deepcopy(schema)
    types = [spec.object_type for spec in kinds if spec.created or spec.updated]
    refs, components = msgspec.json.schema_components(types, ref_template=REF)
    # What the api checks before anything else: names, namespaces, the object's kind.
    # (A name may also come from `generateName`; the document asks for a name.)
    meta = components.get("ObjectMeta", {})
    props = meta.get("properties", {})
    props.update(name=dict(SUBDOMAIN), namespace=dict(LABEL))
    meta["required"] = ["name"]
    for spec in kinds:
        component = components.get(spec.object_type.__name__, {})
        if "properties" in component:
            component["properties"]["kind"] = {"type": "string", "enum": [spec.kind]}
            component["properties"]["apiVersion"] = {"type": "string", "enum": [spec.api_version]}
            component["required"] = sorted({*component.get("required", []), "metadata"})
    out.setdefault("components", {}).setdefault("schemas", {}).update(components)
    paths: JSON = out.get("paths", {})
    _names(paths)
    for spec, ref in zip([s for s in kinds if s.created or s.updated], refs, strict=True):
        coll = spec.collection_path("{ns}") if spec.namespaced else spec.collection_path()
        if spec.created is not None and (post := paths.get(coll, {}).get("post")):
            post["requestBody"] = _body(ref, example=EXAMPLES.get(spec.kind))
        if spec.updated is not None and (put := paths.get(f"{coll}/{{name}}", {}).get("put")):
            put["requestBody"] = _body(ref)
    for spec in kinds:
        if spec.subresources:
            path = spec.subresource_path("{name}", "{action}", "{ns}")
            for op in paths.get(path, {}).values():
                if isinstance(op, dict) and "responses" in op:
                    op["requestBody"] = _body(_OBJECT, required=False)
    return out
