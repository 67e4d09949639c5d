"""Vendor KubeVirt's field descriptions for `kubectl explain`.

    python -m ops.vendor_descriptions path/to/kubevirt/api/openapi-spec/swagger.json [REV]

KubeVirt documents every field of its API in `api/openapi-spec/swagger.json` (generated
from the Go types' comments). The api serves OpenAPI built from its own msgspec Structs,
which name their types differently (`Domain` for `v1.DomainSpec`); what the two share is
the shape: a kind's root definition and the property names below it. This script walks
both from each served kind's root (KubeVirt's definition is the one its GET path answers;
a version KubeVirt no longer serves takes the kind's definition in another version of the
group) and keeps, for every KubeVirt definition reached, its description and those of the
properties the Structs have, with the definition each property refers to. The result,
`services/api/kubevirt_descriptions.json`, is data the api reads (`services/api/
descriptions.py` walks the same way at start); nothing else of KubeVirt is copied. Run it
again when the Structs gain fields or KubeVirt's documentation changes."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from kinds.registry import REGISTRY, Registry
from services.api import descriptions, openapi_k8s

JSON = dict[str, Any]
OUT = Path(__file__).resolve().parents[1] / "services" / "api" / "kubevirt_descriptions.json"


def refs(schema: Any) -> Iterator[str]:
    """The definitions a property's schema refers to (directly, as items, as map values,
    through allOf/anyOf), by name."""
    if not isinstance(schema, dict):
        return
    if isinstance(schema.get("$ref"), str):
        yield schema["$ref"].rsplit("/", 1)[-1]
    for key in ("items", "additionalProperties"):
        yield from refs(schema.get(key))
    for key in ("allOf", "anyOf", "oneOf"):
        for sub in schema.get(key) or ():
            yield from refs(sub)


def roots(swagger: JSON, kinds: Registry) -> dict[str, str]:
    """`group/version/Kind` → KubeVirt's definition of each served KubeVirt kind."""
    paths: JSON = swagger["paths"]
    by_kind: dict[tuple[str, str], str] = {}
    for path, ops in paths.items():
        ref = (((ops.get("get") or {}).get("responses") or {}).get("200") or {}).get("schema")
        kind = ((ops.get("get") or {}).get("x-kubernetes-group-version-kind") or {}).get("kind")
        name = next(refs(ref), None)
        if name and path.endswith("/{name}") and path.startswith("/apis/"):
            group = path.split("/")[2]
            by_kind.setdefault((group, kind or name.rsplit(".", 1)[-1]), name)
    out: dict[str, str] = {}
    for spec in kinds:
        if not spec.group:
            continue
        base = f"/apis/{spec.group}/{spec.version}"
        item = (
            f"{base}/namespaces/{{namespace}}/{spec.plural}/{{name}}"
            if spec.namespaced
            else f"{base}/{spec.plural}/{{name}}"
        )
        exact = next(refs(((paths.get(item, {}).get("get") or {}).get("responses") or {})
                          .get("200", {}).get("schema")), None)  # fmt: skip
        found = exact or by_kind.get((spec.group, spec.kind))
        if found:
            out[f"{spec.group}/{spec.version}/{spec.kind}"] = found
    return out


def vendored(swagger: JSON, kinds: Registry) -> JSON:
    definitions: JSON = swagger["definitions"]
    specs = [s for s in kinds if s.group]
    ours = openapi_k8s.schemas(specs, openapi_k8s.V2_REF, describe=False)
    found = roots(swagger, kinds)
    known = [
        (spec.object_type.__name__, found[gvk])
        for spec in specs
        if (gvk := f"{spec.group}/{spec.version}/{spec.kind}") in found
    ]

    def targets(theirs: str) -> dict[str, str] | None:
        definition = definitions.get(theirs)
        if definition is None:
            return None
        return {
            name: next(refs(schema), "")
            for name, schema in (definition.get("properties") or {}).items()
        }

    kept: dict[str, JSON] = {}
    for mine, theirs in descriptions.pairs(ours, known, targets).items():
        definition = definitions[theirs]
        their_props: JSON = definition.get("properties") or {}
        kept[theirs] = {
            "description": definition.get("description", ""),
            "properties": {
                name: [their_props[name].get("description", ""), next(refs(their_props[name]), "")]
                for name in sorted(ours[mine].get("properties") or {})
                if name in their_props
            },
        }
    return {"roots": found, "definitions": dict(sorted(kept.items()))}


def main(argv: list[str]) -> None:
    if not argv:
        sys.exit(__doc__)
    swagger = json.loads(Path(argv[0]).read_text())
    doc = {
        "source": "kubevirt/kubevirt api/openapi-spec/swagger.json"
        + (f" at {argv[1]}" if len(argv) > 1 else ""),
        **vendored(swagger, REGISTRY),
    }
    OUT.write_text(json.dumps(doc, indent=1, sort_keys=False, ensure_ascii=False) + "\n")
    print(f"{OUT}: {len(doc['definitions'])} definitions, {len(doc['roots'])} kinds")


if __name__ == "__main__":
    main(sys.argv[1:])
