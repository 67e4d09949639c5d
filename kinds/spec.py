"""What a resource kind is, once: its names, scope, verbs, subresources, printer columns,
and the hooks (admission, events, fold, render) the api, the client and the CLI derive
their tables from. The commands (`core/`, below this package) see a kind through
`core.kind.KindRules`, which `KindSpec` implements; a subresource is the core's
`core.kind.Subresource`."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from enum import StrEnum
from typing import Any

import msgspec

from core.errors import Resource
from core.kind import Act, SpecRefusal, Subresource
from core.names import NameRule
from events.catalog import Event
from events.envelope import Stored
from events.meta import KindToken, Meta
from kinds.columns import DEFAULT_PRINTER_COLUMNS, Column, PrinterColumn, table_of
from projections.cluster import Cluster

JSON = dict[str, Any]


class Scope(StrEnum):
    """A CRD's `spec.scope`."""

    NAMESPACED = "Namespaced"
    CLUSTER = "Cluster"


class Version(msgspec.Struct, frozen=True, kw_only=True):
    """One version a kind is served in (a CRD's `spec.versions[]`). The log keeps every
    object in the kind's storage version; a request in another version is converted on
    its way in (`to_storage`) and every answer on its way out (`from_storage`), through
    the storage version as a conversion webhook's hub. Without them the schemas are the
    same and only `apiVersion` changes (KubeVirt's `None` conversion strategy)."""

    name: str
    storage: bool = False
    # the `Warning` every request in this version is answered with (a deprecated version)
    deprecation_warning: str | None = None
    to_storage: Callable[[JSON], JSON] | None = None
    from_storage: Callable[[JSON], JSON] | None = None


_PRIORITY = re.compile(r"v(\d+)(?:(alpha|beta)(\d+))?")


def version_priority(name: str) -> tuple[int, int, int, str]:
    """Kubernetes' order of versions (a sort key, first is preferred): GA before beta
    before alpha, a higher number first, anything else last by name."""
    m = _PRIORITY.fullmatch(name)
    if m is None:
        return (3, 0, 0, name)
    stage = {None: 0, "beta": 1, "alpha": 2}[m.group(2)]
    return (stage, -int(m.group(1)), -int(m.group(3) or 0), name)


Admit = Callable[[Cluster, Any, str], tuple[Any, list[Any]]]
Made = Callable[[Meta, JSON], Event]  # the event a create or update appends
Delete = Act  # (cluster, namespace, name, args, context) → Outcome
Render = Callable[[Cluster, Any, float], JSON]


class KindSpec(msgspec.Struct, frozen=True, kw_only=True):
    """One resource kind.

    `name_rule` and `runs_launcher` are the API server's checks of where an object lives
    (names and namespaces, before anything else runs);
    `admit(cluster, typed, uid) -> (typed, causes)` defaults then validates (the webhooks);
    `created` / `updated` build the event a create / update appends (None: the verb is
    refused: a create route is not served; an update that changes more than metadata
    answers as `spec_refusal` says, KubeVirt's webhook for an immutable spec);
    `delete` is the pure delete intent. `table` and `render` are how the read side
    lists and serves it; `evolve` is the pure fold of its own events (`Cluster.apply` adds
    the joins between kinds)."""

    group: str  # "" for the core group
    version: str  # the version this spec serves: the storage version for a registered kind
    kind: str
    plural: str
    singular: str
    short_names: tuple[str, ...] = ()
    aliases: tuple[str, ...] = ()  # virtstream's extra CLI names (`migration`, `policy`)
    categories: tuple[str, ...] = ()
    scope: Scope = Scope.NAMESPACED
    verbs: tuple[str, ...] = ("get", "list", "watch", "create", "update", "delete")
    event_kind: KindToken
    object_type: type[Any]
    subresource_group: str = "subresources.kubevirt.io"
    name_rule: NameRule = NameRule.SUBDOMAIN  # what the API server checks its names against
    runs_launcher: bool = False  # `<ns>_<name>` names a launcher socket: a length limit
    subresources: tuple[Subresource, ...] = ()
    # GET subresources the api relays from the node (console and vnc are WebSockets);
    # listed in discovery and authorized like the others, served by services/api/streams.py
    streams: tuple[str, ...] = ()
    printer_columns: tuple[PrinterColumn, ...] = ()
    # `virtstream get`'s table when it is not NAME and the printer columns (`table_columns`
    # derives it from them): nodes print kubectl's node STATUS
    columns: tuple[Column, ...] = ()
    admit: Admit | None = None
    created: Callable[[Meta, JSON], Event] | None = None
    updated: Callable[[Meta, JSON], Event] | None = None
    # without `updated`: how a changed spec is refused (metadata changes on every kind)
    spec_refusal: SpecRefusal | None = None
    delete: Delete | None = None
    table: Callable[[Cluster], Mapping[str, Any]]
    render: Render
    evolve: Callable[[Any, Stored], Any] | None = None
    # another version of its event kind's first spec: watches follow the first's renders,
    # each object converted by this (Events in events.k8s.io/v1 from core/v1's)
    convert: Callable[[JSON], JSON] | None = None
    # every version the kind is served in, the storage one marked (`version` names it);
    # empty: only `version`. A spec made by `at` serves one of the others.
    versions: tuple[Version, ...] = ()
    # the field labels its list and watch select on, when they are its own (pods'
    # `spec.nodeName`); empty: its event kind's (readside/watch.py)
    field_labels: tuple[str, ...] = ()

    # -------------------------------------------------------------- versions
    @property
    def served(self) -> tuple[Version, ...]:
        """Every served version, preferred first (Kubernetes' version order)."""
        out = self.versions or (Version(name=self.version, storage=True),)
        return tuple(sorted(out, key=lambda v: version_priority(v.name)))

    @property
    def storage_version(self) -> str:
        return next((v.name for v in self.served if v.storage), self.version)

    @property
    def deprecation_warning(self) -> str | None:
        return next((v.deprecation_warning for v in self.served if v.name == self.version), None)

    def converted(self, obj: JSON, version: str) -> JSON:
        """`obj`, in any version this kind is served in (its `apiVersion` says which),
        as `version` has it: converted to the storage version, then from it."""
        by_name = {v.name: v for v in self.served}
        given = str(obj.get("apiVersion") or "").rpartition("/")[2]
        storage = self.storage_version
        source, target = by_name.get(given), by_name[version]
        if given != storage and source is not None and source.to_storage is not None:
            obj = source.to_storage(obj)
        if version != storage and target.from_storage is not None:
            obj = target.from_storage(obj)
        return {**obj, "apiVersion": f"{self.group}/{version}" if self.group else version}

    def at(self, version: str) -> KindSpec:
        """This kind as served in `version`: its routes, discovery and OpenAPI under that
        version; what it writes converted to the storage version before the kind's own
        hooks see it, what it renders converted from it."""
        if version == self.version:
            return self
        if version not in {v.name for v in self.served}:
            raise ValueError(f"{self.kind} is not served in {version}")
        stored = self.storage_version

        def down(obj: JSON) -> JSON:
            return self.converted(obj, version)

        def up(obj: JSON) -> JSON:
            return self.converted(obj, stored)

        def render(cluster: Cluster, view: Any, now: float) -> JSON:
            return down(self.render(cluster, view, now))

        def hook(made: Made | None) -> Made | None:
            if made is None:
                return None
            return lambda meta, manifest: made(meta, up(manifest))

        return msgspec.structs.replace(
            self,
            version=version,
            render=render,
            convert=down,
            created=hook(self.created),
            updated=hook(self.updated),
        )

    # ----------------------------------------------------------------- names
    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def list_kind(self) -> str:
        return f"{self.kind}List"

    @property
    def namespaced(self) -> bool:
        return self.scope is Scope.NAMESPACED

    @property
    def names(self) -> tuple[str, ...]:
        """Every name a user may type for it (lower case)."""
        return (self.singular, self.plural, *self.short_names, *self.aliases)

    @property
    def resource(self) -> Resource:
        """As Kubernetes names it in errors: `virtualmachines.kubevirt.io`."""
        return Resource(self.plural, self.group, self.kind)

    @property
    def subresource_resource(self) -> Resource:
        """KubeVirt's subresource handlers name the singular in their conflicts."""
        return Resource(self.singular, self.group, self.kind)

    # ----------------------------------------------------------------- tables
    @property
    def shown_printer_columns(self) -> tuple[PrinterColumn, ...]:
        """The printer columns kubectl's Table shows (an age for a kind without any)."""
        return self.printer_columns or DEFAULT_PRINTER_COLUMNS

    @property
    def table_columns(self) -> tuple[Column, ...]:
        """`virtstream get`'s columns."""
        return self.columns or table_of(self.printer_columns)

    # ----------------------------------------------------------------- paths
    @property
    def base(self) -> str:
        """The group/version prefix: `/apis/kubevirt.io/v1`, `/api/v1` for the core group."""
        return f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"

    def collection_path(self, namespace: str | None = None) -> str:
        """The collection; across namespaces (or cluster-scoped) without a namespace."""
        if self.namespaced and namespace:
            return f"{self.base}/namespaces/{namespace}/{self.plural}"
        return f"{self.base}/{self.plural}"

    def subresource_path(self, name: str, action: str, namespace: str | None = None) -> str:
        base = f"/apis/{self.subresource_group}/{self.version}"
        if self.namespaced:
            base = f"{base}/namespaces/{namespace}"
        return f"{base}/{self.plural}/{name}/{action}"

    def subresource(self, name: str, method: str | None = None) -> Subresource | None:
        return next(
            (
                s
                for s in self.subresources
                if s.name == name and (method is None or s.method == method)
            ),
            None,
        )

    def key(self, namespace: str, name: str) -> str:
        """The Cluster table key: "ns/name", or the name when cluster-scoped."""
        return f"{namespace}/{name}" if self.namespaced else name
