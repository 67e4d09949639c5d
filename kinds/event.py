"""Events (core/v1 and events.k8s.io/v1): read-only kinds over the Event records the read
side derives from the log (`projections/kube_events.py`). Nothing appends an Event: the
api serves get, list and watch, and refuses writes (405), as a view of the log.

Both versions render the same record; core/v1 is the one the read side renders and keeps
(kubectl's `get events -w` and `describe` read core/v1); events.k8s.io/v1 renders per
request and watches core/v1's changes converted."""

from __future__ import annotations

from typing import Any

import msgspec

from events.objects import ObjectMeta
from kinds.columns import PrinterColumn
from kinds.spec import KindSpec
from projections import kube_events
from projections.cluster import Cluster
from projections.kube_events import InvolvedObject, KubeEventView
from projections.render import rfc3339

JSON = dict[str, Any]
GROUP = "events.k8s.io"


class _Object(msgspec.Struct, rename="camel", omit_defaults=True, kw_only=True):
    pass


class ObjectReference(_Object):
    kind: str | None = None
    namespace: str | None = None
    name: str | None = None
    uid: str | None = None
    api_version: str | None = None
    resource_version: str | None = None
    field_path: str | None = None


class EventSource(_Object):
    component: str | None = None
    host: str | None = None


class EventSeries(_Object):
    count: int | None = None
    last_observed_time: str | None = None


class Event(_Object):
    """core/v1 Event."""

    api_version: str = "v1"
    kind: str = "Event"
    metadata: ObjectMeta = msgspec.field(default_factory=ObjectMeta)
    involved_object: ObjectReference = msgspec.field(default_factory=ObjectReference)
    reason: str | None = None
    message: str | None = None
    source: EventSource | None = None
    first_timestamp: str | None = None
    last_timestamp: str | None = None
    count: int | None = None
    type: str | None = None
    event_time: str | None = None
    series: EventSeries | None = None
    action: str | None = None
    related: ObjectReference | None = None
    reporting_component: str | None = None
    reporting_instance: str | None = None


class EventV1(_Object):
    """events.k8s.io/v1 Event."""

    api_version: str = f"{GROUP}/v1"
    kind: str = "Event"
    metadata: ObjectMeta = msgspec.field(default_factory=ObjectMeta)
    event_time: str | None = None
    series: EventSeries | None = None
    reporting_controller: str | None = None
    reporting_instance: str | None = None
    action: str | None = None
    reason: str | None = None
    regarding: ObjectReference | None = None
    related: ObjectReference | None = None
    note: str | None = None
    type: str | None = None
    deprecated_source: EventSource | None = None
    deprecated_first_timestamp: str | None = None
    deprecated_last_timestamp: str | None = None
    deprecated_count: int | None = None


def _reference(o: InvolvedObject) -> JSON:
    out = {"kind": o.kind, "name": o.name, "uid": o.uid, "apiVersion": o.api_version}
    return ({"namespace": o.namespace} if o.namespace else {}) | out


def _metadata(r: KubeEventView) -> JSON:
    return {
        "name": r.name,
        "namespace": r.namespace,
        "uid": r.uid,
        "resourceVersion": str(r.resource_version),
        "creationTimestamp": rfc3339(r.first_at),
    }


def _source(r: KubeEventView) -> JSON:
    return {"component": r.component} | ({"host": r.host} if r.host else {})


def render_core(_: Cluster, r: KubeEventView, _now: float) -> JSON:
    """As client-go's recorder writes one (`reportingComponent` and `-Instance` are the
    source's, `eventTime` unset) and its correlator counts repeats on it."""
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": _metadata(r),
        "involvedObject": _reference(r.involved),
        "reason": r.reason,
        "message": r.message,
        "source": _source(r),
        "firstTimestamp": rfc3339(r.first_at),
        "lastTimestamp": rfc3339(r.last_at),
        "count": r.count,
        "type": r.type,
        "eventTime": None,
        "reportingComponent": r.component,
        "reportingInstance": r.host,
    }


def render_v1(c: Cluster, r: KubeEventView, now: float) -> JSON:
    return to_v1(render_core(c, r, now))


def to_v1(core: JSON) -> JSON:
    """A core/v1 Event as the API server converts it to events.k8s.io/v1: `regarding`,
    `note`, the deprecated* fields, `series` once it repeated, and `eventTime` (required
    there, and validated by its clients) the first occurrence as a MicroTime."""
    first = core.get("firstTimestamp") or ""
    count = core.get("count") or 1
    out: JSON = {
        "apiVersion": f"{GROUP}/v1",
        "kind": "Event",
        "metadata": core.get("metadata") or {},
        "eventTime": f"{first[:-1]}.000000Z" if first else None,
        "reportingController": core.get("reportingComponent", ""),
        "reportingInstance": core.get("reportingInstance", ""),
        "reason": core.get("reason", ""),
        "regarding": core.get("involvedObject") or {},
        "note": core.get("message", ""),
        "type": core.get("type", ""),
        "deprecatedSource": core.get("source") or {},
        "deprecatedFirstTimestamp": first or None,
        "deprecatedLastTimestamp": core.get("lastTimestamp"),
        "deprecatedCount": count,
    }
    if count > 1 and core.get("lastTimestamp"):
        last = core["lastTimestamp"]
        out["series"] = {"count": count, "lastObservedTime": f"{last[:-1]}.000000Z"}
    return out


def _records(c: Cluster) -> dict[str, KubeEventView]:
    return c.kube_events.table if c.kube_events is not None else {}


SPEC = KindSpec(
    group="",
    version="v1",
    kind="Event",
    plural="events",
    singular="event",
    short_names=("ev",),
    verbs=("get", "list", "watch"),
    event_kind=kube_events.KIND,
    object_type=Event,
    printer_columns=(
        PrinterColumn("Last Seen", "date", ".lastTimestamp"),
        PrinterColumn("Type", "string", ".type"),
        PrinterColumn("Reason", "string", ".reason"),
        PrinterColumn("Object", "string", ".involvedObject.name"),
        PrinterColumn("Message", "string", ".message"),
    ),
    table=_records,
    render=render_core,
)

SPEC_V1 = KindSpec(
    group=GROUP,
    version="v1",
    kind="Event",
    plural="events",
    singular="event",
    short_names=("ev",),
    verbs=("get", "list", "watch"),
    event_kind=kube_events.KIND,
    object_type=EventV1,
    table=_records,
    render=render_v1,
    convert=to_v1,  # its watches follow core/v1's renders
)

SPECS = (SPEC, SPEC_V1)
