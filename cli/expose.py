"""`virtstream expose (vm|vmi|vmirs) NAME --name SVC [--port P] [--target-port T] [--type T]
[--protocol P] [--port-name N] [--selector K=V,...]`: virtctl's expose. A Service whose
selector is the VMI's `vmi.kubevirt.io/id` label (a VM's: its VMI's, which has the VM's
name), or the replica set's matchLabels, owned by what it exposes; without `--port`, the
ports the pod network's interface declares. virtctl's words for every refusal
(pkg/virtctl/expose/expose.go)."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any

import typer

from client.api import ApiError, Client
from projections.launcher_pods import vmi_id

JSON = dict[str, Any]
KINDS = {
    **dict.fromkeys(("vmi", "vmis", "virtualmachineinstance", "virtualmachineinstances"), "vmi"),
    **dict.fromkeys(("vm", "vms", "virtualmachine", "virtualmachines"), "vm"),
    **dict.fromkeys(
        (
            "vmirs",
            "vmirss",
            "virtualmachineinstancereplicaset",
            "virtualmachineinstancereplicasets",
        ),
        "vmirs",
    ),
}
OWNERS = {
    "vmi": ("VirtualMachineInstance", "kubevirt.io/v1"),
    "vm": ("VirtualMachine", "kubevirt.io/v1"),
    "vmirs": ("VirtualMachineInstanceReplicaSet", "kubevirt.io/v1"),
}
SERVICE_TYPES = {"clusterip": "ClusterIP", "nodeport": "NodePort", "loadbalancer": "LoadBalancer"}


class ExposeError(ValueError):
    pass


def service_type(text: str) -> str:
    if text.lower() == "externalname":
        raise ExposeError(f"type: {text} not supported")
    found = SERVICE_TYPES.get(text.lower())
    if found is None:
        raise ExposeError(f"unknown service type: {text}")
    return found


def protocol_of(text: str) -> str:
    if text.lower() not in ("tcp", "udp"):
        raise ExposeError(f"unknown protocol: {text}")
    return text.upper()


def _pod_network_ports(spec: JSON) -> list[JSON]:
    """The ports of the interface on the pod network, as virtctl names them (port-N)."""
    pod = next((n["name"] for n in spec.get("networks") or [] if "pod" in n), None)
    interfaces = ((spec.get("domain") or {}).get("devices") or {}).get("interfaces") or []
    iface = next((i for i in interfaces if pod is not None and i.get("name") == pod), None)
    return [
        {"name": f"port-{n}", "protocol": p.get("protocol") or "TCP", "port": p["port"]}
        for n, p in enumerate((iface or {}).get("ports") or [], start=1)
    ]


def _target(text: str) -> int | str:
    return int(text) if text.isdigit() else text


def _labels(text: str) -> dict[str, str]:
    out = {}
    for term in filter(None, text.split(",")):
        k, sep, v = term.partition("=")
        if not sep or not k:
            raise ExposeError(f"invalid selector {term!r}: KEY=VALUE")
        out[k.strip()] = v.strip()
    return out


def service(
    kind: str,
    obj: JSON,
    *,
    name: str,
    port: int = 0,
    target_port: str = "",
    type_: str = "ClusterIP",
    protocol: str = "TCP",
    port_name: str = "",
    selector: str = "",
) -> JSON:
    """The Service virtctl would create for `obj` (a VM, VMI or replica set) (pure)."""
    meta = obj.get("metadata") or {}
    spec = obj.get("spec") or {}
    if kind == "vmirs":
        template = (spec.get("template") or {}).get("spec") or {}
        match = spec.get("selector") or {}
        if not match.get("matchLabels"):
            raise ExposeError(
                "cannot expose VirtualMachineInstanceReplicaSet without any selector labels"
            )
        if match.get("matchExpressions"):
            raise ExposeError(
                "cannot expose VirtualMachineInstanceReplicaSet with match expressions"
            )
        chosen = dict(match["matchLabels"])
    else:
        template = spec if kind == "vmi" else (spec.get("template") or {}).get("spec") or {}
        chosen = {"vmi.kubevirt.io/id": vmi_id(str(meta.get("name", "")))}
    if selector:
        chosen = _labels(selector)
    ports = _pod_network_ports(template)
    if port:
        one: JSON = {"protocol": protocol, "port": port}
        if port_name:
            one["name"] = port_name
        if target_port:
            one["targetPort"] = _target(target_port)
        ports = [one]
    if not ports:
        raise ExposeError("couldn't find port via --port flag or introspection")
    owner_kind, api_version = OWNERS[kind]
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": name,
            "namespace": meta.get("namespace"),
            "ownerReferences": [
                {
                    "apiVersion": api_version,
                    "kind": owner_kind,
                    "name": meta.get("name"),
                    "uid": meta.get("uid"),
                    "controller": True,
                    "blockOwnerDeletion": False,
                }
            ],
        },
        "spec": {"ports": ports, "selector": chosen, "type": type_},
    }


FETCH_ERRORS = {
    "vmi": "VirtualMachineInstance",
    "vm": "VirtualMachine",
    "vmirs": "VirtualMachineInstanceReplicaSet",
}


def register(
    app: typer.Typer,
    client: Callable[[], AbstractContextManager[Client]],
    error: Callable[[str], typer.Exit],
) -> None:
    @app.command(context_settings={"help_option_names": ["-h", "--help"]})
    def expose(
        kind: str = typer.Argument(..., metavar="TYPE", help="vm, vmi or vmirs"),
        vm_name: str = typer.Argument(..., metavar="NAME"),
        name: str = typer.Option(..., "--name", help="Name of the service created."),
        port: int = typer.Option(0, "--port", help="The port that the service should serve on."),
        target_port: str = typer.Option("", "--target-port", help="The port on the VM."),
        type_: str = typer.Option(
            "ClusterIP", "--type", help="ClusterIP, NodePort, or LoadBalancer."
        ),
        protocol: str = typer.Option("TCP", "--protocol", help="The network protocol."),
        port_name: str = typer.Option("", "--port-name", help="Name of the port."),
        selector: str = typer.Option("", "--selector", help="KEY=VALUE,... instead of the VM's"),
        namespace: str | None = typer.Option(None, "--namespace", "-n", help="Namespace"),
    ) -> None:
        """Expose a virtual machine instance, virtual machine, or virtual machine instance
        replica set as a new service."""
        which = KINDS.get(kind.lower())
        try:
            if which is None:
                raise ExposeError(f"unsupported resource type: {kind}")
            chosen_type, chosen_protocol = service_type(type_), protocol_of(protocol)
        except ExposeError as e:
            raise error(str(e)) from None
        with client() as c:
            try:
                obj = c.get(which, vm_name, namespace, raw=True)
            except ApiError as e:
                raise error(f"error fetching {FETCH_ERRORS[which]}: {e}") from None
            try:
                body = service(
                    which, obj, name=name, port=port, target_port=target_port,
                    type_=chosen_type, protocol=chosen_protocol, port_name=port_name,
                    selector=selector,
                )  # fmt: skip
            except ExposeError as e:
                raise error(str(e)) from None
            try:
                c.create(body, namespace, raw=True)
            except ApiError as e:
                raise error(f"service creation failed: {e}") from None
        typer.echo(f"Service {name} successfully created for {kind} {vm_name}")
