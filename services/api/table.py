"""`Accept: application/json;as=Table;v=v1;g=meta.k8s.io`: objects as a meta.k8s.io/v1
Table with the kind's printer columns, as the API server's CRD table convertor builds it
(a Name column, then KubeVirt's additionalPrinterColumns; Name and Age when a kind has
none), so `kubectl get` prints KubeVirt's columns. Nodes, a built-in kind, get the API
server's own node columns (Status, Roles, Age, Version; with `-o wide` Internal-IP,
External-IP, OS-Image, Kernel-Version, Container-Runtime); storage classes, claims and
volumes theirs (a default class's NAME marked `(default)`, ACCESS MODES as RWO, RWX).
Pure."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kinds import pod, service
from kinds import storage as kinds_storage
from kinds.columns import PrinterColumn, lookup
from kinds.spec import KindSpec
from projections.storage import DEFAULT_CLASS, SHORT_MODES

JSON = dict[str, Any]
NAME_DESCRIPTION = (
    "Name must be unique within a namespace. Is required when creating resources, "
    "although some resources may allow a client to request the generation of an "
    "appropriate name automatically."
)


def wants_table(accept: str) -> bool:
    """The first acceptable media type is a meta.k8s.io Table."""
    for part in accept.split(","):
        fields = [p.strip() for p in part.split(";")]
        params = dict(p.partition("=")[::2] for p in fields[1:])
        if params.get("as") == "Table" and params.get("g") == "meta.k8s.io":
            return True
        if fields[0] in ("application/json", "*/*"):
            return False
    return False


def human_duration(seconds: float) -> str:
    """apimachinery's `duration.HumanDuration`, which the API server's table convertor
    prints a date column with (`12s`, `5m3s`, `3h`, `2d4h`)."""
    s = int(seconds)
    if seconds < -1:
        return "<invalid>"
    if s < 0:
        return "0s"
    if s < 120:
        return f"{s}s"
    m = s // 60
    if m < 10:
        return f"{m}m{s % 60}s" if s % 60 else f"{m}m"
    if m < 180:
        return f"{m}m"
    h = s // 3600
    if h < 8:
        return f"{h}h{m % 60}m" if m % 60 else f"{h}h"
    if h < 48:
        return f"{h}h"
    d = h // 24
    if h < 24 * 8:
        return f"{d}d{h % 24}h" if h % 24 else f"{d}d"
    if d < 365 * 2:
        return f"{d}d"
    y = d // 365
    if d < 365 * 8:
        return f"{y}y{d % 365}d" if d % 365 else f"{y}y"
    return f"{y}y"


def _age(value: Any, now: float | None) -> Any:
    if now is None or not isinstance(value, str):
        return value
    try:
        then = dt.datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return value
    return human_duration(now - then)


@dataclass(frozen=True)
class Computed:
    """A column a built-in kind's printer computes (not a JSONPath)."""

    name: str
    value: Callable[[JSON], Any]
    priority: int = 0
    type: str = "string"
    description: str = ""
    at: Callable[[JSON, float | None], Any] | None = None  # a cell that reads the clock


TableColumn = PrinterColumn | Computed


def _node_status(obj: JSON) -> str:
    """kubectl's node STATUS: the Ready condition, then SchedulingDisabled if cordoned."""
    ready = lookup(obj, ".status.conditions[?(@.type=='Ready')].status")
    status = {"True": "Ready", "False": "NotReady"}.get(str(ready), "Unknown")
    if (obj.get("spec") or {}).get("unschedulable"):
        status += ",SchedulingDisabled"
    return status


ROLE_PREFIX = "node-role.kubernetes.io/"


def _node_roles(obj: JSON) -> str:
    labels = (obj.get("metadata") or {}).get("labels") or {}
    roles = sorted(
        {k[len(ROLE_PREFIX) :] for k in labels if k.startswith(ROLE_PREFIX) and k != ROLE_PREFIX}
        | ({labels["kubernetes.io/role"]} if labels.get("kubernetes.io/role") else set())
    )
    return ",".join(roles) or "<none>"


def _address(kind: str) -> Callable[[JSON], str]:
    def cell(obj: JSON) -> str:
        found = lookup(obj, f".status.addresses[?(@.type=='{kind}')].address")
        return str(found) if found else "<none>"

    return cell


def _node_info(field: str) -> Callable[[JSON], str]:
    def cell(obj: JSON) -> str:
        return str(lookup(obj, f".status.nodeInfo.{field}") or "<unknown>")

    return cell


NODE_COLUMNS: tuple[TableColumn, ...] = (
    Computed("Status", _node_status, description="The status of the node"),
    Computed("Roles", _node_roles, description="The roles of the node"),
    PrinterColumn("Age", "date", ".metadata.creationTimestamp"),
    Computed(
        "Version",
        lambda o: str(lookup(o, ".status.nodeInfo.kubeletVersion") or ""),
        description="Kubelet Version reported by the node.",
    ),
    Computed("Internal-IP", _address("InternalIP"), 1, description="List of internal IPs."),
    Computed("External-IP", _address("ExternalIP"), 1, description="List of external IPs."),
    Computed("OS-Image", _node_info("osImage"), 1, description="OS Image reported by the node."),
    Computed("Kernel-Version", _node_info("kernelVersion"), 1, description="Kernel Version."),
    Computed(
        "Container-Runtime",
        _node_info("containerRuntimeVersion"),
        1,
        description="Container Runtime Version reported by the node.",
    ),
)


def _since(value: Any, now: float | None) -> str:
    aged = _age(value, now)
    return aged if isinstance(aged, str) else "<unknown>"


def _last_seen(obj: JSON, now: float | None) -> str:
    """The API server's event printer: `5m`, or `5m (x3 over 20m)` for a repeat."""
    last = _since(obj.get("lastTimestamp") or obj.get("eventTime"), now)
    count = obj.get("count") or 1
    if count > 1:
        return f"{last} (x{count} over {_since(obj.get('firstTimestamp'), now)})"
    return last


def _event_object(obj: JSON) -> str:
    ref = obj.get("involvedObject") or {}
    return f"{str(ref.get('kind', '')).lower()}/{ref.get('name', '')}"


def _event_source(obj: JSON) -> str:
    src = obj.get("source") or {}
    return ", ".join(v for v in (src.get("component"), src.get("host")) if v)


# The API server's own columns for core/v1 Events (its printer, not a CRD's): no Name
# column first; the name is a wide one.
EVENT_COLUMNS: tuple[TableColumn, ...] = (
    Computed("Last Seen", lambda o: _last_seen(o, None), at=_last_seen),
    Computed("Type", lambda o: o.get("type", "")),
    Computed("Reason", lambda o: o.get("reason", "")),
    Computed("Object", _event_object),
    Computed("Subobject", lambda o: (o.get("involvedObject") or {}).get("fieldPath", ""), 1),
    Computed("Source", _event_source, 1),
    Computed("Message", lambda o: o.get("message", "")),
    Computed(
        "First Seen",
        lambda o: _since(o.get("firstTimestamp"), None),
        1,
        at=lambda o, now: _since(o.get("firstTimestamp"), now),
    ),
    Computed("Count", lambda o: str(o.get("count", "")), 1),
    Computed("Name", lambda o: (o.get("metadata") or {}).get("name", ""), 1),
)


# The API server's own pod columns (its printer, pkg/printers/internalversion)
POD_COLUMNS: tuple[TableColumn, ...] = (
    Computed("Ready", pod.ready, description="The aggregate readiness state of this pod"),
    Computed("Status", pod.status, description="The aggregate status of the containers"),
    Computed("Restarts", lambda o: "0", type="string", description="The number of restarts"),
    PrinterColumn("Age", "date", ".metadata.creationTimestamp"),
    Computed(
        "IP",
        lambda o: (o.get("status") or {}).get("podIP") or "<none>",
        1,
        description="IP address assigned to the pod",
    ),
    Computed(
        "Node",
        lambda o: (o.get("spec") or {}).get("nodeName") or "<none>",
        1,
        description="Name of the node the pod is assigned to",
    ),
    Computed("Nominated Node", lambda o: "<none>", 1, description="The nominated node"),
    Computed("Readiness Gates", pod.gates, 1, description="The readiness gates of the pod"),
)


SERVICE_COLUMNS: tuple[TableColumn, ...] = (
    Computed(
        "Type", lambda o: (o.get("spec") or {}).get("type", ""), description="The type of service"
    ),
    Computed(
        "Cluster-IP",
        lambda o: (o.get("spec") or {}).get("clusterIP") or "<none>",
        description="The cluster IP of the service",
    ),
    Computed("External-IP", service.external, description="The external IP of the service"),
    Computed("Port(s)", service.ports, description="The ports of the service"),
    PrinterColumn("Age", "date", ".metadata.creationTimestamp"),
    Computed("Selector", service.selector, 1, description="The selector of the service"),
)
ENDPOINTS_COLUMNS: tuple[TableColumn, ...] = (
    Computed("Endpoints", service.endpoints, description="Endpoints of the service"),
    PrinterColumn("Age", "date", ".metadata.creationTimestamp"),
)
# the built-in kinds' columns beside nodes' and events'
CORE_COLUMNS: dict[str, tuple[TableColumn, ...]] = {
    "Pod": POD_COLUMNS,
    "Service": SERVICE_COLUMNS,
    "Endpoints": ENDPOINTS_COLUMNS,
}


def _cell(column: TableColumn, obj: JSON, now: float | None = None) -> Any:
    if isinstance(column, Computed):
        return column.at(obj, now) if column.at is not None else column.value(obj)
    value = lookup(obj, column.json_path)
    if value is None or column.type == "date":
        return _age(value, now)  # without a clock: the timestamp itself
    if column.type == "string":
        return value if isinstance(value, str) else str(value).lower()
    return value


def _class_name(obj: JSON) -> str:
    """The API server's StorageClass NAME: the default one marked `(default)`."""
    meta = obj.get("metadata") or {}
    marked = str((meta.get("annotations") or {}).get(DEFAULT_CLASS, "")).lower() == "true"
    return f"{meta.get('name', '')} (default)" if marked else str(meta.get("name", ""))


def _modes(path: str) -> Callable[[JSON], str]:
    """ACCESS MODES as kubectl prints them: RWO, RWX, ..."""

    def cell(obj: JSON) -> str:
        modes = lookup(obj, path) or []
        return ",".join(SHORT_MODES.get(str(m), str(m)) for m in modes)

    return cell


def _claim_status(obj: JSON) -> str:
    """kubectl's claim STATUS: Terminating once its deletion began, else its phase."""
    if (obj.get("metadata") or {}).get("deletionTimestamp"):
        return "Terminating"
    return str((obj.get("status") or {}).get("phase") or "")


def _claim_column(c: PrinterColumn) -> TableColumn:
    if c.name == "Access Modes":
        return Computed(c.name, _modes(".status.accessModes"))
    if c.name == "Status":
        return Computed(c.name, _claim_status)
    return c


# the API server's own printers for the storage kinds (core and storage.k8s.io)
STORAGE_COLUMNS: dict[str, tuple[TableColumn, ...]] = {
    "StorageClass": (
        Computed("Name", _class_name, description=NAME_DESCRIPTION),
        *(c for c in kinds_storage.STORAGE_CLASS.printer_columns),
    ),
    "PersistentVolumeClaim": tuple(_claim_column(c) for c in kinds_storage.PVC.printer_columns),
    "PersistentVolume": tuple(
        Computed(c.name, _modes(".spec.accessModes")) if c.name == "Access Modes" else c
        for c in kinds_storage.PV.printer_columns
    ),
}


def columns(spec: KindSpec) -> tuple[TableColumn, ...]:
    if not spec.group and spec.kind == "Node":
        return NODE_COLUMNS
    if not spec.group and spec.kind == "Event":
        return EVENT_COLUMNS
    if spec.group in ("", "storage.k8s.io") and spec.kind in STORAGE_COLUMNS:
        return STORAGE_COLUMNS[spec.kind]
    if not spec.group and spec.kind in CORE_COLUMNS:
        return CORE_COLUMNS[spec.kind]
    return spec.shown_printer_columns


def table(
    cols: tuple[TableColumn, ...],
    items: list[JSON],
    resource_version: str = "",
    now: float | None = None,
) -> JSON:
    """`now`: the clock date columns are aged against. A Name column comes first unless
    the columns place their own."""
    named = not any(c.name == "Name" for c in cols)
    definitions = [
        *(
            [
                {
                    "name": "Name",
                    "type": "string",
                    "format": "name",
                    "description": NAME_DESCRIPTION,
                    "priority": 0,
                }
            ]
            if named
            else []
        ),
        *(
            {
                "name": c.name,
                "type": c.type,
                "format": "name" if c.name == "Name" and c.priority == 0 else "",
                "description": c.description,
                "priority": c.priority,
            }
            for c in cols
        ),
    ]
    rows = [
        {
            "cells": [
                *([obj.get("metadata", {}).get("name")] if named else []),
                *(_cell(c, obj, now) for c in cols),
            ],
            "object": {
                "kind": "PartialObjectMetadata",
                "apiVersion": "meta.k8s.io/v1",
                "metadata": obj.get("metadata", {}),
            },
        }
        for obj in items
    ]
    return {
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": {"resourceVersion": resource_version},
        "columnDefinitions": definitions,
        "rows": rows,
    }
