"""CDI's DataImportCron controller, pure: the import a cron asks for and the DataSource it
keeps pointing at the latest one.

- The source's digest names the import: a registry source's `sha256:` of its URL (the
  containerDisk catalogue's images do not change under a reference here, so a reference is
  its digest), a pvc source's `uid:` of the claim. The import is a DataVolume named
  `<managedDataSource>-<the digest's first 12 characters>` made from `spec.template`,
  labelled `cdi.kubevirt.io/dataImportCron: <cron>`, as CDI names and labels it; made once.
- Once it succeeded the DataSource `spec.managedDataSource` (made by the cron, labelled
  with it; one not labelled with it is not the cron's to touch) names its claim, and the
  cron's status says so: `currentImports`, `lastImportedPVC`, `lastImportTimestamp`,
  `sourceFormat: pvc`, and CDI's `Progressing` / `UpToDate` conditions.
- A cron deleted leaves its imports and DataSource (CDI's default `RetainAll`)."""

from __future__ import annotations

import hashlib
from typing import Any

from events.catalog import ResourceCreated, ResourceUpdated
from events.envelope import Context, Decision
from events.meta import Aggregate, ResourceKind
from kinds.dataimportcron import KIND_TOKEN
from projections import datavolumes as dvs
from projections import storage
from projections.cluster import Cluster, key
from projections.views import ResourceView
from services.controller import datavolume, emit

JSON = dict[str, Any]
LABEL = "cdi.kubevirt.io/dataImportCron"
IMMEDIATE = "cdi.kubevirt.io/storage.bind.immediate.requested"
SUFFIX = 12  # the digest's characters in the import's name


def digest(cluster: Cluster, cron: ResourceView) -> str:
    """The source's digest ("" while a pvc source's claim does not exist)."""
    source: JSON = ((cron.spec.get("template") or {}).get("spec") or {}).get("source") or {}
    if "registry" in source:
        url = str((source["registry"] or {}).get("url") or "")
        return "sha256:" + hashlib.sha256(url.encode()).hexdigest()
    pvc = source.get("pvc") or {}
    claim = storage.find_claim(
        cluster, str(pvc.get("namespace") or cron.namespace), str(pvc.get("name") or "")
    )
    return f"uid:{claim.uid}" if claim is not None else ""


def import_name(managed: str, digest_: str) -> str:
    return f"{managed}-{digest_.partition(':')[2][:SUFFIX]}"


def cron_of(dv: ResourceView) -> str:
    """The cron a DataVolume is an import of ("" for any other)."""
    if LABEL.encode() not in dv.manifest_json:
        return ""  # most DataVolumes: no decoding of their labels
    labels = (dv.manifest.get("metadata") or {}).get("labels") or {}
    return str(labels.get(LABEL) or "")


def reconcile(cluster: Cluster, cron: ResourceView, ctx: Context) -> list[Decision]:
    managed = str(cron.spec.get("managedDataSource") or "")
    d = digest(cluster, cron)
    if not managed or not d:
        return emit.status_change(KIND_TOKEN, cron, _status(cron, None, "", ctx), ctx)
    name = import_name(managed, d)
    dv = cluster.resources[ResourceKind.DATA_VOLUME].get(key(cron.namespace, name))
    out: list[Decision] = []
    if dv is None and storage.find_claim(cluster, cron.namespace, name) is None:
        out.append(_import(cron, name, ctx))
    succeeded = dv is not None and dv.status.get("phase") == dvs.SUCCEEDED
    imported = {"name": name, "namespace": cron.namespace} if succeeded else None
    out += _data_source(cluster, cron, managed, imported, ctx)
    status = _status(cron, dv, d, ctx)
    out += emit.status_change(KIND_TOKEN, cron, status, ctx)
    return out


def _import(cron: ResourceView, name: str, ctx: Context) -> Decision:
    template: JSON = cron.spec.get("template") or {}
    meta: JSON = dict(template.get("metadata") or {})
    k = f"dic-import/{cron.uid}/{name}"
    metadata = {
        "name": name,
        "namespace": cron.namespace,
        "uid": emit.new_uid(ctx, k),
        "labels": {**(meta.get("labels") or {}), LABEL: cron.name},
        "annotations": {**(meta.get("annotations") or {}), IMMEDIATE: "true"},
    }
    return datavolume.create(cron.namespace, name, metadata, template, k, ctx)


def _data_source(
    cluster: Cluster, cron: ResourceView, managed: str, imported: JSON | None, ctx: Context
) -> list[Decision]:
    """The managed DataSource made, and pointed at the import once it succeeded."""
    ds = cluster.resources[ResourceKind.DATA_SOURCE].get(key(cron.namespace, managed))
    source = {"pvc": imported} if imported is not None else {}
    if ds is None:
        k = f"dic-source/{cron.uid}/{managed}"
        manifest: JSON = {
            "apiVersion": "cdi.kubevirt.io/v1beta1",
            "kind": "DataSource",
            "metadata": {
                "name": managed,
                "namespace": cron.namespace,
                "uid": emit.new_uid(ctx, k),
                "labels": {LABEL: cron.name},
            },
            "spec": {"source": source},
        }
        agg = Aggregate(kind=ResourceKind.DATA_SOURCE, namespace=cron.namespace, name=managed)
        created = ResourceCreated(meta=emit.meta(ctx, agg, k), manifest=manifest)
        return [Decision(created, expected=0)]
    labels = (ds.manifest.get("metadata") or {}).get("labels") or {}
    if labels.get(LABEL) != cron.name or imported is None:
        return []  # another's, or nothing to point at yet
    if (ds.spec.get("source") or {}) == source:
        return []
    current: JSON = ds.manifest
    updated = {**current, "spec": {**(current.get("spec") or {}), "source": source}}
    agg = emit.resource_aggregate(ResourceKind.DATA_SOURCE, ds)
    k = f"dic-source/{cron.uid}/{managed}/{imported['name']}"
    return [Decision(ResourceUpdated(meta=emit.meta(ctx, agg, k), manifest=updated))]


def _status(cron: ResourceView, dv: ResourceView | None, d: str, ctx: Context) -> JSON:
    old = cron.status
    phase = str(dv.status.get("phase") or "") if dv is not None else ""
    status: JSON = {k: v for k, v in old.items() if k != "conditions"}
    status.setdefault("lastExecutionTimestamp", dvs.timestamp(ctx.now))
    if dv is not None:
        status["currentImports"] = [{"DataVolumeName": dv.name, "Digest": d}]
    if phase == dvs.SUCCEEDED:
        last = {"namespace": cron.namespace, "name": dv.name if dv else ""}
        if old.get("lastImportedPVC") != last:
            status["lastImportedPVC"] = last
            status["lastImportTimestamp"] = dvs.timestamp(ctx.now)
        status["sourceFormat"] = "pvc"
        progressing = ("False", "No current import", "NoImport")
        up_to_date = ("True", "Latest import is up to date", "UpToDate")
    elif phase == dvs.SCHEDULED:
        progressing = ("False", "Import is scheduled", "ImportScheduled")
        up_to_date = ("False", "Import is progressing", "ImportProgressing")
    elif phase == dvs.IN_PROGRESS:
        progressing = ("True", "Import is progressing", "ImportProgressing")
        up_to_date = ("False", "Import is progressing", "ImportProgressing")
    elif dv is not None:
        progressing = ("False", f"Import DataVolume phase {phase}", phase)
        up_to_date = ("False", "Import is progressing", "ImportProgressing")
    else:
        progressing = ("False", "No current import", "NoImport")
        up_to_date = ("False", "No source digest", "NoDigest") if not d else (
            "False", "Import is progressing", "ImportProgressing")  # fmt: skip
    status["conditions"] = [
        dvs.condition(old, "Progressing", progressing[0], progressing[2], progressing[1], ctx.now),
        dvs.condition(old, "UpToDate", up_to_date[0], up_to_date[2], up_to_date[1], ctx.now),
    ]
    return status
