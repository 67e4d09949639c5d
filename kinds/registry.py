"""The registry of resource kinds: every surface (api routes, error names, client paths,
CLI names and tables, time-travel references, the object types of manifests) looks kinds
up here.

A `Registry` is immutable; `with_(spec)` returns a new one, so a test (or a later
extension) builds its app, client or tables from its own registry without touching
`REGISTRY`, which every default uses.

A generic kind (the Resource* events, `kinds.resource.resource_spec`) is its module and
its entry here, nothing more: its event kind is the subject token its spec declares, and
the fold keeps its views by that token (`Cluster.resources`)."""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from typing import Any

from events.manifest import ManifestError, api_group, load
from events.meta import CLUSTER_SCOPE, CLUSTER_SCOPED, Aggregate, KindToken, own_kind
from events.objects import Status
from kinds import (
    clone,
    configmap,
    dataimportcron,
    event,
    export,
    instancetype,
    migration,
    nad,
    namespace,
    node,
    pod,
    policy,
    preset,
    replicas,
    service,
    snapshot,
    storage,
    vm,
    vmi,
)
from kinds.spec import KindSpec, Scope, Version
from projections import kube_events
from projections.cluster import Cluster
from projections.evolve import evolve_resource
from projections.replay import RefError, gone

JSON = dict[str, Any]
# documents a client reads that are no resource kind: (API group, kind) → type
DOCUMENT_TYPES: dict[tuple[str, str], type[Any]] = {("", "Status"): Status}
# a subject token (events/subjects.py leaves it as it is): no dot, no wildcard
_TOKEN = re.compile(r"[a-z][a-z0-9-]*")


class Registry:
    def __init__(self, specs: tuple[KindSpec, ...]) -> None:
        self.specs = specs
        # every kind in every version it is served in, each kind's storage version first
        self.served: tuple[KindSpec, ...] = tuple(
            s.at(v.name) for s in specs for v in _storage_first(s)
        )
        self._by_name: dict[str, KindSpec] = {}
        self._by_kind: dict[str, KindSpec] = {}
        self._by_event_kind: dict[KindToken, KindSpec] = {}
        self._types: dict[tuple[str, str], type[Any]] = dict(DOCUMENT_TYPES)
        for spec in specs:
            for n in spec.names:
                other = self._by_name.get(n)
                if other is not None and other.event_kind != spec.event_kind:
                    raise ValueError(f"{n!r} names both {other.kind} and {spec.kind}")
                # another version of one kind (Events in two groups): the first is named
                self._by_name.setdefault(n, spec)
            self._by_kind.setdefault(spec.kind, spec)
            self._types.setdefault((spec.group, spec.kind), spec.object_type)
            # the first spec of an event kind is the one its events render as
            first = self._by_event_kind.setdefault(spec.event_kind, spec)
            _check_events(spec, first)
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

    def of(self, kind: KindToken) -> KindSpec:
        """The spec an aggregate kind's events render as."""
        return self._by_event_kind[kind]

    @property
    def event_kinds(self) -> tuple[KindToken, ...]:
        """Every aggregate kind a registered kind renders, in registration order."""
        return tuple(self._by_event_kind)

    # ----------------------------------------------------------- object types
    @property
    def types(self) -> Mapping[tuple[str, str], type[Any]]:
        """(API group, kind) → the Struct its documents load as: every kind's, and the
        documents that are no kind (a `Status`)."""
        return self._types

    def object_type(self, raw: JSON) -> type[Any]:
        """The Struct for a raw document, by its apiVersion's group and its kind."""
        key = (api_group(str(raw.get("apiVersion", ""))), str(raw.get("kind", "")))
        found = self._types.get(key)
        if found is None:
            raise ManifestError(
                f"no kind {key[1]!r} is registered for version {raw.get('apiVersion')!r}"
            )
        return found

    def load(self, raw: JSON) -> Any:
        """The typed view of a raw document whose type its apiVersion and kind give."""
        return load(raw, self.object_type(raw))

    @property
    def updatable(self) -> tuple[str, ...]:
        return tuple(s.plural for s in self.specs if s.updated is not None)

    # --------------------------------------------------------------- read side
    def render_object(self, cluster: Cluster, kind: KindToken, k: str, now: float) -> JSON | None:
        """The object as the api serves it (None when it does not exist or is gone)."""
        spec = self.of(kind)
        found = spec.table(cluster).get(k)
        if found is None or gone(found):
            return None
        return spec.render(cluster, found, now)

    def render_all(self, cluster: Cluster, kind: KindToken, now: float) -> dict[str, JSON]:
        out: dict[str, JSON] = {}
        for k in sorted(self.of(kind).table(cluster)):
            obj = self.render_object(cluster, kind, k, now)
            if obj is not None:
                out[k] = obj
        return out

    # -------------------------------------------------------------- references
    @property
    def cli_names(self) -> tuple[str, ...]:
        """The name kubectl users type for each kind of the log's aggregates: the plural
        short name (`vms`), else the plural (`migrationpolicies`). Events are derived, no
        aggregate: references (replay, why, at) never name them."""
        return tuple(
            next((n for n in s.short_names if n.endswith("s")), s.plural)
            for s in self.specs
            if self._refers(s)
        )

    def _refers(self, spec: KindSpec) -> bool:
        """Whether the kind names aggregates of its own: not the Events (derived), nor a
        view of another kind's aggregates (pods of the VMIs, endpoints of the Services)."""
        return spec.event_kind != kube_events.KIND and self._by_event_kind[spec.event_kind] is spec

    def parse_kind(self, text: str) -> KindToken:
        return self._ref_spec(text).event_kind

    def _ref_spec(self, text: str) -> KindSpec:
        spec = self.get(text)
        if spec is None or not self._refers(spec):
            raise RefError(f"unknown kind {text!r} (one of {', '.join(self.cli_names)})")
        return spec

    def parse_ref(self, text: str, namespace: str | None = None) -> Aggregate:
        """`vm/NS/NAME`, `vmi/NS/NAME`, `migration/NS/NAME`, `node/NAME`, `policy/NAME`;
        with `namespace`, also `vm/NAME` (a namespaced kind in that namespace)."""
        parts = text.split("/")
        if len(parts) == 1:
            raise RefError(
                f"{text!r} names no kind: write KIND/NAME or KIND/NAMESPACE/NAME, "
                f"e.g. vm/{text} or vmi/{text} (node/NAME for a node)"
            )
        spec = self._ref_spec(parts[0])
        kind, scoped = spec.event_kind, spec.namespaced
        if not scoped and len(parts) == 2 and parts[1]:
            return Aggregate(kind=kind, namespace=CLUSTER_SCOPE, name=parts[1])
        if scoped and len(parts) == 3 and all(parts):
            return Aggregate(kind=kind, namespace=parts[1], name=parts[2])
        if scoped and namespace and len(parts) == 2 and parts[1]:
            return Aggregate(kind=kind, namespace=namespace, name=parts[1])
        shape = f"{kind}/NAMESPACE/NAME" if scoped else f"{kind}/NAME"
        raise RefError(f"{text!r}: expected {shape}")

    def ref_text(self, agg: Aggregate) -> str:
        """An aggregate as the user writes it: `vm/default/vm-cirros`, `node/node-1`."""
        if agg.cluster_scoped:
            return f"{agg.kind}/{agg.name}"
        return f"{agg.kind}/{agg.namespace}/{agg.name}"


def _storage_first(spec: KindSpec) -> list[Version]:
    served = spec.served
    storage = [v for v in served if v.storage]
    if len(storage) != 1 or storage[0].name != spec.version:
        raise ValueError(f"{spec.kind}: its version {spec.version} must be its one storage version")
    if len({v.name for v in served}) != len(served):
        raise ValueError(f"{spec.kind}: a version is declared twice")
    return [*storage, *(v for v in served if not v.storage)]


def _check_events(spec: KindSpec, first: KindSpec) -> None:
    """A kind's events: an aggregate kind of its own, at its scope, or the generic fold's
    under a subject token; every kind of one aggregate kind at one scope."""
    own = own_kind(spec.event_kind)
    if spec.event_kind == kube_events.KIND:
        if not set(spec.verbs) <= {"get", "list", "watch"}:
            raise ValueError(f"{spec.kind}: the Event records are derived: read only")
    elif own is None:
        if spec.evolve is not evolve_resource:
            raise ValueError(
                f"{spec.kind}: {spec.event_kind!r} has no events of its own: a generic kind "
                "folds the Resource* events (kinds.resource.resource_spec)"
            )
        if _TOKEN.fullmatch(spec.event_kind) is None:
            raise ValueError(f"{spec.kind}: {spec.event_kind!r} is no subject token ([a-z0-9-])")
    elif (spec.scope is Scope.CLUSTER) != (own in CLUSTER_SCOPED):
        raise ValueError(f"{spec.kind}: scope {spec.scope} but events of {spec.event_kind}")
    if spec.scope is not first.scope:
        raise ValueError(f"{spec.kind}: scope {spec.scope} but {first.kind} is {first.scope}")


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
        namespace.SPEC,
        *clone.SPECS,
        *export.SPECS,
        *storage.SPECS,
        dataimportcron.SPEC,
        preset.SPEC,
        *event.SPECS,
        pod.SPEC,
        *service.SPECS,
        nad.SPEC,
        configmap.SPEC,
    )
)
