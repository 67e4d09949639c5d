"""Authorization as the Kubernetes API server does it, pure: a request's attributes (what
its URL and method mean: verb, API group, resource, subresource, namespace, name), RBAC
rules, KubeVirt's cluster roles built from the kind registry, bindings, and the words of
a refusal.

The roles follow KubeVirt's (pkg/virt-operator/resource/generate/rbac/cluster.go), with
the resource names taken from the registry so a new kind is covered without touching
this module:
- `kubevirt.io:view`: get, list, watch on every KubeVirt kind; get on the subresources
  that only report (guestosinfo, filesystemlist, userlist); get on the kind's history and
  causes (`debug.virtstream.io`, services/api/history.py) and on Prometheus' query API
  as the api relays it (`/prometheus/api/v1/*`, services/api/prometheus_proxy.py);
- `kubevirt.io:edit`: view, plus create, update, patch, delete on every namespaced
  KubeVirt kind and every subresource, except migrations (read only) and `migrate`;
  get on the consoles (console, vnc, vnc/screenshot) and portforward;
- `kubevirt.io:admin`: edit plus deletecollection;
- `kubevirt.io:migrate`: migrations (every verb) and the `migrate` subresources;
- `cluster-admin`: everything (Kubernetes' own).
Kinds of the core group (nodes, namespaces) are Kubernetes' and belong to no KubeVirt
role; Events (core and events.k8s.io) and namespaces are read by `view` and the roles
above it, as Kubernetes' `view` role, into which KubeVirt's aggregate, grants (bound in a
namespace, it reads that namespace alone). Creating or deleting a namespace is
`cluster-admin`'s, as in Kubernetes, where `admin` and `edit` cannot either. The launcher
pods (and `pods/log`), Services, Endpoints and EndpointSlices are read by `view` and the
roles above it, and Services written by `edit` and `admin`, as Kubernetes' roles grant."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from urllib.parse import parse_qs

import msgspec

from events.meta import Kind, ResourceKind
from kinds.registry import Registry
from kinds.spec import KindSpec
from projections import kube_events

READ = ("get", "list", "watch")
WRITE = ("create", "update", "patch", "delete")
ALL = "*"
# subresources a viewer may read: they report on the guest and change nothing
INFO_SUBRESOURCES = frozenset({"guestosinfo", "filesystemlist", "userlist"})
MIGRATE_SUBRESOURCE = "migrate"
AUTHENTICATED = "system:authenticated"
UNAUTHENTICATED = "system:unauthenticated"
ANONYMOUS = "system:anonymous"
MASTERS = "system:masters"

VIEW, EDIT, ADMIN, MIGRATE = (
    "kubevirt.io:view",
    "kubevirt.io:edit",
    "kubevirt.io:admin",
    ("kubevirt.io:migrate"),
)
CLUSTER_ADMIN = "cluster-admin"
# Kubernetes' system:public-info-viewer (anyone) and system:discovery (any authenticated
# user); /metrics is the API server's system:monitoring's (the group of that name); /ui/ is
# the web console's static files (they hold no data: the page asks with its user's token).
PUBLIC_PATHS = ("/healthz", "/livez", "/readyz", "/version", "/version/", "/ui", "/ui/*")
MONITORING = "system:monitoring"
MONITORING_PATHS = ("/healthz", "/livez", "/readyz", "/metrics", "/metrics/slis")
HISTORY_GROUP = "debug.virtstream.io"  # services/api/history.py
HISTORY_SUBRESOURCES = ("history", "why")
PROMETHEUS_PATHS = ("/prometheus/api/v1/*",)  # services/api/prometheus_proxy.py
DISCOVERY_PATHS = ("/api", "/api/*", "/apis", "/apis/*", "/openapi", "/openapi/*", "/openapi.json")


class Rule(msgspec.Struct, frozen=True):
    """A PolicyRule: resources are `plural` or `plural/subresource` ("*" matches all)."""

    verbs: tuple[str, ...]
    api_groups: tuple[str, ...] = ()
    resources: tuple[str, ...] = ()
    non_resource_urls: tuple[str, ...] = ()


class Attributes(msgspec.Struct, frozen=True):
    """What a request asks for, as the API server's RequestInfo sees it."""

    verb: str
    path: str = ""
    resource_request: bool = False
    api_group: str = ""
    resource: str = ""
    subresource: str = ""
    namespace: str = ""
    name: str = ""


class Subject(msgspec.Struct, frozen=True):
    kind: str  # User or Group
    name: str


class Binding(msgspec.Struct, frozen=True):
    """A RoleBinding (namespace set: the role's rules hold in that namespace only) or a
    ClusterRoleBinding (namespace "": everywhere)."""

    role: str
    subjects: tuple[Subject, ...]
    namespace: str = ""
    name: str = ""


class User(msgspec.Struct, frozen=True):
    name: str
    groups: tuple[str, ...] = ()
    uid: str = ""
    extra: tuple[tuple[str, tuple[str, ...]], ...] = ()  # (key, values), as UserInfo's


# ----------------------------------------------------------- request info
_VERB_OF = {"POST": "create", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}


def attributes(method: str, path: str, query: str = "") -> Attributes:
    """The API server's RequestInfo for `method path?query`: /api/v1/... and
    /apis/GROUP/VERSION/... are resource requests; anything else is a path."""
    parts = [p for p in path.strip("/").split("/") if p]
    if not parts or parts[0] not in ("api", "apis"):
        return Attributes(verb=method.lower(), path=path)
    if parts[0] == "api":
        group, rest = "", parts[2:] if len(parts) >= 2 else []
        if len(parts) < 3:
            return Attributes(verb=method.lower(), path=path)
    else:
        if len(parts) < 4:  # /apis, /apis/g, /apis/g/v: discovery
            return Attributes(verb=method.lower(), path=path)
        group, rest = parts[1], parts[3:]
    namespace = ""
    if rest[0] == "namespaces" and len(rest) >= 3:
        namespace, rest = rest[1], rest[2:]
    elif rest[0] == "namespaces" and len(rest) == 2:
        namespace = rest[1]  # a namespace itself: its name is also its namespace
    resource = rest[0]
    name = rest[1] if len(rest) > 1 else ""
    subresource = "/".join(rest[2:])
    if subresource.startswith("portforward/"):  # its port and protocol are arguments
        subresource = "portforward"
    q = parse_qs(query)
    if method == "GET":
        watch = q.get("watch", [""])[0].lower() in ("true", "1")
        verb = "get" if name else ("watch" if watch else "list")
    elif method == "DELETE" and not name:
        verb = "deletecollection"
    else:
        verb = _VERB_OF.get(method, method.lower())
    return Attributes(
        verb=verb,
        path=path,
        resource_request=True,
        api_group=group,
        resource=resource,
        subresource=subresource,
        namespace=namespace,
        name=name,
    )


# ------------------------------------------------------------------ roles
def _kubevirt(spec: KindSpec) -> bool:
    return spec.group not in ("", DISCOVERY_GROUP) and spec.event_kind != kube_events.KIND


def _events(kinds: Registry) -> list[Rule]:
    """Reading Events, in both groups: Kubernetes' `view` role grants it, and KubeVirt's
    roles are aggregated into Kubernetes' (a viewer of VMs sees their events)."""
    return [
        Rule(READ, (spec.group,), (spec.plural,))
        for spec in kinds
        if spec.event_kind == kube_events.KIND
    ]


# the core kinds around the VMIs Kubernetes' `view` reads (and `edit` writes, the writable
# ones): the launcher pods and their logs, services and their endpoints
WORKLOAD_KINDS = ("Pod", "Service", "Endpoints", "EndpointSlice")
DISCOVERY_GROUP = "discovery.k8s.io"  # EndpointSlices


def _workloads(kinds: Registry, verbs: tuple[str, ...]) -> list[Rule]:
    out = []
    for spec in kinds:
        if spec.group not in ("", DISCOVERY_GROUP) or spec.kind not in WORKLOAD_KINDS:
            continue
        allowed = tuple(
            v for v in verbs if v in spec.verbs or (v == "patch" and "update" in spec.verbs)
        )
        if allowed:
            out.append(Rule(allowed, (spec.group,), (spec.plural,)))
        if verbs == READ and spec.streams:  # `kubectl logs`: a viewer's, as in Kubernetes
            out.append(Rule(("get",), ("",), tuple(f"{spec.plural}/{n}" for n in spec.streams)))
    return out


def _namespaces(kinds: Registry) -> list[Rule]:
    """Reading namespaces: Kubernetes' `view` role grants it."""
    return [
        Rule(READ, (spec.group,), (spec.plural,))
        for spec in kinds
        if spec.event_kind == ResourceKind.NAMESPACE
    ]


def _is_migration(spec: KindSpec) -> bool:
    return spec.event_kind == Kind.MIGRATION


def _subs(spec: KindSpec, keep: Iterable[str]) -> tuple[Rule, ...]:
    wanted = set(keep)
    out = []
    for method in ("GET", "PUT"):
        names = tuple(
            f"{spec.plural}/{s.name}"
            for s in spec.subresources
            if s.method == method and s.name in wanted
        )
        if names:
            verb = "get" if method == "GET" else "update"
            out.append(Rule((verb,), (spec.subresource_group,), names))
    return tuple(out)


def cluster_roles(kinds: Registry) -> dict[str, tuple[Rule, ...]]:
    """KubeVirt's cluster roles for the kinds of `kinds` (see the module's doc)."""
    view: list[Rule] = []
    edit: list[Rule] = []
    migrate: list[Rule] = []
    for spec in kinds:
        if not _kubevirt(spec):
            continue
        view.append(Rule(READ, (spec.group,), (spec.plural,)))
        history = tuple(f"{spec.plural}/{sub}" for sub in HISTORY_SUBRESOURCES)
        view.append(Rule(("get",), (HISTORY_GROUP,), history))
        view.extend(_subs(spec, (s.name for s in spec.subresources if s.name in INFO_SUBRESOURCES)))
        if not spec.namespaced:
            continue
        if _is_migration(spec):
            migrate.append(Rule((*READ, *WRITE, "deletecollection"), (spec.group,), (spec.plural,)))
        else:
            edit.append(Rule(WRITE, (spec.group,), (spec.plural,)))
        edit.extend(
            _subs(spec, (s.name for s in spec.subresources if s.name != MIGRATE_SUBRESOURCE))
        )
        if spec.streams:  # console, vnc: editors' (a viewer could type into a guest)
            streams = tuple(
                f"{spec.plural}/{n}" for n in spec.streams if n not in INFO_SUBRESOURCES
            )
            edit.append(Rule(("get",), (spec.subresource_group,), streams))
            info = tuple(f"{spec.plural}/{n}" for n in spec.streams if n in INFO_SUBRESOURCES)
            if info:  # the guest agent's reports: a viewer's, as in KubeVirt's view role
                view.append(Rule(("get",), (spec.subresource_group,), info))
        migrate.extend(
            _subs(spec, (s.name for s in spec.subresources if s.name == MIGRATE_SUBRESOURCE))
        )
    view.append(Rule(("get",), non_resource_urls=PROMETHEUS_PATHS))
    view.extend(_events(kinds))
    view.extend(_namespaces(kinds))
    view.extend(_workloads(kinds, READ))
    edit.extend(_workloads(kinds, WRITE))
    if any(s.kind == "DataVolume" for s in kinds):  # CDI's edit role: upload into claims
        edit.append(Rule(("create",), ("upload.cdi.kubevirt.io",), ("uploadtokenrequests",)))
    edit = view + edit
    admin = [
        *edit,
        *(
            Rule(("deletecollection",), (s.group,), (s.plural,))
            for s in kinds
            if _kubevirt(s) and s.namespaced and not _is_migration(s)
        ),
    ]
    return {
        VIEW: tuple(view),
        EDIT: tuple(edit),
        ADMIN: tuple(admin),
        MIGRATE: tuple(migrate),
        CLUSTER_ADMIN: (
            Rule((ALL,), (ALL,), (ALL,)),
            Rule((ALL,), non_resource_urls=(ALL,)),
        ),
    }


# Bindings every server has (Kubernetes' bootstrap policy, the parts that apply here).
SYSTEM_ROLES: dict[str, tuple[Rule, ...]] = {
    "system:public-info-viewer": (Rule(("get",), non_resource_urls=PUBLIC_PATHS),),
    "system:discovery": (Rule(("get",), non_resource_urls=DISCOVERY_PATHS),),
    MONITORING: (Rule(("get",), non_resource_urls=MONITORING_PATHS),),
    "system:basic-user": (
        Rule(
            ("create",),
            ("authorization.k8s.io",),
            ("selfsubjectaccessreviews", "selfsubjectrulesreviews"),
        ),
        Rule(("create",), ("authentication.k8s.io",), ("selfsubjectreviews",)),
    ),
    # KubeVirt's role for every user: virt-api's version (`virtctl version`)
    "kubevirt.io:default": (
        Rule(("get", "list"), ("subresources.kubevirt.io",), ("version", "guestfs")),
    ),
}
SYSTEM_BINDINGS: tuple[Binding, ...] = (
    Binding(
        "system:public-info-viewer",
        (Subject("Group", AUTHENTICATED), Subject("Group", UNAUTHENTICATED)),
    ),
    Binding("system:discovery", (Subject("Group", AUTHENTICATED),)),
    Binding("system:basic-user", (Subject("Group", AUTHENTICATED),)),
    Binding("kubevirt.io:default", (Subject("Group", AUTHENTICATED),)),
    Binding(CLUSTER_ADMIN, (Subject("Group", MASTERS),)),
    Binding(MONITORING, (Subject("Group", MONITORING),)),
)


# -------------------------------------------------------------- deciding
def _match(values: tuple[str, ...], value: str) -> bool:
    return ALL in values or value in values


def _resource_match(resources: tuple[str, ...], a: Attributes) -> bool:
    if ALL in resources:
        return True
    if not a.subresource:
        return a.resource in resources
    combined = f"{a.resource}/{a.subresource}"
    return (
        combined in resources
        or f"{a.resource}/*" in resources
        or (f"*/{a.subresource}" in resources)
    )


def _url_match(urls: tuple[str, ...], path: str) -> bool:
    for url in urls:
        if url in (ALL, path) or (url.endswith("*") and path.startswith(url[:-1])):
            return True
    return False


def rule_allows(rule: Rule, a: Attributes) -> bool:
    if not _match(rule.verbs, a.verb):
        return False
    if a.resource_request:
        return _match(rule.api_groups, a.api_group) and _resource_match(rule.resources, a)
    return _url_match(rule.non_resource_urls, a.path)


def subject_is(subject: Subject, user: User) -> bool:
    if subject.kind == "Group":
        return subject.name in user.groups
    return subject.kind == "User" and subject.name == user.name


def allowed(
    user: User,
    a: Attributes,
    bindings: Iterable[Binding],
    roles: Mapping[str, tuple[Rule, ...]],
) -> bool:
    """RBAC: some binding of the user (or one of its groups) whose scope holds the request
    names a role with a rule that allows it. A RoleBinding never reaches a cluster-scoped
    resource or a path."""
    for binding in (*SYSTEM_BINDINGS, *bindings):
        if binding.namespace and (not a.resource_request or binding.namespace != a.namespace):
            continue
        if not any(subject_is(s, user) for s in binding.subjects):
            continue
        rules = roles.get(binding.role) or SYSTEM_ROLES.get(binding.role, ())
        if any(rule_allows(rule, a) for rule in rules):
            return True
    return False


def forbidden_message(user: User, a: Attributes) -> str:
    """The API server's words: `virtualmachines.kubevirt.io "x" is forbidden: User "u"
    cannot delete resource "virtualmachines" in API group "kubevirt.io" in the namespace
    "default"`."""
    if not a.resource_request:
        return f'forbidden: User "{user.name}" cannot {a.verb} path "{a.path}"'
    resource = f"{a.resource}/{a.subresource}" if a.subresource else a.resource
    where = f'in the namespace "{a.namespace}"' if a.namespace else "at the cluster scope"
    why = (
        f'User "{user.name}" cannot {a.verb} resource "{resource}" '
        f'in API group "{a.api_group}" {where}'
    )
    qualified = f"{a.resource}.{a.api_group}" if a.api_group else a.resource
    if a.name:
        return f'{qualified} "{a.name}" is forbidden: {why}'
    return f"{qualified} is forbidden: {why}"
