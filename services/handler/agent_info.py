"""What the guest agent says, in KubeVirt's shapes (pure): libvirt's `virDomainGetGuestInfo`
typed parameters (`os.id`, `user.0.name`, `fs.1.mountpoint`, ...) and `guest-info`'s
answer → `VirtualMachineInstanceGuestAgentInfo` (the `guestosinfo` subresource),
`VirtualMachineInstanceGuestOSUserList` (`userlist`) and
`VirtualMachineInstanceFileSystemList` (`filesystemlist`)."""

from __future__ import annotations

from typing import Any

JSON = dict[str, Any]
#: libvirt's guest-info parameter → KubeVirt's VirtualMachineInstanceGuestOSInfo field
_OS = {
    "os.name": "name",
    "os.kernel-release": "kernelRelease",
    "os.version": "version",
    "os.pretty-name": "prettyName",
    "os.version-id": "versionId",
    "os.kernel-version": "kernelVersion",
    "os.machine": "machine",
    "os.id": "id",
}


def users(params: dict[str, Any]) -> list[JSON]:
    out = []
    for i in range(int(params.get("user.count", 0))):
        user: JSON = {"userName": str(params.get(f"user.{i}.name", ""))}
        if domain := params.get(f"user.{i}.domain"):
            user["domain"] = str(domain)
        if (login := params.get(f"user.{i}.login-time")) is not None:
            user["loginTime"] = float(login) / 1000.0  # libvirt: milliseconds
        out.append(user)
    return out


def filesystems(params: dict[str, Any]) -> list[JSON]:
    out = []
    for i in range(int(params.get("fs.count", 0))):
        fs: JSON = {
            "diskName": str(params.get(f"fs.{i}.name", "")),
            "mountPoint": str(params.get(f"fs.{i}.mountpoint", "")),
            "fileSystemType": str(params.get(f"fs.{i}.fstype", "")),
            "usedBytes": int(params.get(f"fs.{i}.used-bytes", 0)),
            "totalBytes": int(params.get(f"fs.{i}.total-bytes", 0)),
        }
        disks = []
        for j in range(int(params.get(f"fs.{i}.disk.count", 0))):
            disk: JSON = {"busType": str(params.get(f"fs.{i}.disk.{j}.bus-type", ""))}
            if serial := params.get(f"fs.{i}.disk.{j}.serial"):
                disk["serial"] = str(serial)
            disks.append(disk)
        if disks:
            fs["disk"] = disks
        out.append(fs)
    return out


def guest_os_info(params: dict[str, Any], agent: JSON, freeze_status: str = "") -> JSON:
    """`guestosinfo`: `params` from virDomainGetGuestInfo, `agent` the `guest-info`
    command's `return` (version, supported_commands)."""
    info: JSON = {}
    if version := agent.get("version"):
        info["guestAgentVersion"] = str(version)
    commands = [
        {"name": str(c.get("name")), **({"enabled": True} if c.get("enabled") else {})}
        for c in agent.get("supported_commands") or []
    ]
    if commands:
        info["supportedCommands"] = commands
    if hostname := params.get("hostname"):
        info["hostname"] = str(hostname)
    os = {field: str(params[key]) for key, field in _OS.items() if params.get(key)}
    if os:
        info["os"] = os
    if "timezone.name" in params:
        info["timezone"] = f"{params['timezone.name']}, {int(params.get('timezone.offset', 0))}"
    if found := users(params):
        info["userList"] = found
    info["fsInfo"] = {"disks": filesystems(params)}
    if freeze_status:
        info["fsFreezeStatus"] = freeze_status
    return info


def user_list(params: dict[str, Any]) -> JSON:
    return {"metadata": {}, "items": users(params)}


def filesystem_list(params: dict[str, Any]) -> JSON:
    return {"metadata": {}, "items": filesystems(params)}
