"""Services (core/v1) and their Endpoints and
EndpointSlices.

A Service is a generic kind (the Resource* events): created, updated, patched and deleted
as any, with the API server's defaults and checks (`_admit`): type ClusterIP unless said,
a cluster IP from the service CIDR, a node port for each port of a NodePort Service
(30000-32767, none two Services hold), TCP, `targetPort` the port. Its Endpoints are
rendered on read (`projections/services.py`): the launcher pods its selector matches,
the VMIs' labels with KubeVirt's (`virtstream expose` selects `vmi.kubevirt.io/id`, as
`virtctl expose` does). A NodePort is served on the api's host and relayed to a selected
guest (`services/api/node_ports.py`)."""

from __future__ import annotations

from typing import Any

import msgspec

from core.errors import Resource, invalid
from events.objects import ObjectMeta, StatusCause
from kinds.columns import AGE, NAME, Column
from kinds.resource import resource_spec
from kinds.spec import KindSpec
from projections import services
from projections.cluster import Cluster
from projections.evolve import evolve_resource

JSON = dict[str, Any]
KIND = services.KIND
TYPES = ("ClusterIP", "NodePort", "LoadBalancer", "ExternalName")


class _Object(msgspec.Struct, rename="camel", omit_defaults=True, kw_only=True):
    pass


class ServicePort(_Object):
    port: int
    name: str | None = None
    protocol: str | None = None
    app_protocol: str | None = None
    target_port: int | str | None = None
    node_port: int | None = None


class ServiceSpec(_Object):
    type: str | None = None
    selector: dict[str, str] | None = None
    ports: list[ServicePort] | None = None
    cluster_ip: str | None = msgspec.field(default=None, name="clusterIP")
    cluster_ips: list[str] | None = msgspec.field(default=None, name="clusterIPs")
    external_ips: list[str] | None = msgspec.field(default=None, name="externalIPs")
    external_name: str | None = None
    session_affinity: str | None = None
    ip_families: list[str] | None = None
    ip_family_policy: str | None = None
    internal_traffic_policy: str | None = None
    external_traffic_policy: str | None = None
    load_balancer_ip: str | None = msgspec.field(default=None, name="loadBalancerIP")
    publish_not_ready_addresses: bool | None = None


class Service(_Object):
    """core/v1 Service."""

    api_version: str = "v1"
    kind: str = "Service"
    metadata: ObjectMeta = msgspec.field(default_factory=ObjectMeta)
    spec: ServiceSpec = msgspec.field(default_factory=ServiceSpec)
    status: dict[str, Any] | None = None


class Endpoints(_Object):
    """core/v1 Endpoints (rendered, never written)."""

    api_version: str = "v1"
    kind: str = "Endpoints"
    metadata: ObjectMeta = msgspec.field(default_factory=ObjectMeta)
    subsets: list[dict[str, Any]] | None = None


class EndpointSlice(_Object):
    """discovery.k8s.io/v1 EndpointSlice (rendered, never written)."""

    api_version: str = "discovery.k8s.io/v1"
    kind: str = "EndpointSlice"
    metadata: ObjectMeta = msgspec.field(default_factory=ObjectMeta)
    address_type: str = "IPv4"
    endpoints: list[dict[str, Any]] | None = None
    ports: list[dict[str, Any]] | None = None


# ------------------------------------------------------------------ columns
# the API server's service and endpoints printers, for kubectl's Table and `virtstream get`
def ports(obj: JSON) -> str:
    out = []
    for p in (obj.get("spec") or {}).get("ports") or []:
        node = f":{p['nodePort']}" if p.get("nodePort") else ""
        out.append(f"{p.get('port')}{node}/{p.get('protocol') or 'TCP'}")
    return ",".join(out) or "<none>"


def external(obj: JSON) -> str:
    spec = obj.get("spec") or {}
    if spec.get("type") == "ExternalName":
        return str(spec.get("externalName") or "<none>")
    ips = spec.get("externalIPs") or []
    if spec.get("type") == "LoadBalancer" and not ips:
        return "<pending>"
    return ",".join(ips) or "<none>"


def selector(obj: JSON) -> str:
    sel = (obj.get("spec") or {}).get("selector") or {}
    return ",".join(f"{k}={v}" for k, v in sorted(sel.items())) or "<none>"


def endpoints(obj: JSON) -> str:
    """The API server's endpoints printer: up to three ip:port, then `+ N more...`."""
    shown: list[str] = []
    for subset in obj.get("subsets") or []:
        ports = [p.get("port") for p in subset.get("ports") or []] or [None]
        for a in subset.get("addresses") or []:
            shown.extend(f"{a['ip']}:{p}" if p else a["ip"] for p in ports)
    if not shown:
        return "<none>"
    more = len(shown) - 3
    return ",".join(shown[:3]) + (f" + {more} more..." if more > 0 else "")


def _type(o: JSON, _now: float = 0.0) -> str:
    return str((o.get("spec") or {}).get("type", ""))


def _cluster_ip(o: JSON, _now: float = 0.0) -> str:
    return str((o.get("spec") or {}).get("clusterIP") or "<none>")


SERVICE_COLUMNS = (
    NAME,
    Column("TYPE", _type),
    Column("CLUSTER-IP", _cluster_ip),
    Column("EXTERNAL-IP", lambda o, _now: external(o)),
    Column("PORT(S)", lambda o, _now: ports(o)),
    AGE,
    Column("SELECTOR", lambda o, _now: selector(o), wide=True),
)
ENDPOINTS_COLUMNS = (NAME, Column("ENDPOINTS", lambda o, _now: endpoints(o)), AGE)


RESOURCE = Resource("services", "", "Service")


def _refuse(name: str, causes: list[StatusCause]) -> None:
    """The API server's 422: `Service "x" is invalid: field: Message`."""
    shown = [f"{c.field}: {c.message}" for c in causes]
    text = shown[0] if len(shown) == 1 else "[" + ", ".join(shown) + "]"
    raise invalid(RESOURCE, name, causes, f'Service "{name}" is invalid: {text}')


def _cause(kind: str, field: str, message: str) -> StatusCause:
    return StatusCause(type=kind, field=field, message=message)


def _admit(cluster: Cluster, typed: Service, uid: str) -> tuple[Service, list[Any]]:
    """The API server's defaults and validation of a Service (pkg/apis/core/validation,
    the service REST's allocators), an update keeping what was allocated."""
    name = typed.metadata.name or ""
    k = f"{typed.metadata.namespace}/{name}"
    current = services.services(cluster).get(k)
    before = current.spec if current is not None and current.uid == uid else {}
    spec = typed.spec
    spec.type = spec.type or "ClusterIP"
    causes: list[StatusCause] = []
    if spec.type not in TYPES:
        causes.append(
            _cause(
                "FieldValueNotSupported",
                "spec.type",
                f'Unsupported value: "{spec.type}": supported values: '
                + ", ".join(f'"{t}"' for t in TYPES),
            )
        )
    if spec.type == "ExternalName":
        if not spec.external_name:
            causes.append(_cause("FieldValueRequired", "spec.externalName", "Required value"))
    elif not spec.ports:
        causes.append(_cause("FieldValueRequired", "spec.ports", "Required value"))
    held = services.used_node_ports(cluster, but=k)
    old_ports = {(p.get("port"), p.get("protocol")): p.get("nodePort")
                 for p in before.get("ports") or []}  # fmt: skip
    seen: set[tuple[int, str]] = set()
    for i, p in enumerate(spec.ports or []):
        here = f"spec.ports[{i}]"
        p.protocol = p.protocol or "TCP"
        if p.protocol not in ("TCP", "UDP", "SCTP"):
            causes.append(
                _cause(
                    "FieldValueNotSupported",
                    f"{here}.protocol",
                    f'Unsupported value: "{p.protocol}": supported values: "SCTP", "TCP", "UDP"',
                )
            )
        if not 0 < p.port < 65536:
            causes.append(
                _cause(
                    "FieldValueInvalid",
                    f"{here}.port",
                    f"Invalid value: {p.port}: must be between 1 and 65535, inclusive",
                )
            )
        if (p.port, p.protocol) in seen:
            causes.append(
                _cause(
                    "FieldValueDuplicate", f"{here}", f'Duplicate value: "{p.port}/{p.protocol}"'
                )
            )
        seen.add((p.port, p.protocol))
        if len(spec.ports or []) > 1 and not p.name:
            causes.append(_cause("FieldValueRequired", f"{here}.name", "Required value"))
        if p.target_port in (None, 0, ""):
            p.target_port = p.port
        if spec.type in ("NodePort", "LoadBalancer"):
            if p.node_port is None:
                p.node_port = old_ports.get((p.port, p.protocol)) or services.allocate_node_port(
                    uid, i, held
                )
                if p.node_port is None:
                    causes.append(
                        _cause(
                            "FieldValueInvalid", f"{here}.nodePort", "Internal error: range is full"
                        )
                    )
                    continue
            elif p.node_port not in services.NODE_PORTS:
                causes.append(
                    _cause(
                        "FieldValueInvalid",
                        f"{here}.nodePort",
                        f"Invalid value: {p.node_port}: provided port is not in the valid "
                        "range. The range of valid ports is 30000-32767",
                    )
                )
            elif p.node_port in held and p.node_port != old_ports.get((p.port, p.protocol)):
                causes.append(
                    _cause(
                        "FieldValueInvalid",
                        f"{here}.nodePort",
                        f"Invalid value: {p.node_port}: provided port is already allocated",
                    )
                )
            held.add(p.node_port)
        elif p.node_port is not None:
            causes.append(
                _cause(
                    "FieldValueForbidden",
                    f"{here}.nodePort",
                    "Forbidden: may not be used when `type` is 'ClusterIP'",
                )
            )
    if causes:
        _refuse(name, causes)
    if spec.type != "ExternalName":
        spec.cluster_ip = (
            spec.cluster_ip or before.get("clusterIP") or services.allocate_cluster_ip(cluster, uid)
        )
        spec.cluster_ips = spec.cluster_ips or [spec.cluster_ip]
        spec.ip_families = spec.ip_families or ["IPv4"]
        spec.ip_family_policy = spec.ip_family_policy or "SingleStack"
        spec.internal_traffic_policy = spec.internal_traffic_policy or "Cluster"
    spec.session_affinity = spec.session_affinity or "None"
    if spec.type in ("NodePort", "LoadBalancer"):
        spec.external_traffic_policy = spec.external_traffic_policy or "Cluster"
    typed.status = None
    return typed, []


def _render(cluster: Cluster, view: Any, now: float) -> JSON:
    obj = _generic_render(cluster, view, now)
    obj["status"] = {"loadBalancer": {}}
    return obj


SERVICE = resource_spec(
    group="",
    version="v1",
    kind="Service",
    plural="services",
    singular="service",
    short_names=("svc",),
    event_kind=KIND,
    object_type=Service,
    admit=_admit,
    subresource_group="",
)
_generic_render = SERVICE.render
SERVICE = msgspec.structs.replace(SERVICE, render=_render, columns=SERVICE_COLUMNS)

ENDPOINTS = KindSpec(
    group="",
    version="v1",
    kind="Endpoints",
    plural="endpoints",
    singular="endpoints",
    short_names=("ep",),
    verbs=("get", "list"),
    event_kind=KIND,
    object_type=Endpoints,
    subresource_group="",
    columns=ENDPOINTS_COLUMNS,
    table=services.services,
    render=lambda c, v, _now: services.render_endpoints(c, v),
    evolve=evolve_resource,
)
ENDPOINT_SLICES = KindSpec(
    group="discovery.k8s.io",
    version="v1",
    kind="EndpointSlice",
    plural="endpointslices",
    singular="endpointslice",
    verbs=("get", "list"),
    event_kind=KIND,
    object_type=EndpointSlice,
    subresource_group="",
    table=services.services,
    render=lambda c, v, _now: services.render_endpoint_slice(c, v),
    evolve=evolve_resource,
)
SPECS = (SERVICE, ENDPOINTS, ENDPOINT_SLICES)
