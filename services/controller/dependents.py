"""Which of the controller's own objects an event can concern, by index: the replica sets,
pools, snapshots, restores, clones and exports a pass reconciles after an event, without
looking at every one of them (as KubeVirt's informers hand a controller's work queue the
keys an object's change concerns).

- An object of those kinds concerns itself.
- Snapshots, restores, clones and exports name what they depend on, always in their own
  namespace: a source or target VM, a snapshot, a content, a restore, a token Secret. Every
  such name of their spec and status (`name`, `*Name`, `*Ref` fields, and the names
  derived from the object: a snapshot's content, an export's token Secret) is indexed, so
  an event on any aggregate of that namespace and name finds them; the lookup follows
  these references transitively (a content's copy concerns its snapshot, which concerns
  the restores, clones and exports that name it).
- Replica sets and pools select VMs and VMIs by labels and own them by references: an
  event of a VM or VMI concerns those of its namespace (few per namespace, as in KubeVirt,
  whose controllers list the namespace's sets to find an orphan's), and so does a node's
  event for the namespaces of the VMIs it runs.

The names are compared without their kind, which can only add an object to the pass,
never leave one out. The tick still reconciles everything (deadlines, TTLs)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from events.meta import Aggregate, Kind, ResourceKind
from projections.cluster import Cluster, Touched, key
from projections.exports import secret_name
from projections.views import ResourceView

#: the kinds that name what they depend on, and the kinds that select by labels
NAMING = (ResourceKind.SNAPSHOT, ResourceKind.RESTORE, ResourceKind.CLONE, ResourceKind.EXPORT)
SELECTING = (ResourceKind.VMIRS, ResourceKind.VMPOOL)
OWN = (*SELECTING, *NAMING)
Ref = tuple[str, str]  # (resource kind, "ns/name")
DEPTH = 4  # content → snapshot → restore → clone: the longest chain of names


def _names(value: Any, field: str = "") -> Iterator[str]:
    """Every name a manifest part holds in a `name`, `*Name` or `*Ref` field."""
    if isinstance(value, dict):
        for k, v in value.items():
            yield from _names(v, str(k))
    elif isinstance(value, list):
        for v in value:
            yield from _names(v, field)
    elif (
        isinstance(value, str)
        and value
        and (field == "name" or field.endswith("Name") or field.endswith("Ref"))
    ):
        yield value


def references(kind: str, view: ResourceView) -> frozenset[str]:
    """The "ns/name" keys an object of a naming kind depends on. Pure."""
    names = set(_names(view.spec)) | set(_names(view.status))
    if kind == ResourceKind.SNAPSHOT:
        names.add(f"vmsnapshot-content-{view.uid}")
    elif kind == ResourceKind.EXPORT:
        names.add(secret_name(view))
    return frozenset(key(view.namespace, n) for n in names)


class Dependents:
    """The index: a name → the naming objects that depend on it; a namespace → its sets."""

    def __init__(self) -> None:
        self._by_name: dict[str, set[Ref]] = {}
        self._names: dict[Ref, frozenset[str]] = {}
        self._sets: dict[str, set[Ref]] = {}  # namespace → its replica sets and pools
        # a deleted restore's names, until its event is reconciled: the restores onto the
        # same target it held back go on (`concerned`)
        self._released: dict[Ref, frozenset[str]] = {}

    def touched(self, cluster: Cluster, touched: Iterable[Touched]) -> None:
        for kind, k in touched:
            if kind in OWN:
                self._object(kind, k, cluster.resources.get(kind, {}).get(k))

    def rebuild(self, cluster: Cluster) -> None:
        self.__init__()  # type: ignore[misc]
        for kind in OWN:
            for k, view in cluster.resources.get(kind, {}).items():  # (adds no table)
                self._object(kind, k, view)

    def _object(self, kind: str, k: str, view: ResourceView | None) -> None:
        ref = (kind, k)
        if kind in SELECTING:
            ns = k.partition("/")[0]
            if view is None:
                sets = self._sets.get(ns)
                if sets is not None:
                    sets.discard(ref)
                    if not sets:
                        del self._sets[ns]
            else:
                self._sets.setdefault(ns, set()).add(ref)
            return
        old = self._names.pop(ref, frozenset())
        if view is None and kind == ResourceKind.RESTORE:
            self._released[ref] = old
        for name in old:
            deps = self._by_name.get(name)
            if deps is not None:
                deps.discard(ref)
                if not deps:
                    del self._by_name[name]
        if view is not None:
            names = references(kind, view)
            self._names[ref] = names
            for name in names:
                self._by_name.setdefault(name, set()).add(ref)

    def concerned(self, cluster: Cluster, agg: Aggregate) -> set[Ref]:
        """The objects of `OWN` kinds an event of `agg` may change the decision of."""
        k = key(agg.namespace, agg.name)
        out: set[Ref] = set()
        if agg.kind in OWN:
            out.add((agg.kind, k))
        if agg.kind == ResourceKind.RESTORE:
            # restores onto one target go one at a time (`snapshot._restore_ahead`): one's
            # change may let another go, or hold it back
            ref = (agg.kind, k)
            names = self._names.get(ref) or self._released.pop(ref, frozenset())
            for name in names:
                out |= {r for r in self._by_name.get(name, ()) if r[0] == ResourceKind.RESTORE}
        if agg.kind in (Kind.VM, Kind.VMI) or agg.kind in SELECTING:
            out |= self._sets.get(agg.namespace, set())
        elif agg.kind == Kind.NODE:
            for ns in {vmi.namespace for vmi in cluster.vmis_on(agg.name)}:
                out |= self._sets.get(ns, set())
        if k not in self._by_name:
            return out  # (most events) nothing names it
        frontier = {k}
        seen: set[str] = set()
        for _ in range(DEPTH):
            found: set[Ref] = set()
            for name in frontier - seen:
                found |= self._by_name.get(name, set())
            seen |= frontier
            out |= found
            frontier = {ref[1] for ref in found}
            if not frontier - seen:
                break
        return out
