"""Pods (core/v1): a read-only view of the VMIs' launchers, one `virt-launcher-<vmi>-xxxxx`
per VMI, rendered on read from the VMI (`projections/launcher_pods.py`). get, list and
watch (a VMI's change is its pod's), the API server's pod field selectors; the pod's
`log` is its launcher's (services/api/pod_logs.py). Nothing appends a pod: writes are 405."""

from __future__ import annotations

from typing import Any

import msgspec

from events.meta import Kind
from events.objects import ObjectMeta
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


def _render(cluster: Cluster, vmi: VMIView, _now: float) -> JSON:
    return render_pod(render_vmi(cluster, vmi))


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
    table=PodTable,
    render=_render,
    convert=render_pod,  # its watches follow the VMIs' renders
)
