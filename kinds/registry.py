"""The registry of resource kinds: every surface (api routes, error names, client paths,
CLI names and tables, time-travel references) looks kinds up here.

A `Registry` is immutable; `with_(spec)` returns a new one, so a test (or a later
extension) builds its app, client or tables from its own registry without touching
`REGISTRY`, which every default uses."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from events.meta import CLUSTER_SCOPE, CLUSTER_SCOPED, Aggregate, Kind
from kinds import instancetype, migration, node, policy, replicas, snapshot, vm, vmi
from kinds.spec import KindSpec, Scope
from projections.cluster import Cluster
from projections.replay import RefError, gone

JSON = dict[str, Any]


class Registry:
    def __init__(self, specs: tuple[KindSpec, ...]) -> None:
        self.specs = specs
        self._by_name: dict[str, KindSpec] = {}
        self._by_kind: dict[str, KindSpec] = {}
        self._by_event_kind: dict[Kind, KindSpec] = {}
        for spec in specs:
            for n in spec.names:
                if n in self._by_name:
                    raise ValueError(f"{n!r} names both {self._by_name[n].kind} and {spec.kind}")
                self._by_name[n] = spec
            self._by_kind[spec.kind] = spec
            # the first spec of an event kind is the one its events render as
            self._by_event_kind.setdefault(spec.event_kind, spec)
            if (spec.scope is Scope.CLUSTER) != (spec.event_kind in CLUSTER_SCOPED):
                raise ValueError(f"{spec.kind}: scope {spec.scope} but events of {spec.event_kind}")
            # a served verb needs its hook: the routes are built from the verbs
            for verb, hook in (("create", spec.created), ("delete", spec.delete)):
                if verb in spec.verbs and hook is None:
                    raise ValueError(f"{spec.kind}: serves {verb} but has no hook for it")

    def with_(self, *specs: KindSpec) -> Registry:
        return Registry((*self.specs, *specs))

    def __iter__(self) -> Iterator[KindSpec]:
        return iter(self.specs)

    # ----------------------------------------------------------------- lookups
    def get(self, name: str) -> KindSpec | None:
        """By any name a user may type (`vms`, `vmi`, `migrations`, ...) or the Kind
        (`VirtualMachine`)."""
        return self._by_name.get(name.lower()) or self._by_kind.get(name)

    def resource(self, name: str) -> KindSpec:
        spec = self.get(name)
        if spec is None:
            raise ValueError(f'the server doesn\'t have a resource type "{name}"')
        return spec

    def of(self, kind: Kind) -> KindSpec:
        """The spec an aggregate kind's events render as."""
        return self._by_event_kind[kind]

    @property
    def updatable(self) -> tuple[str, ...]:
        return tuple(s.plural for s in self.specs if s.updated is not None)

    # --------------------------------------------------------------- read side
    def render_object(self, cluster: Cluster, kind: Kind, k: str, now: float) -> JSON | None:
        """The object as the api serves it (None when it does not exist or is gone)."""
        spec = self.of(kind)
        found = spec.table(cluster).get(k)
        if found is None or gone(found):
            return None
        return spec.render(cluster, found, now)

    def render_all(self, cluster: Cluster, kind: Kind, now: float) -> dict[str, JSON]:
        out: dict[str, JSON] = {}
        for k in sorted(self.of(kind).table(cluster)):
            obj = self.render_object(cluster, kind, k, now)
            if obj is not None:
                out[k] = obj
        return out

    # -------------------------------------------------------------- references
    @property
    def cli_names(self) -> tuple[str, ...]:
        """The name kubectl users type for each kind: the plural short name (`vms`), else
        the plural (`migrationpolicies`)."""
        return tuple(
            next((n for n in s.short_names if n.endswith("s")), s.plural) for s in self.specs
        )

    def parse_kind(self, text: str) -> Kind:
        spec = self.get(text)
        if spec is None:
            raise RefError(f"unknown kind {text!r} (one of {', '.join(self.cli_names)})")
        return spec.event_kind

    def parse_ref(self, text: str, namespace: str | None = None) -> Aggregate:
        """`vm/NS/NAME`, `vmi/NS/NAME`, `migration/NS/NAME`, `node/NAME`, `policy/NAME`;
        with `namespace`, also `vm/NAME` (a namespaced kind in that namespace)."""
        parts = text.split("/")
        if len(parts) == 1:
            raise RefError(
                f"{text!r} names no kind: write KIND/NAME or KIND/NAMESPACE/NAME, "
                f"e.g. vm/{text} or vmi/{text} (node/NAME for a node)"
            )
        kind = self.parse_kind(parts[0])
        if kind in CLUSTER_SCOPED and len(parts) == 2 and parts[1]:
            return Aggregate(kind=kind, namespace=CLUSTER_SCOPE, name=parts[1])
        if kind not in CLUSTER_SCOPED and len(parts) == 3 and all(parts):
            return Aggregate(kind=kind, namespace=parts[1], name=parts[2])
        if kind not in CLUSTER_SCOPED and namespace and len(parts) == 2 and parts[1]:
            return Aggregate(kind=kind, namespace=namespace, name=parts[1])
        shape = f"{kind}/NAME" if kind in CLUSTER_SCOPED else f"{kind}/NAMESPACE/NAME"
        raise RefError(f"{text!r}: expected {shape}")

    def ref_text(self, agg: Aggregate) -> str:
        """An aggregate as the user writes it: `vm/default/vm-cirros`, `node/node-1`."""
        if agg.kind in CLUSTER_SCOPED:
            return f"{agg.kind}/{agg.name}"
        return f"{agg.kind}/{agg.namespace}/{agg.name}"


REGISTRY = Registry(
    (
        vm.SPEC,
        vmi.SPEC,
        migration.SPEC,
        node.SPEC,
        policy.SPEC,
        *instancetype.SPECS,
        *replicas.SPECS,
        *snapshot.SPECS,
    )
)
