"""What the garbage collector would otherwise scan every object for, kept in step with the
controller's fold (as the placement and claim indexes are): the uids that exist, who names
whom in an owner reference, the objects whose deletion has begun, and each VMI's finalized
migrations. An event that may leave dependents without their owner then costs what it
touched, not a walk over the whole cluster.

What it answers equals a scan of the views: a finished, deleted migration exists for none
of it, a node is no object an owner reference can name, a policy's own references are not
followed, and every answer is sorted, so two controllers with the same views decide in the
same order whichever way their index was built (folded event by event, or rebuilt from a
checkpoint)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from events.meta import Kind, KindToken
from projections.cluster import Cluster, Touched
from projections.views import ManifestView, MigrationView

Ref = tuple[KindToken, str]  # (kind, table key)
#: KubeVirt's migration controller keeps a VMI's newest five finalized migrations and
#: deletes the older ones (defaultFinalizedMigrationGarbageCollectionBuffer)
FINALIZED_MIGRATIONS_KEPT = 5


def _exists(view: Any) -> bool:
    return view is not None and not (isinstance(view, MigrationView) and view.gone)


class Ownership:
    def __init__(self) -> None:
        # every existing object (nodes aside) → (its uid, the packed manifest its owners
        # and mark were read from: reused while the view keeps that object)
        self._seen: dict[Ref, tuple[str, bytes]] = {}
        self._live: dict[str, int] = {}  # uid → how many existing objects carry it
        self._owners: dict[Ref, tuple[str, ...]] = {}  # existing objects that name owners
        self._by_owner: dict[str, set[Ref]] = {}  # owner uid → the objects naming it
        self.orphans: set[Ref] = set()  # objects none of whose owners exists
        self.marked: set[Ref] = set()  # objects whose deletion has begun
        # (namespace, VMI name) → its finalized, undeleted migrations' keys
        self._finalized: dict[tuple[str, str], set[str]] = {}
        self._counted: dict[str, tuple[str, str]] = {}  # migration key → its VMI there
        self._surplus: set[tuple[str, str]] = set()  # VMIs with more than they keep

    # ------------------------------------------------------------------ upkeep
    def touched(self, cluster: Cluster, touched: Iterable[Touched]) -> None:
        for kind, k in touched:
            if kind == Kind.NODE:
                continue
            view = cluster.table(kind).get(k)
            old = self._seen.get((kind, k))
            if (
                old is None
                or view is None
                or old[1] is not view.manifest_json
                or old[0] != view.uid
            ):
                self._object(kind, k, view)
            elif isinstance(view, MigrationView) and (
                view.gone or (view.final and not view.deleted) != (k in self._counted)
            ):
                self._object(kind, k, view)  # its metadata unchanged, not its phase
            # else (most events): the same object, its metadata unchanged

    def rebuild(self, cluster: Cluster) -> None:
        self.__init__()  # type: ignore[misc]
        for kind, table in cluster.object_tables():
            for k, view in table.items():
                self._object(kind, k, view)

    def _object(self, kind: KindToken, k: str, view: Any) -> None:
        ref = (kind, k)
        old = self._seen.get(ref)
        if not _exists(view):
            if old is not None:
                del self._seen[ref]
                self._set_owners(ref, ())
                self._unlive(old[0])
                self.marked.discard(ref)
            if kind == Kind.MIGRATION:
                self._migration(k, None)
            return
        assert isinstance(view, ManifestView)
        uid = getattr(view, "uid", "")
        packed = view.manifest_json
        if old is None or old[0] != uid:
            if old is not None:
                self._unlive(old[0])
            self._enliven(uid)
        if old is None or old[1] is not packed:
            # a policy's owner references are not followed (as the scan never did)
            self._set_owners(ref, () if kind == Kind.POLICY else tuple(view.owners))
            if view.marked:
                self.marked.add(ref)
            else:
                self.marked.discard(ref)
        self._seen[ref] = (uid, packed)
        if isinstance(view, MigrationView):
            self._migration(k, view)

    def _enliven(self, uid: str) -> None:
        if not uid:
            return
        self._live[uid] = self._live.get(uid, 0) + 1
        if self._live[uid] == 1:
            for ref in self._by_owner.get(uid, ()):
                self.orphans.discard(ref)

    def _unlive(self, uid: str) -> None:
        if not uid:
            return
        left = self._live.pop(uid) - 1
        if left:
            self._live[uid] = left
            return
        for ref in self._by_owner.get(uid, ()):
            if not any(u in self._live for u in self._owners[ref]):
                self.orphans.add(ref)

    def _set_owners(self, ref: Ref, owners: tuple[str, ...]) -> None:
        for uid in self._owners.pop(ref, ()):
            refs = self._by_owner.get(uid)
            if refs is not None:
                refs.discard(ref)
                if not refs:
                    del self._by_owner[uid]
        self.orphans.discard(ref)
        if not owners:
            return
        self._owners[ref] = owners
        for uid in owners:
            self._by_owner.setdefault(uid, set()).add(ref)
        if not any(u in self._live for u in owners):
            self.orphans.add(ref)

    def _migration(self, k: str, mig: MigrationView | None) -> None:
        vmi = self._counted.pop(k, None)
        if vmi is not None:
            self._finalized[vmi].discard(k)
            self._recount(vmi)
        if mig is not None and mig.final and not mig.deleted:
            vmi = (mig.namespace, mig.vmi_name)
            self._counted[k] = vmi
            self._finalized.setdefault(vmi, set()).add(k)
            self._recount(vmi)

    def _recount(self, vmi: tuple[str, str]) -> None:
        keys = self._finalized[vmi]
        if len(keys) > FINALIZED_MIGRATIONS_KEPT:
            self._surplus.add(vmi)
        else:
            self._surplus.discard(vmi)
            if not keys:
                del self._finalized[vmi]

    # ----------------------------------------------------------------- queries
    def live(self, uid: str) -> bool:
        """An existing object carries `uid`."""
        return uid in self._live

    def dependents(self, uid: str) -> list[Ref]:
        """The objects an owner reference of which names `uid`, sorted."""
        return sorted(self._by_owner.get(uid, ()))

    def finalized_surplus(self, cluster: Cluster) -> Iterator[MigrationView]:
        """Each VMI's finalized, undeleted migrations beyond its newest five, oldest first."""
        for vmi in sorted(self._surplus):
            migs = [cluster.migrations[k] for k in self._finalized[vmi]]
            migs.sort(key=lambda m: (m.created_at, m.name))
            yield from migs[:-FINALIZED_MIGRATIONS_KEPT]
