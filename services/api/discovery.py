"""Kubernetes API discovery, derived from the kind registry: `/version`, the legacy
documents (`/api`, `/api/v1`, `/apis`, `/apis/{group}`, `/apis/{group}/{version}`) and the
aggregated `apidiscovery.k8s.io/v2` form that kubectl and client-go ask for first.

Pure: a registry in, JSON documents out. Subresources are served under each kind's
subresource group (KubeVirt's aggregated `subresources.kubevirt.io`), so they appear in that
group's resource list as `virtualmachines/start`, as KubeVirt's virt-api lists them."""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Iterator
from typing import Any

from events.catalog import KUBERNETES_VERSION
from kinds.registry import Registry
from kinds.spec import KindSpec, version_priority

JSON = dict[str, Any]
AGGREGATED = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"
# What the server reports: kubectl warns when its minor is more than one away.
VERSION: JSON = {
    "major": "1",
    "minor": "33",
    "gitVersion": KUBERNETES_VERSION,
    "gitCommit": "",
    "gitTreeState": "clean",
    "buildDate": "1970-01-01T00:00:00Z",
    "goVersion": "go1.24",
    "compiler": "gc",
    "platform": "linux/amd64",
}
# a `status` subresource (a CRD's `subresources: status`)
STATUS_VERBS = ("get", "patch", "update")
_VERBS = {"PUT": "update", "POST": "create", "GET": "get", "DELETE": "delete", "PATCH": "patch"}


# The reviews a user asks about themselves (services/api/guard.py, reviews.py), each in
# its built-in group: `kubectl auth can-i` (access, rules) and `kubectl auth whoami`.
# CDI's UploadTokenRequest (services/api/upload_proxy.py) is the same: create only, kept
# nowhere, but namespaced and in its own group's v1beta1.
def _review(kind: str, namespaced: bool = False) -> JSON:
    return {
        "name": f"{kind.lower()}s",
        "singularName": kind.lower(),
        "namespaced": namespaced,
        "kind": kind,
        "verbs": ["create"],
    }


REVIEWS: dict[str, dict[str, list[JSON]]] = {
    "authentication.k8s.io": {"v1": [_review("SelfSubjectReview")]},
    "authorization.k8s.io": {
        "v1": [_review("SelfSubjectAccessReview"), _review("SelfSubjectRulesReview")]
    },
    "upload.cdi.kubevirt.io": {"v1beta1": [_review("UploadTokenRequest", namespaced=True)]},
}


def wants_aggregated(accept: str) -> bool:
    """The first acceptable media type asks for the v2 aggregated form."""
    for part in accept.split(","):
        params = {
            k.strip(): v.strip()
            for k, _, v in (p.partition("=") for p in part.split(";")[1:])
            if k.strip()
        }
        if params.get("g") == "apidiscovery.k8s.io" and params.get("v") == "v2":
            return params.get("as") == "APIGroupDiscoveryList"
        if part.split(";", 1)[0].strip() in ("application/json", "*/*"):
            return False
    return False


def verbs(spec: KindSpec) -> list[str]:
    """The discovery verbs: an updatable kind is patchable too (PATCH decides a patch
    against the stored object and appends it as an update)."""
    out = list(spec.verbs)
    if "update" in out:
        out.insert(out.index("update") + 1, "patch")
    if "delete" in out and "list" in out:  # DELETE on the collection, with selectors
        out.insert(out.index("delete") + 1, "deletecollection")
    return out


def _resource(spec: KindSpec) -> JSON:
    out: JSON = {
        "name": spec.plural,
        "singularName": spec.singular,
        "namespaced": spec.namespaced,
        "kind": spec.kind,
        "verbs": verbs(spec),
    }
    if spec.short_names:
        out["shortNames"] = list(spec.short_names)
    if spec.categories:
        out["categories"] = list(spec.categories)
    if spec.group:
        out["storageVersionHash"] = storage_version_hash(spec)
    return out


def _sub_verbs(method: str) -> list[str]:
    return [_VERBS.get(method, method.lower())]


def group_versions(kinds: Registry) -> dict[str, dict[str, list[JSON]]]:
    """group → version → resources (legacy form), in registry order; the core group is ""."""
    out: dict[str, dict[str, list[JSON]]] = {"": {"v1": []}}  # the core group first
    for spec in kinds.served:
        listed = out.setdefault(spec.group, {}).setdefault(spec.version, [])
        listed.append(_resource(spec))
        if spec.has_status:
            listed.append(
                {
                    "name": f"{spec.plural}/status",
                    "singularName": "",
                    "namespaced": spec.namespaced,
                    "kind": spec.kind,
                    "verbs": list(STATUS_VERBS),
                }
            )
    for spec in kinds.served:
        if not spec.subresources and not spec.streams:
            continue
        subs = out.setdefault(spec.subresource_group, {}).setdefault(spec.version, [])
        for name, verbs, rk in _sub_names(spec):
            entry: JSON = {
                "name": f"{spec.plural}/{name}",
                "singularName": "",
                "namespaced": spec.namespaced,
                "kind": "",
                "verbs": verbs,
            }
            if rk is not None:
                entry.update(group=rk[0], version=rk[1], kind=rk[2])
            subs.append(entry)
    for group, versions in REVIEWS.items():
        for version, reviews in versions.items():
            out.setdefault(group, {}).setdefault(version, []).extend(dict(r) for r in reviews)
    return {g: _preferred_first(vs) for g, vs in out.items()}


def _preferred_first(versions: dict[str, Any]) -> dict[str, Any]:
    """A group's versions in Kubernetes' order: the preferred one first."""
    return {v: versions[v] for v in sorted(versions, key=version_priority)}


def storage_version_hash(spec: KindSpec) -> str:
    """The API server's mark of where a resource is stored, the same in every version it
    is served in: the first 8 bytes of sha256("group/storageversion/Kind"), base64."""
    gvk = f"{spec.group}/{spec.storage_version}/{spec.kind}"
    return base64.b64encode(hashlib.sha256(gvk.encode()).digest()[:8]).decode()


def _sub_names(spec: KindSpec) -> list[tuple[str, list[str], tuple[str, str, str] | None]]:
    """The kind's subresources by name with their verbs and response kind (`scale` answers
    GET, PUT and PATCH), then its streams (GET only)."""
    by_name: dict[str, list[Any]] = {}
    for sub in spec.subresources:
        by_name.setdefault(sub.name, []).append(sub)
    actions = [
        (name, [v for m in subs for v in _sub_verbs(m.method)], subs[0].response_kind)
        for name, subs in by_name.items()
    ]
    return actions + [(name, ["get"], None) for name in spec.streams]


def _gv(group: str, version: str) -> JSON:
    return {"groupVersion": f"{group}/{version}", "version": version}


def api_versions() -> JSON:
    return {"kind": "APIVersions", "versions": ["v1"], "serverAddressByClientCIDRs": []}


def _api_group(group: str, versions: dict[str, list[JSON]]) -> JSON:
    gvs = [_gv(group, v) for v in versions]
    return {
        "kind": "APIGroup",
        "apiVersion": "v1",
        "name": group,
        "versions": gvs,
        "preferredVersion": gvs[0],
    }


def api_groups(kinds: Registry) -> JSON:
    groups = [_api_group(g, vs) for g, vs in group_versions(kinds).items() if g]
    return {"kind": "APIGroupList", "apiVersion": "v1", "groups": groups}


def api_group(kinds: Registry, group: str) -> JSON | None:
    versions = group_versions(kinds).get(group) if group else None
    return _api_group(group, versions) if versions else None


def resource_list(kinds: Registry, group: str, version: str) -> JSON | None:
    """`/api/v1` (group "") or `/apis/{group}/{version}`: an APIResourceList."""
    resources = group_versions(kinds).get(group, {}).get(version)
    if resources is None:
        return None
    return {
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": f"{group}/{version}" if group else version,
        "resources": resources,
    }


# ------------------------------------------------------------ aggregated v2
def _gvk(spec: KindSpec) -> JSON:
    return {"group": spec.group, "version": spec.version, "kind": spec.kind}


def _discovery(spec: KindSpec, subresources: list[JSON]) -> JSON:
    out: JSON = {
        "resource": spec.plural,
        "responseKind": _gvk(spec),
        "scope": "Namespaced" if spec.namespaced else "Cluster",
        "singularResource": spec.singular,
        "verbs": verbs(spec),
    }
    if spec.short_names:
        out["shortNames"] = list(spec.short_names)
    if spec.categories:
        out["categories"] = list(spec.categories)
    if subresources:
        out["subresources"] = subresources
    return out


def _aggregated_items(kinds: Registry, core: bool) -> Iterator[JSON]:
    groups: dict[str, dict[str, list[JSON]]] = {}
    for spec in kinds.served:
        if (spec.group == "") != core:
            continue
        status = [
            {"subresource": "status", "responseKind": _gvk(spec), "verbs": list(STATUS_VERBS)}
        ]
        entry = _discovery(spec, status if spec.has_status else [])
        groups.setdefault(spec.group, {}).setdefault(spec.version, []).append(entry)
    # each subresource group lists its parents, verbs only on the subresources (a core
    # kind's, `pods/log`, on the kind itself)
    for spec in kinds.served:
        if (not spec.subresources and not spec.streams) or (spec.subresource_group == "") != core:
            continue
        subs = [
            {
                "subresource": name,
                "responseKind": (
                    dict(zip(("group", "version", "kind"), rk, strict=True)) if rk else _gvk(spec)
                ),
                "verbs": verbs,
            }
            for name, verbs, rk in _sub_names(spec)
        ]
        listed = groups.setdefault(spec.subresource_group, {}).setdefault(spec.version, [])
        own = next((r for r in listed if r["resource"] == spec.plural), None)
        if own is not None:  # served in the kind's own group (`scale`, `log`)
            own["subresources"] = [*own.get("subresources", []), *subs]
            continue
        parent = _discovery(spec, subs)
        parent["verbs"] = []
        parent.pop("shortNames", None)
        parent.pop("categories", None)
        listed.append(parent)
    if not core:
        for group, versions in REVIEWS.items():
            for version, reviews in versions.items():
                groups.setdefault(group, {}).setdefault(version, []).extend(
                    {
                        "resource": r["name"],
                        "responseKind": {"group": group, "version": version, "kind": r["kind"]},
                        "scope": "Namespaced" if r["namespaced"] else "Cluster",
                        "singularResource": r["singularName"],
                        "verbs": r["verbs"],
                    }
                    for r in reviews
                )
    for group, versions in groups.items():
        yield {
            "metadata": {"name": group} if group else {},
            "versions": [
                {"version": v, "resources": rs, "freshness": "Current"}
                for v, rs in _preferred_first(versions).items()
            ],
        }


def aggregated(kinds: Registry, core: bool) -> JSON:
    """`/api` (core) or `/apis` as an APIGroupDiscoveryList."""
    return {
        "kind": "APIGroupDiscoveryList",
        "apiVersion": "apidiscovery.k8s.io/v2",
        "metadata": {},
        "items": list(_aggregated_items(kinds, core)),
    }
