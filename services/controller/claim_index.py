"""Which VMIs use which claims, kept in step with the controller's fold (as the placement
index is), so a claim's reconciliation asks "is it in use?" without a scan of every VMI and
a VMI's event finds its claims without decoding its manifest again."""

from __future__ import annotations

from collections.abc import Iterable

from events.meta import Kind
from projections import storage
from projections.cluster import Cluster, Touched, key
from projections.views import VMIView


class ClaimIndex:
    def __init__(self) -> None:
        # vmi key → (the packed manifest its claims were read from, its claim keys)
        self._of: dict[str, tuple[bytes, tuple[str, ...]]] = {}
        # claim key "ns/name" → keys of the VMIs that have not ended and name it
        self._users: dict[str, set[str]] = {}

    def touched(self, cluster: Cluster, touched: Iterable[Touched]) -> None:
        for kind, k in touched:
            if kind == Kind.VMI:
                self._vmi(k, cluster.vmis.get(k))

    def rebuild(self, cluster: Cluster) -> None:
        self.__init__()  # type: ignore[misc]
        for k, vmi in cluster.vmis.items():
            self._vmi(k, vmi)

    def _vmi(self, k: str, vmi: VMIView | None) -> None:
        old = self._of.pop(k, None)
        if old is not None:
            for c in old[1]:
                users = self._users.get(c)
                if users is not None:
                    users.discard(k)
                    if not users:
                        del self._users[c]
        if vmi is None or vmi.final:
            return
        packed = vmi.manifest_json
        if old is not None and old[0] is packed:
            claims = old[1]
        else:
            claims = tuple(key(vmi.namespace, c) for c in storage.claims_of(vmi.manifest))
        self._of[k] = (packed, claims)  # none kept too: the next event decodes nothing
        for c in claims:
            self._users.setdefault(c, set()).add(k)

    # ----------------------------------------------------------------- queries
    def claims(self, vmi_key: str) -> tuple[str, ...]:
        """The claim keys a live VMI names."""
        found = self._of.get(vmi_key)
        return found[1] if found is not None else ()

    def users(self, claim_key: str) -> frozenset[str]:
        return frozenset(self._users.get(claim_key, ()))
