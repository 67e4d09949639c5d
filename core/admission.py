"""KubeVirt's admission: defaulting (mutating webhooks) and validation (validating webhooks).

Pure functions over events.objects Structs: no I/O, no clock, no uuid (callers pass ids in).
Messages and cause fields follow KubeVirt's admitters word for word, because users and
scripts match on them; where KubeVirt's field path is odd (e.g. "spec.interfaces" for the
pod-network rule) it is kept.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import TypeVar

import msgspec

from core import names
from core.admission_spec import validate_spec_extras
from events.objects import (
    CPU,
    Devices,
    Disk,
    DiskTarget,
    Firmware,
    Hugepages,
    Interface,
    Machine,
    Memory,
    Network,
    PodNetwork,
    ResourceRequirements,
    Status,
    StatusCause,
    StatusDetails,
    VirtualMachine,
    VirtualMachineInstance,
    VirtualMachineInstanceMigration,
    VirtualMachineInstanceSpec,
)
from events.quantity import QUANTITY_MAX, in_range, parse_cpu_millis, parse_quantity

INVALID = "FieldValueInvalid"
REQUIRED = "FieldValueRequired"
DUPLICATE = "FieldValueDuplicate"
NOT_SUPPORTED = "FieldValueNotSupported"

RUN_STRATEGIES = ("Always", "RerunOnFailure", "Manual", "Halted", "Once")
EVICTION_STRATEGIES = ("None", "LiveMigrate", "LiveMigrateIfPossible", "External")
START_STRATEGIES = ("Paused",)
# Labels KubeVirt's controllers set on VMIs; only its own service accounts may create them.
RESERVED_VMI_LABELS = (
    "kubevirt.io/created-by",
    "kubevirt.io/migrationJobUID",
    "kubevirt.io/nodeName",
    "kubevirt.io/migrationTargetNodeName",
    "kubevirt.io/schedulable",
    "kubevirt.io/install-strategy",
)
INTERFACE_MODELS = ("e1000", "e1000e", "igb", "ne2k_pci", "pcnet", "rtl8139", "virtio")
DISK_BUSES = ("virtio", "scsi", "sata", "usb")  # KubeVirt prints them in this order
FINAL_PHASES = ("Succeeded", "Failed")
MAX_CAUSES = 10
ONE_MEGABYTE = 10**6
UINT32_MAX = 2**32 - 1  # KubeVirt's CPU topology fields are uint32
INT64_MAX = 2**63 - 1
QUANTITY_FORMAT = (
    "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"
)

# Which validating webhook KubeVirt (or CDI) names in its denial message, per kind.
WEBHOOKS = {
    "VirtualMachine": "virtualmachine-validator.kubevirt.io",
    "VirtualMachineInstance": "virtualmachineinstances-create-validator.kubevirt.io",
    "VirtualMachineInstanceMigration": "migration-create-validator.kubevirt.io",
    "MigrationPolicy": "migration-policy-validator.kubevirt.io",
    "DataVolume": "datavolume-validate.cdi.kubevirt.io",  # CDI's
    "DataImportCron": "dataimportcron-validate.cdi.kubevirt.io",
}

_MAC = re.compile(r"^[0-9A-Fa-f]{2}([:-])[0-9A-Fa-f]{2}(\1[0-9A-Fa-f]{2}){4}$")


def cause(type_: str, message: str, field: str = "") -> StatusCause:
    """One refusal of a webhook, as its Status cause (the kinds' own admitters use it too)."""
    return StatusCause(type=type_, message=message, field=field)


S = TypeVar("S", bound=msgspec.Struct)


def _copy(obj: S) -> S:
    # Defaulting is pure: work on a deep copy, never on the caller's object.
    return msgspec.convert(msgspec.to_builtins(obj), type(obj))


# ====================================================================== defaulting


def default_vmi_spec(
    spec: VirtualMachineInstanceSpec, firmware_uuid: str, *, sized: bool = True
) -> VirtualMachineInstanceSpec:
    """KubeVirt's VMI defaults (amd64): machine q35, CPU topology and model, guest memory,
    a disk per volume, disk/cdrom buses, the pod network, firmware uuid, grace period.
    Returns a new spec. `sized=False` (a VM with an instance type) leaves CPU and memory
    to the instance type."""
    spec = _copy(spec)
    domain = spec.domain
    if domain.machine is None or not domain.machine.type:
        domain.machine = Machine(type="q35")
    if sized:
        _default_cpu(spec)
        _default_memory(spec)
    devices = domain.devices = domain.devices or Devices()
    _default_disks(spec, devices)
    _default_network(spec, devices)
    if domain.firmware is None:
        domain.firmware = Firmware()
    if not domain.firmware.uuid:
        domain.firmware.uuid = firmware_uuid
    if spec.termination_grace_period_seconds is None:
        spec.termination_grace_period_seconds = 30
    return spec


def _default_cpu(spec: VirtualMachineInstanceSpec) -> None:
    domain = spec.domain
    cpu = domain.cpu = domain.cpu or CPU()
    if cpu.cores is None and cpu.sockets is None and cpu.threads is None:
        # KubeVirt maps the CPU count to sockets (best guest performance), rounding up.
        resources = domain.resources or ResourceRequirements()
        amount = (resources.limits or {}).get("cpu") or (resources.requests or {}).get("cpu")
        sockets = -(-parse_cpu_millis(amount) // 1000) if amount is not None else 1
        cpu.sockets, cpu.cores, cpu.threads = min(max(sockets, 1), UINT32_MAX), 1, 1
    else:
        # an explicit 0 or negative count is kept, for validation to refuse
        cpu.sockets = 1 if cpu.sockets is None else cpu.sockets
        cpu.cores = 1 if cpu.cores is None else cpu.cores
        cpu.threads = 1 if cpu.threads is None else cpu.threads
    if not cpu.model:
        cpu.model = "host-model"


def _default_memory(spec: VirtualMachineInstanceSpec) -> None:
    domain = spec.domain
    if domain.memory is not None and domain.memory.guest is not None:
        return
    resources = domain.resources or ResourceRequirements()
    # KubeVirt's setGuestMemory: the first of request and limit that is not zero
    guest = next(
        (
            q
            for q in (
                (resources.requests or {}).get("memory"),
                (resources.limits or {}).get("memory"),
            )
            if q is not None and not _is_zero(q)
        ),
        None,
    )
    if guest is not None:
        domain.memory = domain.memory or Memory()
        domain.memory.guest = guest


def _is_zero(quantity: str | int) -> bool:
    try:
        return parse_quantity(quantity) == 0
    except ValueError:
        return False  # left for validation to report


def _default_disks(spec: VirtualMachineInstanceSpec, devices: Devices) -> None:
    disks = list(devices.disks or [])
    named = {d.name for d in disks}
    # A volume without a disk gets one (KubeVirt's SetDefaultVolumeDisk).
    disks += [Disk(name=v.name) for v in spec.volumes or [] if v.name not in named]
    for disk in disks:
        if disk.cdrom is not None:
            disk.cdrom.bus = disk.cdrom.bus or "sata"
            if disk.cdrom.readonly is None:
                disk.cdrom.readonly = True
        elif disk.lun is None:
            disk.disk = disk.disk or DiskTarget()
            disk.disk.bus = disk.disk.bus or "sata"
    devices.disks = disks or devices.disks


def _default_network(spec: VirtualMachineInstanceSpec, devices: Devices) -> None:
    if (
        not devices.interfaces
        and not spec.networks
        and devices.autoattach_pod_interface is not False
    ):
        # KubeVirt's cluster default is bridge, which makes a VMI on the pod network not
        # live-migratable; we default to masquerade (KubeVirt's recommended binding) so
        # that a plain VM can migrate and be evacuated.
        devices.interfaces = [Interface(name="default", masquerade={})]
        spec.networks = [Network(name="default", pod=PodNetwork())]
    # As in KubeVirt, an interface's model stays unset in the spec (the domain gets virtio):
    # a re-applied manifest then matches what is stored.


def default_vmi(vmi: VirtualMachineInstance, firmware_uuid: str) -> VirtualMachineInstance:
    out = _copy(vmi)
    out.spec = default_vmi_spec(out.spec, firmware_uuid)
    return out


def default_vm(vm: VirtualMachine, firmware_uuid: str) -> VirtualMachine:
    """Applies the VMI defaults to the VM's template; runStrategy has no default. A VM
    with an instance type gets its CPU and memory from it when its VMI is created."""
    out = _copy(vm)
    sized = not out.spec.instancetype
    out.spec.template.spec = default_vmi_spec(out.spec.template.spec, firmware_uuid, sized=sized)
    return out


# ====================================================================== names


def validate_name(name: str | None, generate_name: str | None = None) -> list[StatusCause]:
    """metadata.name as the Kubernetes API server checks it (a DNS-1123 subdomain)."""
    if not name:
        if generate_name:
            return []
        return [cause(REQUIRED, "name or generateName is required", "metadata.name")]
    return [
        cause(INVALID, f'Invalid value: "{name}": {err}', "metadata.name")
        for err in names.subdomain_errors(name)
    ]


def validate_hostname(hostname: str | None, field: str = "spec") -> list[StatusCause]:
    if not hostname:
        return []
    errors = names.label_errors(hostname)
    if not errors:
        return []
    path = f"{field}.hostname"
    msg = f"{path} does not conform to the kubernetes DNS_LABEL rules : {', '.join(errors)}"
    return [cause(INVALID, msg, path)]


def _validate_subdomain(subdomain: str | None, field: str) -> list[StatusCause]:
    if not subdomain or not (errors := names.subdomain_errors(subdomain)):
        return []
    path = f"{field}.subdomain"
    msg = f"{path} does not conform to the kubernetes DNS_SUBDOMAIN rules : {', '.join(errors)}"
    return [cause(INVALID, msg, path)]


# ====================================================================== VMI spec


def validate_vmi_spec(
    spec: VirtualMachineInstanceSpec, field: str = "spec", *, template: bool = False
) -> list[StatusCause]:
    """KubeVirt's VMI spec validation (shared by VMI create and VM templates). As in
    KubeVirt, "every volume has a disk" is checked for VMIs only, not for VM templates."""
    causes = validate_hostname(spec.hostname, field)
    causes += _validate_subdomain(spec.subdomain, field)
    causes += _validate_memory(spec, field)
    causes += _validate_cpu(spec, field)
    causes += _validate_grace(spec, field)
    causes += _validate_start_strategy(spec, field)
    causes += _validate_disks(spec, field)
    causes += _validate_volumes(spec, field, template)
    causes += _validate_networks(spec, field)
    causes += _validate_firmware(spec, field)
    causes += _validate_eviction(spec, field)
    causes += validate_spec_extras(spec, field)
    return causes


def _quantity(value: str | int | None, path: str, causes: list[StatusCause]) -> int | None:
    """The quantity's value, or None (with a cause) when it does not parse or is beyond
    what Kubernetes can hold: Kubernetes would cap "1e100" to 2^63-1 and let the object
    sit unschedulable forever; a value nothing can provide is refused here instead."""
    if value is None:
        return None
    try:
        number = parse_quantity(value)
        fits = in_range(value)
    except ValueError:
        causes.append(cause(INVALID, f"{path} '{value}': {QUANTITY_FORMAT}", path))
        return None
    if not fits:
        msg = f"{path} '{value}': must be no more than {QUANTITY_MAX}."
        causes.append(cause(INVALID, msg, path))
        return None
    return number


def _not_negative(value: int | None, raw: object, path: str) -> list[StatusCause]:
    # KubeVirt's valueMustBePositiveMessagePattern
    if value is None or value >= 0:
        return []
    return [cause(INVALID, f"{path} '{raw}': must be greater than or equal to 0.", path)]


def _validate_memory(spec: VirtualMachineInstanceSpec, field: str) -> list[StatusCause]:
    causes: list[StatusCause] = []
    domain = spec.domain
    resources = domain.resources or ResourceRequirements()
    req_path = f"{field}.domain.resources.requests.memory"
    lim_path = f"{field}.domain.resources.limits.memory"
    guest_path = f"{field}.domain.memory.guest"
    req_raw = (resources.requests or {}).get("memory")
    lim_raw = (resources.limits or {}).get("memory")
    guest_raw = domain.memory.guest if domain.memory else None
    request = _quantity(req_raw, req_path, causes)
    limit = _quantity(lim_raw, lim_path, causes)
    guest = _quantity(guest_raw, guest_path, causes)
    hugepages = domain.memory.hugepages if domain.memory else None

    causes += _not_negative(request, req_raw, req_path)
    causes += _not_negative(limit, lim_raw, lim_path)
    # Without a request, the guest size is the VMI's memory request (the scheduler and
    # the node's allocation count it): the request's floor applies to it.
    # (a guest copied from the request by the defaults is reported once, on the request)
    if guest_raw is None or guest_raw != req_raw:
        causes += _not_negative(guest, guest_raw, guest_path)
    for value, raw, path in ((request, req_raw, req_path), (guest, guest_raw, guest_path)):
        if path == guest_path and guest_raw == req_raw:
            continue
        too_small = value is not None and 0 < value < ONE_MEGABYTE
        if too_small or (path == guest_path and value == 0):
            msg = f"{path} '{raw}': must be greater than or equal to 1M."
            causes.append(cause(INVALID, msg, path))
    if limit and request is not None and request > limit:
        msg = f"{req_path} '{req_raw}' is greater than {lim_path} '{lim_raw}'"
        causes.append(cause(INVALID, msg, req_path))
    if limit and guest is not None and guest > limit:
        msg = (
            f"{guest_path} '{guest_raw}' must be equal to or less than the memory limit "
            f"{lim_path} '{lim_raw}'"
        )
        causes.append(cause(INVALID, msg, guest_path))
    causes += _validate_hugepages(field, hugepages, request or guest or limit or 0, req_raw)
    return causes


def validate_vmi_mandatory_fields(
    spec: VirtualMachineInstanceSpec, field: str = "spec"
) -> list[StatusCause]:
    """KubeVirt's `ValidateVirtualMachineInstanceMandatoryFields`
    (pkg/virt-api/webhooks/validating-webhook/admitters/vmi-create-admitter.go): memory
    must be asked for. "It is only meant to be used for VMI reviews, not if they are
    templates on other objects": a VM's template may leave it to an instance type, or
    lack it and be refused only when its VMI is made. A request that does not parse is
    reported by the memory rules instead."""
    domain = spec.domain
    req_raw = ((domain.resources or ResourceRequirements()).requests or {}).get("memory")
    if req_raw is not None and not _is_zero(req_raw):
        return []
    if domain.memory is not None and (
        domain.memory.guest is not None or domain.memory.hugepages is not None
    ):
        return []
    return [cause(REQUIRED, no_memory(field))]  # KubeVirt's cause carries no field for this one


def no_memory(field: str = "spec") -> str:
    """KubeVirt's refusal of a VMI that asks for no memory."""
    return (
        f"no memory requested, at least one of '{field}.domain.memory.guest', "
        f"'{field}.domain.memory.hugepages.pageSize' or "
        f"'{field}.domain.resources.requests.memory' must be set"
    )


def _validate_hugepages(
    field: str, hugepages: Hugepages | None, memory: int, req_raw: object
) -> list[StatusCause]:
    """KubeVirt's validateHugepagesMemoryRequests."""
    if hugepages is None:
        return []
    path = f"{field}.domain.memory.hugepages.pageSize"
    req_path = f"{field}.domain.resources.requests.memory"
    page_raw = hugepages.page_size or ""
    causes: list[StatusCause] = []
    page = _quantity(page_raw, path, causes)
    if page is None:
        return causes
    if page <= 0:  # KubeVirt would divide by it
        return [cause(INVALID, f"{path} '{page_raw}': must be greater than 0.", path)]
    req = req_raw if req_raw is not None else "0"
    if memory > 0 and memory < page:
        msg = f"{req_path} '{req}' must be equal to or larger than page size {path} '{page_raw}'"
        return [cause(INVALID, msg, req_path)]
    if memory % page:
        msg = f"{req_path} '{req}' is not a multiple of the page size {path} '{page_raw}'"
        return [cause(INVALID, msg, req_path)]
    return []


def _validate_cpu(spec: VirtualMachineInstanceSpec, field: str) -> list[StatusCause]:
    resources = spec.domain.resources or ResourceRequirements()
    req_raw = (resources.requests or {}).get("cpu")
    lim_raw = (resources.limits or {}).get("cpu")
    req_path = f"{field}.domain.resources.requests.cpu"
    lim_path = f"{field}.domain.resources.limits.cpu"
    causes: list[StatusCause] = []
    request = _quantity(req_raw, req_path, causes)
    limit = _quantity(lim_raw, lim_path, causes)
    causes += _not_negative(request, req_raw, req_path)
    causes += _not_negative(limit, lim_raw, lim_path)
    if causes:
        return causes + _validate_topology(spec, field)
    req_millis = parse_cpu_millis(req_raw) if req_raw is not None else 0
    lim_millis = parse_cpu_millis(lim_raw) if lim_raw is not None else 0
    if lim_millis > 0 and req_millis > lim_millis:
        msg = f"{req_path} '{req_raw}' is greater than {lim_path} '{lim_raw}'"
        causes.append(cause(INVALID, msg, req_path))
    return causes + _validate_topology(spec, field)


def _validate_topology(spec: VirtualMachineInstanceSpec, field: str) -> list[StatusCause]:
    """sockets, cores, threads: KubeVirt's uint32 fields, documented as "Must be a value
    greater or equal 1" (KubeVirt reads an explicit 0 as unset; here it is refused, and a
    negative or out-of-range count, which KubeVirt's JSON decoding rejects, is a 422)."""
    cpu = spec.domain.cpu
    if cpu is None:
        return []
    causes: list[StatusCause] = []
    for name in ("sockets", "cores", "threads"):
        value = getattr(cpu, name)
        path = f"{field}.domain.cpu.{name}"
        if value is None:
            continue
        if value < 1:
            msg = f"{path} '{value}': must be greater than or equal to 1."
            causes.append(cause(INVALID, msg, path))
        elif value > UINT32_MAX:
            msg = f"{path} '{value}': must be no more than {UINT32_MAX}."
            causes.append(cause(INVALID, msg, path))
    return causes


def _validate_grace(spec: VirtualMachineInstanceSpec, field: str) -> list[StatusCause]:
    """terminationGracePeriodSeconds: what Kubernetes' pod validation asks of the pod's
    (ValidateNonnegativeField), in KubeVirt's message pattern; an int64."""
    value = spec.termination_grace_period_seconds
    path = f"{field}.terminationGracePeriodSeconds"
    if value is None:
        return []
    if value < 0:
        return [cause(INVALID, f"{path} '{value}': must be greater than or equal to 0.", path)]
    if value > INT64_MAX:
        return [cause(INVALID, f"{path} '{value}': must be no more than {INT64_MAX}.", path)]
    return []


def _validate_start_strategy(spec: VirtualMachineInstanceSpec, field: str) -> list[StatusCause]:
    # No liveness probes are modelled, so KubeVirt's "Paused with a livenessProbe" rule
    # cannot arise; KubeVirt's VM admitter has no startStrategy/runStrategy rule either.
    strategy = spec.start_strategy
    if strategy is None or strategy in START_STRATEGIES:
        return []
    path = f"{field}.startStrategy"
    return [cause(INVALID, f"{path} is set with an unrecognized option: {strategy}", path)]


def _enabled(section: object) -> bool:
    """KubeVirt's `x != nil && (x.Enabled == nil || *x.Enabled)` for a feature given as
    a JSON object: present and not explicitly disabled."""
    return isinstance(section, dict) and section.get("enabled", True) is not False


def _validate_firmware(spec: VirtualMachineInstanceSpec, field: str) -> list[StatusCause]:
    causes: list[StatusCause] = []
    domain = spec.domain
    bootloader = domain.firmware.bootloader if domain.firmware else None
    efi = bootloader.efi if bootloader else None
    if bootloader is not None and efi is not None and bootloader.bios is not None:
        path = f"{field}.domain.firmware.bootloader"
        msg = f"{path} has both EFI and BIOS configured, but they are mutually exclusive."
        causes.append(cause(INVALID, msg, path))
    # SecureBoot defaults to on with EFI; OVMF's secure variable store needs SMM. TDX's
    # exemption needs launchSecurity, which is not modelled.
    secure_boot = efi is not None and efi.get("secureBoot", True) is not False
    if secure_boot and not _enabled((domain.features or {}).get("smm")):
        path = f"{field}.domain"
        msg = (
            f"{path} has EFI SecureBoot enabled. "
            "SecureBoot requires SMM, which is currently disabled."
        )
        causes.append(cause(INVALID, msg, path))
    return causes


def validate_vmi_labels(labels: dict[str, str] | None, field: str) -> list[StatusCause]:
    """KubeVirt's VMI metadata rule (VMIs and VM templates): reserved kubevirt.io/ labels are
    set by its controllers only. A request here never comes from a KubeVirt service account,
    so the exemption KubeVirt grants them does not apply."""
    if not any(label in RESERVED_VMI_LABELS for label in labels or {}):
        return []
    msg = "creation of the following reserved kubevirt.io/ labels on a VMI object is prohibited"
    return [cause(NOT_SUPPORTED, msg, f"{field}.labels")]


def _disk_target(disk: Disk) -> tuple[str, DiskTarget | None]:
    for kind in ("disk", "lun", "cdrom"):
        target = getattr(disk, kind)
        if target is not None:
            return kind, target
    return "", None


def _validate_disks(spec: VirtualMachineInstanceSpec, field: str) -> list[StatusCause]:
    causes: list[StatusCause] = []
    disks_path = f"{field}.domain.devices.disks"
    disks = (spec.domain.devices.disks if spec.domain.devices else None) or []
    volumes = {v.name for v in spec.volumes or []}
    boot_orders: set[int] = set()
    for idx, disk in enumerate(disks):
        here = f"{disks_path}[{idx}]"
        for other in range(idx):
            if disks[other].name == disk.name:
                msg = f"{here} and {disks_path}[{other}] must not have the same Name."
                causes.append(cause(INVALID, msg, f"{here}.name"))
        if disk.name not in volumes:
            causes.append(cause(INVALID, f"{here}.Name '{disk.name}' not found.", f"{here}.name"))
        if sum(t is not None for t in (disk.disk, disk.lun, disk.cdrom)) > 1:
            causes.append(
                cause(INVALID, f"{here} can only have a single target type defined", here)
            )
        causes += _validate_bus(disk, here)
        if disk.boot_order is not None:
            if disk.boot_order < 1:
                msg = f"{here} must have a boot order > 0, if supplied"
                causes.append(cause(INVALID, msg, f"{here}.bootOrder"))
            # KubeVirt's uniqueness check for disks runs apart from the > 0 one, so a
            # repeated 0 is reported by both.
            if disk.boot_order in boot_orders:
                msg = f"Boot order for {here}.bootOrder already set for a different device."
                causes.append(cause(INVALID, msg, f"{here}.bootOrder"))
            boot_orders.add(disk.boot_order)
    causes += _validate_interface_boot_orders(spec, field, boot_orders)
    return causes


def _validate_bus(disk: Disk, here: str) -> list[StatusCause]:
    kind, target = _disk_target(disk)
    bus = target.bus if target else None
    if not bus:
        return []
    path = f"{here}.{kind}.bus"
    if bus == "ide":
        return [cause(INVALID, "IDE bus is not supported", path)]
    if bus == "virtio" and kind == "cdrom":
        return [cause(INVALID, f"Bus type {bus} is invalid for CD-ROM device", path)]
    if bus == "sata" and kind == "disk" and target is not None and target.readonly:
        return [cause(INVALID, f"{bus} hard-disks do not support read-only.", path)]
    if bus not in DISK_BUSES:
        buses = " ".join(DISK_BUSES)
        msg = f"{here} is set with an unrecognized bus {bus}, must be one of: [{buses}]"
        return [cause(INVALID, msg, path)]
    return []


def _validate_interface_boot_orders(
    spec: VirtualMachineInstanceSpec, field: str, boot_orders: set[int]
) -> list[StatusCause]:
    causes: list[StatusCause] = []
    ifaces = (spec.domain.devices.interfaces if spec.domain.devices else None) or []
    for idx, iface in enumerate(ifaces):
        if iface.boot_order is None:
            continue
        here = f"{field}.domain.devices.interfaces[{idx}]"
        if iface.boot_order < 1:
            # KubeVirt indexes the spec itself here ("spec[0]"); its wording is kept.
            msg = f"{field}[{idx}] must have a boot order > 0, if supplied"
            causes.append(cause(INVALID, msg, f"{field}[{idx}].bootOrder"))
        elif iface.boot_order in boot_orders:
            msg = f"Boot order for {here}.bootOrder already set for a different device."
            causes.append(cause(INVALID, msg, f"{here}.bootOrder"))
        boot_orders.add(iface.boot_order)
    return causes


def _validate_volumes(
    spec: VirtualMachineInstanceSpec, field: str, template: bool
) -> list[StatusCause]:
    causes: list[StatusCause] = []
    path = f"{field}.volumes"
    seen: dict[str, int] = {}
    disk_names = {
        d.name for d in (spec.domain.devices.disks if spec.domain.devices else None) or []
    }
    for idx, volume in enumerate(spec.volumes or []):
        here = f"{path}[{idx}]"
        if volume.name in seen:
            msg = f"{here} and {path}[{seen[volume.name]}] must not have the same Name."
            causes.append(cause(INVALID, msg, f"{here}.name"))
        else:
            seen[volume.name] = idx
        if sum(getattr(volume, s) is not None for s in volume.SOURCES) != 1:
            causes.append(cause(INVALID, f"{here} must have exactly one source type set", here))
        if volume.data_volume is not None and not volume.data_volume.name:
            causes.append(cause(REQUIRED, "DataVolume 'name' must be set", f"{here}.name"))
        if not template and volume.name not in disk_names and volume.memory_dump is None:
            # KubeVirt's path really says "domain.volumes" here.
            bad = f"{field}.domain.volumes[{idx}].name"
            causes.append(cause(INVALID, f"{bad} '{volume.name}' not found.", bad))
    return causes


def _validate_networks(spec: VirtualMachineInstanceSpec, field: str) -> list[StatusCause]:
    causes: list[StatusCause] = []
    networks = spec.networks or []
    if sum(n.pod is not None for n in networks) > 1:
        msg = f"more than one interface is connected to a pod network in {field}.interfaces"
        return [cause(DUPLICATE, msg, f"{field}.interfaces")]
    by_name: dict[str, Network] = {}
    for idx, net in enumerate(networks):
        types = (net.pod is not None) + (net.multus is not None)
        if types != 1:
            msg = (
                "should have a network type" if types == 0 else "should have only one network type"
            )
            causes.append(cause(REQUIRED, msg, f"{field}.networks[{idx}]"))
        if net.multus is not None and not net.multus.network_name:
            causes.append(
                cause(
                    REQUIRED,
                    "CNI delegating plugin must have a networkName",
                    f"{field}.networks[{idx}]",
                )
            )
        by_name.setdefault(net.name, net)
    ifaces = (spec.domain.devices.interfaces if spec.domain.devices else None) or []
    used: set[str] = set()
    port_names: set[str] = set()
    for idx, iface in enumerate(ifaces):
        causes += _validate_interface(iface, idx, field, by_name.get(iface.name), used, port_names)
        used.add(iface.name)
    seen: set[str] = set()
    for idx, net in enumerate(networks):
        here = f"{field}.networks[{idx}].name"
        if net.name in seen:
            msg = (
                f'Network with name "{net.name}" already exists, '
                "every network must have a unique name"
            )
            causes.append(cause(DUPLICATE, msg, here))
        seen.add(net.name)
        if net.name not in used:
            causes.append(cause(REQUIRED, f"{here} '{net.name}' not found.", here))
    return causes


def _validate_interface(
    iface: Interface,
    idx: int,
    field: str,
    network: Network | None,
    used: set[str],
    port_names: set[str],
) -> list[StatusCause]:
    causes: list[StatusCause] = []
    here = f"{field}.domain.devices.interfaces[{idx}]"
    name_path = f"{here}.name"
    if network is None:
        causes.append(cause(INVALID, f"{name_path} '{iface.name}' not found.", name_path))
    elif iface.masquerade is not None and network.pod is None:
        causes.append(
            cause(INVALID, "Masquerade interface only implemented with pod network", name_path)
        )
    if iface.name in used:
        causes.append(
            cause(
                DUPLICATE, "Only one interface can be connected to one specific network", name_path
            )
        )
    if not re.match(r"^[A-Za-z0-9_-]+$", iface.name):
        causes.append(
            cause(
                INVALID,
                "Network interface name can only contain alphabetical "
                "characters, numbers, dashes (-) or underscores (_)",
                name_path,
            )
        )
    if network is not None and network.pod is not None:
        causes += _validate_ports(iface, here, port_names)
    if iface.model and iface.model not in INTERFACE_MODELS:
        msg = f"interface {name_path} uses model {iface.model} that is not supported."
        causes.append(cause(NOT_SUPPORTED, msg, f"{here}.model"))
    if iface.mac_address and not _MAC.match(iface.mac_address):
        msg = f"interface {name_path} has malformed MAC address ({iface.mac_address})."
        causes.append(cause(INVALID, msg, f"{here}.macAddress"))
    return causes


def _validate_ports(iface: Interface, here: str, port_names: set[str]) -> list[StatusCause]:
    causes: list[StatusCause] = []
    for pidx, port in enumerate(iface.ports or []):
        path = f"{here}.ports[{pidx}]"
        if port.port == 0:
            causes.append(cause(REQUIRED, "Port field is mandatory.", path))
        elif not 0 < port.port < 65536:
            causes.append(cause(INVALID, "Port field must be in range 0 < x < 65536.", path))
        if port.protocol and port.protocol not in ("TCP", "UDP"):
            causes.append(
                cause(INVALID, "Unknown protocol, only TCP or UDP allowed", f"{path}.protocol")
            )
        if port.name:
            if port.name in port_names:
                causes.append(
                    cause(DUPLICATE, f"Duplicate name of the port: {port.name}", f"{path}.name")
                )
            port_names.add(port.name)
    return causes


def _validate_eviction(spec: VirtualMachineInstanceSpec, field: str) -> list[StatusCause]:
    strategy = spec.eviction_strategy
    if strategy is None or strategy in EVICTION_STRATEGIES:
        return []
    path = f"{field}.evictionStrategy"
    return [cause(INVALID, f"{path} is set with an unrecognized option: {strategy}", path)]


# ====================================================================== objects


def validate_vmi(vmi: VirtualMachineInstance) -> list[StatusCause]:
    causes = validate_name(vmi.metadata.name, vmi.metadata.generate_name)
    causes += validate_vmi_spec(vmi.spec, "spec")
    if not _validate_memory(vmi.spec, "spec"):  # one memory message at a time
        causes += validate_vmi_mandatory_fields(vmi.spec, "spec")
    return causes + validate_vmi_labels(vmi.metadata.labels, "metadata")


def validate_vm(vm: VirtualMachine) -> list[StatusCause]:
    """runStrategy rules plus the template's VMI spec rules (under spec.template.spec)."""
    causes = validate_name(vm.metadata.name, vm.metadata.generate_name)
    spec = vm.spec
    if spec.running is not None and spec.run_strategy is not None:
        msg = (
            "Running and RunStrategy are mutually exclusive. Note that Running is "
            "deprecated, please use RunStrategy instead"
        )
        causes.append(cause(INVALID, msg, "spec.running"))
    if spec.running is None and spec.run_strategy is None:
        causes.append(cause(INVALID, "RunStrategy must be specified", "spec.running"))
    if spec.run_strategy is not None and spec.run_strategy not in RUN_STRATEGIES:
        causes.append(
            cause(INVALID, f"Invalid RunStrategy ({spec.run_strategy})", "spec.runStrategy")
        )
    template = spec.template.metadata
    causes += validate_vmi_labels(template.labels if template else None, "spec.template.metadata")
    return causes + validate_vmi_spec(spec.template.spec, "spec.template.spec", template=True)


def run_strategy(vm: VirtualMachine) -> str:
    """The effective strategy: runStrategy, else the deprecated running flag."""
    if vm.spec.run_strategy:
        return vm.spec.run_strategy
    return "Always" if vm.spec.running else "Halted"


def validate_migration(
    mig: VirtualMachineInstanceMigration,
    vmi_lookup: Callable[[str, str], VirtualMachineInstance | None] | None = None,
    active_migration: Callable[[str, str], str | None] | None = None,
) -> list[StatusCause]:
    """Migration create admission. The lookups (namespace, vmi name) are optional so the
    static part can run alone; active_migration returns the name of an in-flight VMIM."""
    causes = validate_name(mig.metadata.name, mig.metadata.generate_name)
    vmi_name = mig.spec.vmi_name
    if not vmi_name:
        return [*causes, cause(REQUIRED, "spec.vmiName is a required field", "spec.vmiName")]
    namespace = mig.metadata.namespace or "default"
    if causes or vmi_lookup is None:
        return causes
    vmi = vmi_lookup(namespace, vmi_name)
    if vmi is None:
        return [cause(INVALID, f'the VMI "{namespace}/{vmi_name}" does not exist', "spec.vmiName")]
    status = vmi.status
    if status is not None and status.phase in FINAL_PHASES:
        return [cause(INVALID, "Cannot migrate VMI in finalized state.", "spec.vmiName")]
    for cond in (status.conditions if status else None) or []:
        if cond.type == "LiveMigratable" and cond.status == "False":
            msg = f"Cannot migrate VMI, Reason: {cond.reason or ''}, Message: {cond.message or ''}"
            return [cause(INVALID, msg, "spec.vmiName")]
    if active_migration is not None and (active := active_migration(namespace, vmi_name)):
        msg = (
            f"in-flight migration detected. Active migration job ({active}) is currently "
            f"already in progress for VMI {vmi_name}."
        )
        return [cause(INVALID, msg, "spec.vmiName")]
    return []


# ====================================================================== Status body


def invalid_status(
    kind: str, name: str | None, causes: list[StatusCause], group: str = "kubevirt.io"
) -> Status:
    """The 422 body the API server returns when KubeVirt's validating webhook denies a
    request: causes joined (first 10, then "and N more"), prefixed with the webhook name."""
    shown = causes[:MAX_CAUSES]
    message = ", ".join(c.message for c in shown)
    if len(causes) > MAX_CAUSES:
        message += f", and {len(causes) - MAX_CAUSES} more validation errors"
    webhook = WEBHOOKS.get(kind, f"{kind.lower()}-validator.kubevirt.io")
    return Status(
        message=f'admission webhook "{webhook}" denied the request: {message}',
        reason="Invalid",
        code=422,
        details=StatusDetails(name=name or None, group=group, kind=kind, causes=shown),
    )
