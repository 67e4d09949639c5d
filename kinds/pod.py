"""Pods (core/v1): a read-only view of the VMIs' launchers, one `virt-launcher-<vmi>-xxxxx`
per VMI, rendered on read from the VMI (`projections/launcher_pods.py`). get, list and
watch (a VMI's change is its pod's), the API server's pod field selectors; the pod's
`log` is its launcher's (services/api/pod_logs.py). Nothing appends a pod: writes are 405."""

from __future__ import annotations

from typing import Any

import msgspec

from events.meta import Kind
from events.objects import ObjectMeta
from kinds.columns import AGE, NAME, Column
from kinds.spec import KindSpec
from projections.cluster import Cluster
from projections.launcher_pods import PodTable, render_pod
from projections.render import render_vmi
from projections.views import VMIView

JSON = dict[str, Any]
# the API server's field labels of pods (pkg/registry/core/pod/strategy.go ToSelectableFields)
FIELDS = (
    "metadata.name",
    "metadata.namespace",
    "spec.nodeName",
    "spec.restartPolicy",
    "spec.schedulerName",
    "spec.serviceAccountName",
    "spec.hostNetwork",
    "status.phase",
    "status.podIP",
    "status.nominatedNodeName",
)


class Pod(msgspec.Struct, rename="camel", omit_defaults=True, kw_only=True):
    """core/v1 Pod, as far as a launcher's is shown (its spec and status as rendered)."""

    api_version: str = "v1"
    kind: str = "Pod"
    metadata: ObjectMeta = msgspec.field(default_factory=ObjectMeta)
    spec: dict[str, Any] | None = None
    status: dict[str, Any] | None = None


# ------------------------------------------------------------------ columns
# the API server's pod printer (pkg/printers/internalversion), for kubectl's Table and
# `virtstream get pods`
def ready(obj: JSON) -> str:
    statuses = (obj.get("status") or {}).get("containerStatuses") or []
    total = len((obj.get("spec") or {}).get("containers") or [])
    return f"{sum(1 for c in statuses if c.get('ready'))}/{total}"


def status(obj: JSON) -> str:
    """The API server's pod printer's STATUS: the phase, a container's waiting or
    terminated reason, Terminating while deleted."""
    status = obj.get("status") or {}
    reason = status.get("reason") or status.get("phase") or ""
    running = False
    for c in reversed(status.get("containerStatuses") or []):
        state = c.get("state") or {}
        if (state.get("waiting") or {}).get("reason"):
            reason = state["waiting"]["reason"]
        elif (state.get("terminated") or {}).get("reason"):
            reason = state["terminated"]["reason"]
        elif c.get("ready") and state.get("running") is not None:
            running = True
    if reason == "Completed" and running:
        reason = "Running"
    if (obj.get("metadata") or {}).get("deletionTimestamp"):
        reason = "Terminating"
    return str(reason)


def gates(obj: JSON) -> str:
    gates = [g.get("conditionType") for g in (obj.get("spec") or {}).get("readinessGates") or []]
    if not gates:
        return "<none>"
    true = {c.get("type") for c in (obj.get("status") or {}).get("conditions") or []
            if c.get("status") == "True"}  # fmt: skip
    return f"{sum(1 for g in gates if g in true)}/{len(gates)}"


COLUMNS = (
    NAME,
    Column("READY", lambda o, _now: ready(o)),
    Column("STATUS", lambda o, _now: status(o)),
    Column("RESTARTS", lambda o, _now: "0"),
    AGE,
    Column("IP", lambda o, _now: (o.get("status") or {}).get("podIP") or "<none>", wide=True),
    Column("NODE", lambda o, _now: (o.get("spec") or {}).get("nodeName") or "<none>", wide=True),
)


def _render(cluster: Cluster, vmi: VMIView, _now: float) -> JSON:
    return render_pod(render_vmi(cluster, vmi), vmi.pod_address)


SPEC = KindSpec(
    group="",
    version="v1",
    kind="Pod",
    plural="pods",
    singular="pod",
    short_names=("po",),
    categories=("all",),
    verbs=("get", "list", "watch"),
    event_kind=Kind.VMI,
    object_type=Pod,
    subresource_group="",
    streams=("log",),
    field_labels=FIELDS,
    columns=COLUMNS,
    table=PodTable,
    render=_render,
    convert=render_pod,  # its watches follow the VMIs' renders
)
