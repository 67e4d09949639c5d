"""Which fields of a raw manifest the typed object does not model: the paths the api
reports, as Kubernetes does for fields outside the schema (`spec.frobnicate`,
`spec.template.spec.volumes[0].frob`). Pure; the schema is the Structs of `events.objects`,
compiled once per type from msgspec's type info into plain tuples (the walk runs on every
create and update)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from msgspec import inspect as mi

# A compiled node: None (a leaf: any value), ("struct", {json name: node}),
# ("list", node) or ("map", node) (a free-form map: any key, values of node).
Node = tuple[str, Any] | None

_STRUCTS: dict[type[Any], tuple[str, dict[str, Node]]] = {}


def unknown_fields(raw: dict[str, Any], type_: type[Any]) -> list[str]:
    """The dotted paths of `raw`'s keys that `type_` has no field for, in document order."""
    node = _STRUCTS.get(type_) or _compile(mi.type_info(type_))
    return list(_walk(raw, node, ""))


def prepare(types: Iterable[type[Any]]) -> None:
    """Compile these types now (a server's start), not on the first document of each: the
    whole registry's is ~50 ms, which the first create of a kind would otherwise wait."""
    for type_ in types:
        if type_ not in _STRUCTS:
            _compile(mi.type_info(type_))


def _compile(info: mi.Type) -> Node:
    match info:
        case mi.StructType():
            found = _STRUCTS.get(info.cls)
            if found is None:
                fields: dict[str, Node] = {}
                found = _STRUCTS[info.cls] = ("struct", fields)  # before the fields: cycles
                for f in info.fields:
                    fields[f.encode_name] = _compile(f.type)
            return found
        case mi.ListType() | mi.VarTupleType() | mi.SetType():
            item = _compile(info.item_type)
            return None if item is None else ("list", item)
        case mi.DictType():
            value = _compile(info.value_type)
            return None if value is None else ("map", value)
        case mi.UnionType():
            # a member with a shape (None and scalars have no fields to check)
            shaped = [n for n in (_compile(t) for t in info.types) if n is not None]
            return shaped[0] if len(shaped) == 1 else None
    return None


def _walk(value: Any, node: Node, path: str) -> Iterator[str]:
    if node is None:
        return
    shape, sub = node
    if shape == "struct" and type(value) is dict:
        for key, item in value.items():
            name = f"{path}.{key}" if path else str(key)
            if key not in sub:
                yield name
            elif sub[key] is not None:
                yield from _walk(item, sub[key], name)
    elif shape == "list" and type(value) is list:
        for i, item in enumerate(value):
            yield from _walk(item, sub, f"{path}[{i}]")
    elif shape == "map" and type(value) is dict:
        for key, item in value.items():
            yield from _walk(item, sub, f"{path}.{key}" if path else str(key))


__all__ = ["prepare", "unknown_fields"]
