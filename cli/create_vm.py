"""`virtstream create vm`: a VirtualMachine manifest from flags, as `virtctl create vm`
writes it (instance type and preference by name, containerDisk volumes, ssh keys)."""

from __future__ import annotations

from typing import Any

JSON = dict[str, Any]
CLUSTER_INSTANCETYPE = "virtualmachineclusterinstancetype"
CLUSTER_PREFERENCE = "virtualmachineclusterpreference"
_KINDS = {
    "virtualmachineinstancetype": "VirtualMachineInstancetype",
    "vminstancetype": "VirtualMachineInstancetype",
    "virtualmachineclusterinstancetype": "VirtualMachineClusterInstancetype",
    "vmclusterinstancetype": "VirtualMachineClusterInstancetype",
    "virtualmachinepreference": "VirtualMachinePreference",
    "vmpref": "VirtualMachinePreference",
    "virtualmachineclusterpreference": "VirtualMachineClusterPreference",
    "vmcp": "VirtualMachineClusterPreference",
}


def _matcher(value: str, default_kind: str) -> JSON:
    """`NAME` or `KIND/NAME` (virtctl's form); the kind defaults to the cluster-wide one."""
    kind, _, name = value.rpartition("/")
    out: JSON = {"name": name}
    canonical = _KINDS.get((kind or default_kind).lower())
    if canonical is None:
        raise ValueError(f"unknown kind {kind!r} in {value!r}")
    if kind:  # virtctl writes the kind only when the user gave one
        out["kind"] = canonical
    return out


def _containerdisk(value: str, index: int, vm: str) -> JSON:
    """`src:IMAGE[,name:NAME]` (virtctl's params), or a bare image."""
    params: dict[str, str] = {}
    for part in value.split(","):
        key, sep, val = part.partition(":")
        if sep and key in ("src", "name", "bootorder"):
            params[key] = val
        elif not params:
            params["src"] = part
        else:
            raise ValueError(f"unknown volume-containerdisk parameter {part!r}")
    if not params.get("src"):
        raise ValueError(f"volume-containerdisk {value!r} names no image (src:IMAGE)")
    name = params.get("name") or f"{vm}-containerdisk-{index}"
    return {"name": name, "containerDisk": {"image": params["src"]}}


def vm_manifest(
    name: str,
    *,
    instancetype: str | None = None,
    preference: str | None = None,
    containerdisks: list[str] | None = None,
    run_strategy: str = "Always",
    memory: str | None = None,
    ssh_keys: list[str] | None = None,
) -> JSON:
    """The manifest; ValueError names what is wrong with a flag. `ssh_keys`: authorized
    keys in a NoCloud cloud-config (its volume `cloudinitdisk`), as virtctl's --ssh-key."""
    volumes = [_containerdisk(v, i, name) for i, v in enumerate(containerdisks or [])]
    if ssh_keys:
        config = "\n".join(
            ["#cloud-config", "ssh_authorized_keys:", *(f"  - {k}" for k in ssh_keys)]
        )
        volumes.append({"name": "cloudinitdisk", "cloudInitNoCloud": {"userData": config}})
    spec: JSON = {"runStrategy": run_strategy}
    if instancetype:
        spec["instancetype"] = _matcher(instancetype, CLUSTER_INSTANCETYPE)
    if preference:
        spec["preference"] = _matcher(preference, CLUSTER_PREFERENCE)
    domain: JSON = {"devices": {}}
    if not instancetype:
        # without an instance type virtctl sets guest memory (512Mi by default)
        domain["memory"] = {"guest": memory or "512Mi"}
    spec["template"] = {"metadata": {"creationTimestamp": None}, "spec": {"domain": domain}}
    if volumes:
        spec["template"]["spec"]["volumes"] = volumes
    return {
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachine",
        "metadata": {"name": name, "creationTimestamp": None},
        "spec": spec,
    }
