"""What a resource kind is, once: its names, scope, verbs, subresources, printer columns,
and the hooks (admission, events, fold, render) the api, the client and the CLI derive
their tables from. The commands (`core/`, below this package) see a kind through
`core.kind.KindRules`, which `KindSpec` implements; a subresource is the core's
`core.kind.Subresource`."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from enum import StrEnum
from typing import Any

import msgspec

from core.errors import Resource
from core.kind import Act, Subresource
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


Admit = Callable[[Cluster, Any, str], tuple[Any, list[Any]]]
Delete = Act  # (cluster, namespace, name, args, context) → Outcome
Render = Callable[[Cluster, Any, float], JSON]


class KindSpec(msgspec.Struct, frozen=True, kw_only=True):
    """One resource kind.

    `name_rule` and `runs_launcher` are the API server's checks of where an object lives
    (names and namespaces, before anything else runs);
    `admit(cluster, typed, uid) -> (typed, causes)` defaults then validates (the webhooks);
    `created` / `updated` build the event a create / update appends (None: the verb is
    refused: a create route is not served, an update answers 400 as KubeVirt's immutable
    kinds do); `delete` is the pure delete intent. `table` and `render` are how the read side
    lists and serves it; `evolve` is the pure fold of its own events (`Cluster.apply` adds
    the joins between kinds)."""

    group: str  # "" for the core group
    version: str
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
    delete: Delete | None = None
    table: Callable[[Cluster], Mapping[str, Any]]
    render: Render
    evolve: Callable[[Any, Stored], Any] | None = None

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
