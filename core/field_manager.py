"""Field ownership (`metadata.managedFields`) and server-side apply. Pure.

A model of the API server's structured-merge-diff that is faithful where kubectl and
client libraries look, simpler below:
- ownership is per leaf field, per (manager, operation); lists are atomic (one leaf), as
  in KubeVirt's CRDs, which declare no list keys; in metadata only labels and
  annotations are owned;
- an Update (create, PUT, PATCH) gives its manager the leaves whose values it changed and
  takes them from every other manager; a write that changes nothing changes no entry;
- an Apply (`application/apply-patch+yaml`) owns exactly the leaves of its configuration:
  a leaf another manager owns with a different value is a conflict (409, the API
  server's message) unless `force=true`, which takes it; a leaf the manager applied
  before and no longer applies is removed from the object unless another manager owns it.
Not modelled: list items keyed by name, `subresource` entries, versions other than the
object's."""

from __future__ import annotations

import copy
import datetime as dt
from collections.abc import Callable, Iterable
from typing import Any

from core.errors import ApiError, Resource, bad_request
from events.objects import Status, StatusCause, StatusDetails

JSON = dict[str, Any]
Path = tuple[str, ...]
Owner = tuple[str, str]  # (manager, operation)
APPLY, UPDATE = "Apply", "Update"
MANAGER_MAX = 128
_UNOWNED_TOP = ("apiVersion", "kind", "status")
_MISSING = object()

# (previous manifest or None, new manifest, now) -> new manifest with its managedFields
Ownership = Callable[[JSON | None, JSON, float], JSON]


# ------------------------------------------------------------------ field sets
def leaves(obj: JSON) -> set[Path]:
    """The leaf fields an object (or an apply configuration) sets."""
    out: set[Path] = set()
    for key, value in obj.items():
        if key in _UNOWNED_TOP:
            continue
        if key == "metadata":
            if isinstance(value, dict):
                for sub in ("labels", "annotations"):
                    for k in value.get(sub) or {}:
                        out.add(("metadata", sub, k))
            continue
        _walk(value, (key,), out)
    return out


def _walk(value: Any, path: Path, out: set[Path]) -> None:
    if isinstance(value, dict) and value:
        for k, v in value.items():
            _walk(v, (*path, k), out)
    else:
        out.add(path)


def value_at(obj: Any, path: Path) -> Any:
    for part in path:
        if not isinstance(obj, dict) or part not in obj:
            return _MISSING
        obj = obj[part]
    return obj


def _set(obj: JSON, path: Path, value: Any) -> None:
    for part in path[:-1]:
        nxt = obj.get(part)
        if not isinstance(nxt, dict):
            nxt = obj[part] = {}
        obj = nxt
    if value == {} and isinstance(obj.get(path[-1]), dict):
        return  # an empty map applies its presence, not the removal of what is in it
    obj[path[-1]] = copy.deepcopy(value)


def _differs(current: JSON | None, config: JSON, path: Path) -> bool:
    wanted, have = value_at(config, path), value_at(current, path)
    if wanted == {}:
        return not isinstance(have, dict)
    return bool(wanted != have)


def _remove(obj: JSON, path: Path) -> None:
    parents = [obj]
    for part in path[:-1]:
        nxt = parents[-1].get(part)
        if not isinstance(nxt, dict):
            return
        parents.append(nxt)
    parents[-1].pop(path[-1], None)
    for depth in range(len(path) - 1, 0, -1):  # drop the maps the removal emptied
        if parents[depth]:
            break
        parents[depth - 1].pop(path[depth - 1], None)


def to_fields_v1(paths: Iterable[Path]) -> JSON:
    tree: JSON = {}
    for path in sorted(paths):
        node = tree
        for part in path:
            node = node.setdefault(f"f:{part}", {})
    return tree


def from_fields_v1(tree: Any, prefix: Path = ()) -> set[Path]:
    out: set[Path] = set()
    if not isinstance(tree, dict):
        return out
    for key, sub in tree.items():
        if not isinstance(key, str) or not key.startswith("f:"):
            continue  # "k:"/"v:" list keys and "." are not modelled
        path = (*prefix, key[2:])
        below = from_fields_v1(sub, path)
        out |= below or {path}
    return out


def _overlaps(a: Path, b: Path) -> bool:
    n = min(len(a), len(b))
    return a[:n] == b[:n]


# ------------------------------------------------------------- managedFields
def owners(obj: JSON | None) -> dict[Owner, tuple[set[Path], JSON]]:
    """(manager, operation) → (owned leaves, the entry as stored)."""
    out: dict[Owner, tuple[set[Path], JSON]] = {}
    for entry in ((obj or {}).get("metadata") or {}).get("managedFields") or []:
        if isinstance(entry, dict) and isinstance(entry.get("manager"), str):
            owner = (entry["manager"], str(entry.get("operation") or UPDATE))
            out[owner] = (from_fields_v1(entry.get("fieldsV1")), entry)
    return out


def _timestamp(now: float) -> str:
    return dt.datetime.fromtimestamp(int(now), dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _entries(
    before: dict[Owner, tuple[set[Path], JSON]],
    after: dict[Owner, set[Path]],
    api_version: str,
    now: float,
) -> list[JSON]:
    """managedFields from the new ownership; an entry whose fields did not change keeps
    its time (so a no-op write stays a no-op)."""
    out = []
    for owner, paths in after.items():
        if not paths:
            continue
        old = before.get(owner)
        if old is not None and old[0] == paths:
            out.append(old[1])
            continue
        out.append(
            {
                "manager": owner[0],
                "operation": owner[1],
                "apiVersion": api_version,
                "time": _timestamp(now),
                "fieldsType": "FieldsV1",
                "fieldsV1": to_fields_v1(paths),
            }
        )
    return out


def _with_entries(obj: JSON, entries: list[JSON]) -> JSON:
    meta = dict(obj.get("metadata") or {})
    if entries:
        meta["managedFields"] = entries
    else:
        meta.pop("managedFields", None)
    return {**obj, "metadata": meta}


def check_manager(manager: str) -> str:
    if len(manager) > MANAGER_MAX:
        raise bad_request(f"fieldManager: Too long: may not be longer than {MANAGER_MAX}")
    return manager


def tracked_update(manager: str) -> Ownership:
    """An Update by `manager`: it owns what it changed."""

    def own(previous: JSON | None, new: JSON, now: float) -> JSON:
        before = owners(previous)
        old = previous or {}
        changed = {p for p in leaves(new) if value_at(old, p) != value_at(new, p)}
        removed = {p for p in leaves(old) if value_at(new, p) is _MISSING}
        after = {o: {p for p in paths if p not in removed} for o, (paths, _) in before.items()}
        if changed:
            for o, paths in after.items():
                if o[0] != manager:
                    after[o] = {p for p in paths if not any(_overlaps(p, c) for c in changed)}
            mine = after.setdefault((manager, UPDATE), set())
            after[(manager, UPDATE)] = {
                p for p in mine if not any(_overlaps(p, c) for c in changed)
            } | changed
        api_version = str(new.get("apiVersion") or "")
        return _with_entries(new, _entries(before, after, api_version, now))

    return own


def kept(previous: JSON | None, new: JSON, _: float) -> JSON:
    """No manager: the stored entries stay as they were (a write from inside the system)."""
    entries = ((previous or {}).get("metadata") or {}).get("managedFields") or []
    return _with_entries(new, list(entries))


# ------------------------------------------------------------------- apply
def conflict_error(
    res: Resource, name: str, conflicts: list[tuple[str, Path]], api_version: str
) -> ApiError:
    """409 in the API server's words."""

    def field(path: Path) -> str:
        return "".join(f".{p}" for p in path)

    managers = sorted({m for m, _ in conflicts})
    causes = [
        StatusCause(
            type="FieldManagerConflict",
            message=f'conflict with "{m}" using {api_version}',
            field=field(p),
        )
        for m, p in conflicts
    ]
    n = len(conflicts)
    if n == 1:
        m, p = conflicts[0]
        message = (
            f'Apply failed with 1 conflict: conflict with "{m}" using {api_version}: {field(p)}'
        )
    else:
        parts = []
        for m in managers:
            fields = "".join(f"\n- {field(p)}" for mm, p in conflicts if mm == m)
            parts.append(f'conflicts with "{m}" using {api_version}:{fields}')
        message = f"Apply failed with {n} conflicts: " + "\n".join(parts)
    return ApiError(
        Status(
            message=message,
            reason="Conflict",
            code=409,
            details=StatusDetails(
                name=name, group=res.group or None, kind=res.plural, causes=causes
            ),
        )
    )


def apply(
    current: JSON | None,
    config: JSON,
    manager: str,
    force: bool,
    now: float,
    res: Resource,
    name: str,
) -> JSON:
    """The object an Apply of `config` by `manager` makes of `current` (None: it creates
    it), with its managedFields; a conflict is an `ApiError` (409)."""
    api_version = str(config.get("apiVersion") or (current or {}).get("apiVersion") or "")
    before = owners(current)
    wanted = leaves(config)
    conflicts: list[tuple[str, Path]] = []
    taken: set[Path] = set()
    for (m, _), (paths, _) in sorted(before.items()):
        if m == manager:
            continue
        for p in sorted(wanted):
            if any(_overlaps(p, q) for q in paths) and _differs(current, config, p):
                taken.add(p)
                if (m, p) not in conflicts:
                    conflicts.append((m, p))
    if conflicts and not force:
        raise conflict_error(res, name, conflicts, api_version)
    obj: JSON = copy.deepcopy(current) if current is not None else {}
    previous = before.get((manager, APPLY), (set(), {}))[0]
    others = set().union(*(paths for o, (paths, _) in before.items() if o[0] != manager))
    for p in previous - wanted:
        if not any(_overlaps(p, q) for q in others | wanted):
            _remove(obj, p)
    for p in wanted:
        _set(obj, p, value_at(config, p))
    for key in ("apiVersion", "kind"):
        if key in config:
            obj[key] = config[key]
    meta = obj.setdefault("metadata", {})
    for key in ("name", "namespace"):
        given = (config.get("metadata") or {}).get(key)
        if given is not None:
            meta[key] = given
    after: dict[Owner, set[Path]] = {}
    for o, (paths, _) in before.items():
        after[o] = {p for p in paths if not any(_overlaps(p, t) for t in taken)}
    after[(manager, APPLY)] = wanted
    return _with_entries(obj, _entries(before, after, api_version, now))


def from_apply(result: JSON) -> Ownership:
    """An Apply already decided its managedFields: keep them."""

    def own(_: JSON | None, new: JSON, __: float) -> JSON:
        entries = (result.get("metadata") or {}).get("managedFields") or []
        return _with_entries(new, list(entries))

    return own
