"""OpenAPI in Kubernetes' own shapes, from the msgspec Structs the api loads: v3 (the
`/openapi/v3` index and one document per group/version) and v2 (`/openapi/v2`, JSON).

kubectl reads them to validate (`apply` asks the server to validate with
`?fieldValidation=Strict` once the PATCH operation of the kind's path lists that
parameter) and to explain (`explain vm.spec.runStrategy` finds the schema by its
`x-kubernetes-group-version-kind`). Pure: a registry in, JSON documents out."""

from __future__ import annotations

import hashlib
from typing import Any

import msgspec

from kinds.registry import Registry
from kinds.spec import KindSpec
from services.api import descriptions, discovery

JSON = dict[str, Any]
V3_REF = "#/components/schemas/{name}"
V2_REF = "#/definitions/{name}"
FIELD_VALIDATION = "fieldValidation"


def _clean(node: Any) -> Any:
    """msgspec's JSON Schema as Kubernetes writes it: optional fields without the
    `anyOf [..., null]`, a `$ref` with siblings wrapped in `allOf`, no titles."""
    if isinstance(node, list):
        return [_clean(n) for n in node]
    if not isinstance(node, dict):
        return node
    out = {k: _clean(v) for k, v in node.items() if k != "title"}
    options = out.get("anyOf")
    if isinstance(options, list):
        kept = [o for o in options if o != {"type": "null"}]
        if len(kept) == 1:
            del out["anyOf"]
            out = {**kept[0], **out}
    if "$ref" in out and len(out) > 1:
        out["allOf"] = [{"$ref": out.pop("$ref")}]
    if out.get("default") is None:
        out.pop("default", None)
    return out


def _gvk(spec: KindSpec) -> JSON:
    return {"group": spec.group, "version": spec.version, "kind": spec.kind}


def _components(specs: list[KindSpec], ref_template: str) -> JSON:
    _, components = msgspec.json.schema_components(
        [s.object_type for s in specs], ref_template=ref_template
    )
    out: JSON = _clean(components)
    return out


def schemas(
    specs: list[KindSpec],
    ref_template: str,
    *,
    describe: bool = True,
    served: list[KindSpec] | None = None,
) -> JSON:
    """The components of the kinds' object types, tagged with their GVK and described
    with KubeVirt's documentation (`services/api/descriptions.py`; paired over every
    `served` kind, `specs` by default)."""
    out = _components(specs, ref_template)
    if describe:
        served = served or specs
        descriptions.describe(
            out,
            _components(served, ref_template) if served is not specs else out,
            _roots(served),
        )
    for spec in specs:  # one type served in several versions lists each
        schema = out.get(spec.object_type.__name__)
        if schema is not None:
            gvks = schema.setdefault("x-kubernetes-group-version-kind", [])
            if _gvk(spec) not in gvks:
                gvks.append(_gvk(spec))
    return out


def _roots(served: list[KindSpec]) -> dict[str, str]:
    """Each type's `group/version/Kind` to describe it by: of the versions it is served
    in, one KubeVirt's vendored documentation has."""
    known = descriptions.vendored()["roots"]
    out: dict[str, str] = {}
    for s in served:
        name, gvk = s.object_type.__name__, f"{s.group}/{s.version}/{s.kind}"
        if name not in out or (out[name] not in known and gvk in known):
            out[name] = gvk
    return out


def _operation(spec: KindSpec, action: str, v2: bool, ref: str) -> JSON:
    params: list[JSON] = []
    if action in ("post", "put", "patch"):
        param: JSON = {"name": FIELD_VALIDATION, "in": "query", "uniqueItems": True}
        if v2:
            param["type"] = "string"
        else:
            param["schema"] = {"type": "string", "uniqueItems": True}
        params.append(param)
    response: JSON = {"description": "OK"}
    if v2:
        response["schema"] = {"$ref": ref}
    else:
        response["content"] = {"application/json": {"schema": {"$ref": ref}}}
    op: JSON = {
        "operationId": f"{action}{spec.kind}",
        "parameters": params,
        "responses": {"200": response},
        "x-kubernetes-action": action,
        "x-kubernetes-group-version-kind": _gvk(spec),
    }
    if action in ("post", "put", "patch") and not v2:
        types = ["application/json"] if action != "patch" else list(_PATCH_TYPES)
        schema = {"$ref": ref} if action != "patch" else {"type": "object"}
        op["requestBody"] = {"content": {t: {"schema": schema} for t in types}}
    return op


_PATCH_TYPES = ("application/json-patch+json", "application/merge-patch+json")


def _paths(specs: list[KindSpec], v2: bool, ref_template: str) -> JSON:
    paths: JSON = {}
    for spec in specs:
        ref = ref_template.format(name=spec.object_type.__name__)
        coll = spec.collection_path("{namespace}") if spec.namespaced else spec.collection_path()
        item_verbs = {"get": "get", "update": "put", "patch": "patch", "delete": "delete"}
        verbs = discovery.verbs(spec)
        paths[coll] = {
            method: _operation(spec, method, v2, ref)
            for verb, method in (("list", "get"), ("create", "post"))
            if verb in verbs
        }
        paths[f"{coll}/{{name}}"] = {
            method: _operation(spec, method, v2, ref)
            for verb, method in item_verbs.items()
            if verb in verbs
        }
    return paths


def _group_specs(kinds: Registry, group: str, version: str) -> list[KindSpec]:
    return [s for s in kinds.served if s.group == group and s.version == version]


def v3_document(kinds: Registry, group: str, version: str) -> JSON | None:
    """`/openapi/v3/apis/{group}/{version}` (`/openapi/v3/api/v1` for the core group)."""
    specs = _group_specs(kinds, group, version)
    if not specs:
        return None
    return {
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes", "version": discovery.VERSION["gitVersion"]},
        "paths": _paths(specs, False, V3_REF),
        "components": {"schemas": schemas(specs, V3_REF, served=list(kinds.served))},
    }


def v3_path(group: str, version: str) -> str:
    return f"apis/{group}/{version}" if group else f"api/{version}"


def v3_index(documents: dict[str, bytes]) -> JSON:
    """`/openapi/v3`: each group/version's document with the hash clients cache it by."""
    return {
        "paths": {
            path: {
                "serverRelativeURL": f"/openapi/v3/{path}?hash="
                + hashlib.sha256(body).hexdigest()[:32].upper()
            }
            for path, body in documents.items()
        }
    }


def v2_document(kinds: Registry) -> JSON:
    specs = list(kinds.served)
    return {
        "swagger": "2.0",
        "info": {"title": "Kubernetes", "version": discovery.VERSION["gitVersion"]},
        "paths": _paths(specs, True, V2_REF),
        "definitions": schemas(specs, V2_REF),
    }


def group_versions(kinds: Registry) -> list[tuple[str, str]]:
    return list(dict.fromkeys((s.group, s.version) for s in kinds.served))
