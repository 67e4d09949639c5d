"""The VirtualMachineExport controller, pure (KubeVirt's pkg/storage/export/export:
export.go, vm-source.go, links.go). Here the api is the export server and its proxy, so
no pod or service is made: the export's status says what the api serves.

- Token: `spec.tokenSecretRef` names the user's Secret (key `token`); without one the
  controller creates `export-token-<export>` (owned by the export) with a token derived
  from a key only the controller holds (HMAC of the export's uid), so deciding again gives
  the same Secret and no reader of the log or of the export can compute it.
- Phase: `Pending` while a source VM runs (Ready False `InUse`, "Virtual Machine <ns>/<name>
  is running") or a source snapshot is not ready; `Skipped` for a VM without claims (or
  missing: KubeVirt finds no volumes) (`VMNoVolumes`) or a snapshot without volume
  backups (`VMSnapshotNoVolumes`); else `Ready` (Ready True
  `PodReady`) with `links.internal` and `links.external`: per volume the formats `raw`
  (`.../volumes/<claim>/disk.img`) and `gzip` (`disk.img.gz`), and the manifests `all` and
  `auth-header-secret`.
- `ttlDuration` (default 2h) from its creation: `ttlExpirationTime`; past it the export is
  deleted, and with it (the garbage collector) its generated Secret."""

from __future__ import annotations

import base64
import hashlib
import hmac
from typing import Any

from events.catalog import ResourceCreated, ResourceDeleted
from events.envelope import Context, Decision
from events.meta import Aggregate, ResourceKind
from projections.cluster import Cluster, key
from projections.exports import GROUP_VERSION, Exported, base_path, exported, secret_name
from projections.render import rfc3339
from projections.views import ResourceView
from services.controller import emit
from services.controller.snapshot import parse_duration

JSON = dict[str, Any]
DEFAULT_TTL = 7200.0  # KubeVirt's 2h
# KubeVirt's reasons (export.go, vm-source.go)
POD_READY, IN_USE, INITIALIZING = "PodReady", "InUse", "Initializing"
NO_VOLUMES, NO_SNAPSHOT_VOLUMES = "VMNoVolumes", "VMSnapshotNoVolumes"
NO_KEY = "no token key (--export-key-file): name a Secret in spec.tokenSecretRef"


def token(key_: bytes, export_uid: str) -> str:
    return hmac.new(key_, f"vmexport/{export_uid}".encode(), hashlib.sha256).hexdigest()[:32]


def _links(base_url: str, export: ResourceView, volumes: list[Exported], where: str) -> JSON:
    base = f"{base_url}{base_path(export.namespace, export.name)}"
    return {
        "volumes": [
            {
                "name": v.name,
                "formats": [
                    {"format": "raw", "url": f"{base}/volumes/{v.name}/disk.img"},
                    {"format": "gzip", "url": f"{base}/volumes/{v.name}/disk.img.gz"},
                ],
            }
            for v in volumes
        ],
        "manifests": [
            {"type": "all", "url": f"{base}/{where}/manifests/all"},
            {"type": "auth-header-secret", "url": f"{base}/{where}/manifests/secret"},
        ],
    }


def _condition(ctype: str, status: str, reason: str, message: str, old: JSON, now: float) -> JSON:
    before = {c.get("type"): c for c in old.get("conditions") or []}
    prev = before.get(ctype)
    same = prev is not None and (prev.get("status"), prev.get("reason")) == (status, reason)
    return {
        "type": ctype,
        "status": status,
        "reason": reason,
        "message": message,
        "lastProbeTime": None,
        "lastTransitionTime": prev.get("lastTransitionTime") if same and prev else rfc3339(now),
    }


def reconcile_export(
    cluster: Cluster, export: ResourceView, ctx: Context, *, key_: bytes | None, base_url: str
) -> list[Decision]:
    old: JSON = dict(export.status)
    ttl = parse_duration(export.spec.get("ttlDuration"), DEFAULT_TTL)
    expires = export.created_at + ttl
    if ctx.now >= expires:
        gone = ResourceDeleted(
            meta=emit.meta(
                ctx,
                emit.resource_aggregate(ResourceKind.EXPORT, export),
                f"vmexport-ttl/{export.uid}",
            )
        )
        return [Decision(gone, occ=False)]
    out: list[Decision] = []
    name = secret_name(export)
    secrets = cluster.resources[ResourceKind.SECRET]
    if not export.spec.get("tokenSecretRef") and key(export.namespace, name) not in secrets:
        if key_ is None:  # nothing to derive a token from: the user must name a Secret
            pending: JSON = {
                "phase": "Pending",
                "conditions": [_condition("Ready", "False", INITIALIZING, NO_KEY, old, ctx.now)],
            }
            return emit.status_change(ResourceKind.EXPORT, export, pending, ctx)
        out.append(_create_secret(export, name, token(key_, export.uid), ctx))
    source = export.spec.get("source") or {}
    kind, src = str(source.get("kind") or ""), str(source.get("name") or "")
    status: JSON = {"tokenSecretRef": name, "ttlExpirationTime": rfc3339(expires)}
    if kind == "VirtualMachine":
        status["virtualMachineName"] = src
    volumes = exported(cluster, export)
    vm = cluster.vms.get(key(export.namespace, src)) if kind == "VirtualMachine" else None
    vmi = cluster.vmi_of_vm(vm) if vm is not None else None
    if vmi is not None and not vmi.final:
        status["phase"] = "Pending"
        message = f"Virtual Machine {export.namespace}/{vmi.name} is running"
        ready = _condition("Ready", "False", IN_USE, message, old, ctx.now)
    elif (kind == "VirtualMachine" and not volumes) or volumes == []:
        status["phase"] = "Skipped"
        reason = NO_VOLUMES if kind == "VirtualMachine" else NO_SNAPSHOT_VOLUMES
        ready = _condition("Ready", "False", reason, "", old, ctx.now)
    elif volumes is None:
        status["phase"] = "Pending"
        ready = _condition("Ready", "False", INITIALIZING, "", old, ctx.now)
    else:
        status["phase"] = "Ready"
        ready = _condition("Ready", "True", POD_READY, "", old, ctx.now)
        status["links"] = {
            "internal": _links(base_url, export, volumes, "internal"),
            "external": _links(base_url, export, volumes, "external"),
        }
    status["conditions"] = [ready]
    return emit.status_change(ResourceKind.EXPORT, export, status, ctx) + out


def _create_secret(export: ResourceView, name: str, value: str, ctx: Context) -> Decision:
    decision_key = f"vmexport-token/{export.uid}"
    uid = emit.new_uid(ctx, decision_key)
    manifest = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {
            "name": name,
            "namespace": export.namespace,
            "uid": uid,
            "ownerReferences": [
                {
                    "apiVersion": GROUP_VERSION,
                    "kind": "VirtualMachineExport",
                    "name": export.name,
                    "uid": export.uid,
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        },
        "type": "Opaque",
        "data": {"token": base64.b64encode(value.encode()).decode()},
    }
    agg = Aggregate(kind=ResourceKind.SECRET, namespace=export.namespace, name=name, uid=uid)
    return Decision(ResourceCreated(meta=emit.meta(ctx, agg, decision_key), manifest=manifest))
