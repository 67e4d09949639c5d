"""KubeVirt's field descriptions on the api's OpenAPI schemas (what `kubectl explain`
shows), from the vendored `kubevirt_descriptions.json` (`ops/vendor_descriptions.py` makes
it from KubeVirt's swagger.json).

The api's schemas come from its msgspec Structs, whose type names are not KubeVirt's, so
the two are paired by shape: each kind's root schema with KubeVirt's definition of that
kind, then property by property down the references both sides make. Pure: schemas in,
described schemas out."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from functools import cache
from pathlib import Path
from typing import Any

JSON = dict[str, Any]
DATA = Path(__file__).with_name("kubevirt_descriptions.json")


@cache
def vendored() -> JSON:
    data: JSON = json.loads(DATA.read_text())
    return data


def _ref(schema: Any) -> str | None:
    """The component a property's schema refers to (directly, as items or map values,
    through allOf/anyOf), by name."""
    if not isinstance(schema, dict):
        return None
    if isinstance(schema.get("$ref"), str):
        return str(schema["$ref"]).rsplit("/", 1)[-1]
    for key in ("items", "additionalProperties"):
        if (found := _ref(schema.get(key))) is not None:
            return found
    for key in ("allOf", "anyOf", "oneOf"):
        for sub in schema.get(key) or ():
            if (found := _ref(sub)) is not None:
                return found
    return None


def _set(schema: JSON, text: str) -> None:
    """A description beside a `$ref` goes with the ref wrapped in allOf, as Kubernetes
    writes it."""
    if not text:
        return
    if "$ref" in schema:
        schema["allOf"] = [{"$ref": schema.pop("$ref")}]
    schema["description"] = text


def pairs(
    components: JSON,
    roots: list[tuple[str, str]],
    targets: Callable[[str], Mapping[str, str] | None],
) -> dict[str, str]:
    """Our component → KubeVirt's definition, walked from the kinds' roots (in order) down
    the properties both sides refer through (by name, in name order); `targets(theirs)`:
    each property of KubeVirt's definition → the definition it refers to ("" for none).
    A component met again (one Struct serving two of KubeVirt's types) keeps its first
    pairing. The vendoring script walks KubeVirt's full swagger with this same function,
    so the data holds exactly the definitions this walk reaches."""
    out: dict[str, str] = {}
    pending = list(reversed(roots))
    while pending:
        mine, theirs = pending.pop()
        if mine in out or mine not in components:
            continue
        found = targets(theirs)
        if found is None:
            continue
        out[mine] = theirs
        props = components[mine].get("properties") or {}
        children = [
            (child, target)
            for name, target in sorted(found.items())
            if target and (child := _ref(props.get(name))) is not None
        ]
        pending.extend(reversed(children))
    return out


def vendored_pairs(components: JSON, roots: Mapping[str, str], data: JSON) -> dict[str, str]:
    """`pairs` over the vendored data; `roots`: our root component of each kind → its
    `group/version/Kind`."""
    definitions: JSON = data["definitions"]

    def targets(theirs: str) -> Mapping[str, str] | None:
        found = definitions.get(theirs)
        return None if found is None else {k: v[1] for k, v in found["properties"].items()}

    known = [(mine, data["roots"][gvk]) for mine, gvk in roots.items() if gvk in data["roots"]]
    return pairs(components, known, targets)


def describe(
    components: JSON, all_components: JSON, roots: Mapping[str, str], data: JSON | None = None
) -> None:
    """Set KubeVirt's descriptions on `components` in place. The pairing is made on
    `all_components` with `roots` of every served kind, so that the document of one
    group/version describes a type it shares with another as the whole API does."""
    data = data or vendored()
    for mine, theirs in vendored_pairs(all_components, roots, data).items():
        schema = components.get(mine)
        if schema is None:
            continue
        definition = data["definitions"][theirs]
        if definition["description"]:
            schema["description"] = definition["description"]
        for name, (text, _) in definition["properties"].items():
            prop = (schema.get("properties") or {}).get(name)
            if isinstance(prop, dict):
                _set(prop, text)
