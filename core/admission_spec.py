"""KubeVirt's VMI spec rules beyond resources, storage and network: CPU features and
hotplug, input, sound, video and panic devices, I/O threads, probes and DNS.

Pure, like core.admission (which calls `validate_spec_extras` for VMIs and VM
templates). Messages and cause fields are KubeVirt's word for word, including its odd ones:
the sound rules name the field `spec.Sound`, and the DNS rules, copied by KubeVirt from
Kubernetes' pod validation, name `nameservers`, `searchDomains` and `options` without a path.
"""

from __future__ import annotations

import ipaddress

from core import names
from events.objects import PodDNSConfig, VirtualMachineInstanceSpec
from events.objects import StatusCause as Cause

INVALID = "FieldValueInvalid"
REQUIRED = "FieldValueRequired"
NOT_SUPPORTED = "FieldValueNotSupported"

CPU_FEATURE_POLICIES = ("", "force", "require", "optional", "disable", "forbid")
PANIC_DEVICE_MODELS = ("hyperv", "isa", "pvpanic")
PROBE_HANDLERS = ("httpGet", "tcpSocket", "exec", "guestAgentPing")
INPUT_BUSES = ("usb", "virtio")
INPUT_TYPES = ("tablet",)
SOUND_MODELS = ("ich9", "ac97")
IO_THREADS_POLICIES = ("shared", "auto", "supplementalPool")
# Kubernetes' order, as its message lists them (the empty string last)
DNS_POLICIES = ("ClusterFirstWithHostNet", "ClusterFirst", "Default", "None", "")
MAX_NAMESERVERS = 3
MAX_SEARCH_PATHS = 6
MAX_SEARCH_CHARS = 256


def validate_spec_extras(spec: VirtualMachineInstanceSpec, field: str) -> list[Cause]:
    # in KubeVirt's order, so that several causes come back as it lists them
    return (
        _cpu(spec, field)
        + _inputs(spec, field)
        + _io_threads(spec, field)
        + _probes(spec, field)
        + _dns_policy(spec, field)
        + _dns_config(spec.dns_config, spec.dns_policy, f"{field}.dnsConfig")
        + _sound(spec, field)
        + _video(spec, field)
        + _panic_devices(spec, field)
    )


def _cpu(spec: VirtualMachineInstanceSpec, field: str) -> list[Cause]:
    cpu = spec.domain.cpu
    if cpu is None:
        return []
    causes: list[Cause] = []
    here = f"{field}.domain.cpu"
    if cpu.isolate_emulator_thread and not cpu.dedicated_cpu_placement:
        msg = "IsolateEmulatorThread should be only set in combination with DedicatedCPUPlacement"
        causes.append(Cause(type=INVALID, message=msg, field=f"{here}.isolateEmulatorThread"))
    for i, feature in enumerate(cpu.features or []):
        name, policy = feature.get("name") or "", feature.get("policy") or ""
        if policy not in CPU_FEATURE_POLICIES:
            msg = f"CPU feature {name} uses policy {policy} that is not supported."
            path = f"{here}.features[{i}].policy"
            causes.append(Cause(type=NOT_SUPPORTED, message=msg, field=path))
    if cpu.max_sockets and (cpu.sockets or 0) > cpu.max_sockets:
        msg = "Number of sockets in CPU topology is greater than the maximum sockets allowed"
        causes.append(Cause(type=INVALID, message=msg, field=f"{here}.sockets"))
    return causes


def _probes(spec: VirtualMachineInstanceSpec, field: str) -> list[Cause]:
    causes: list[Cause] = []
    probes = {"readinessProbe": spec.readiness_probe, "livenessProbe": spec.liveness_probe}
    for name, probe in probes.items():
        if probe is None:
            continue
        here = f"{field}.{name}"
        handlers = sum(probe.get(handler) is not None for handler in PROBE_HANDLERS)
        if handlers > 1:
            msg = f"{here} must have exactly one probe type set"
            causes.append(Cause(type=INVALID, message=msg, field=here))
        if handlers < 1:
            msg = (
                f"either {here}.tcpSocket, {here}.exec or {here}.httpGet "
                f"must be set if a {here} is specified"
            )
            causes.append(Cause(type=REQUIRED, message=msg, field=here))
    if not any(network.pod is not None for network in spec.networks or []):
        for name, probe in probes.items():
            for handler in ("httpGet", "tcpSocket"):
                if probe is not None and probe.get(handler) is not None:
                    path = f"{field}.{name}.{handler}"
                    msg = f"{path} is only allowed if the Pod Network is attached"
                    causes.append(Cause(type=INVALID, message=msg, field=path))
    return causes


def _video(spec: VirtualMachineInstanceSpec, field: str) -> list[Cause]:
    devices = spec.domain.devices
    if devices is None or devices.video is None or devices.autoattach_graphics_device is not False:
        return []
    msg = "Video configuration is not allowed when autoattachGraphicsDevice is set to false"
    return [Cause(type=INVALID, message=msg, field=f"{field}.video")]


def _panic_devices(spec: VirtualMachineInstanceSpec, field: str) -> list[Cause]:
    devices = spec.domain.devices
    causes: list[Cause] = []
    for i, device in enumerate((devices.panic_devices if devices else None) or []):
        model = device.get("model")
        if model is not None and model not in PANIC_DEVICE_MODELS:
            path = f"{field}.domain.devices.panicDevices[{i}].model"
            causes.append(
                Cause(type=INVALID, message=f"invalid PanicDeviceModel({model})", field=path)
            )
    return causes


def _inputs(spec: VirtualMachineInstanceSpec, field: str) -> list[Cause]:
    causes: list[Cause] = []
    devices = spec.domain.devices
    for i, device in enumerate((devices.inputs if devices else None) or []):
        here = f"{field}.domain.devices.inputs[{i}]"
        # the scheme's defaults come first: an empty bus is usb, an empty type tablet
        if (device.bus or "usb") not in INPUT_BUSES:
            msg = "Input device can have only virtio or usb bus."
            causes.append(Cause(type=INVALID, message=msg, field=f"{here}.bus"))
        if (device.type or "tablet") not in INPUT_TYPES:
            msg = "Input device can have only tablet type."
            causes.append(Cause(type=INVALID, message=msg, field=f"{here}.type"))
    return causes


def _io_threads(spec: VirtualMachineInstanceSpec, field: str) -> list[Cause]:
    policy = spec.domain.io_threads_policy
    if policy is None:
        return []
    causes: list[Cause] = []
    if policy not in IO_THREADS_POLICIES:
        msg = f"Invalid IOThreadsPolicy ({policy})"
        causes.append(Cause(type=INVALID, message=msg, field=f"{field}.domain.ioThreadsPolicy"))
    threads = spec.domain.io_threads
    count = threads.supplemental_pool_thread_count if threads else None
    if policy == "supplementalPool" and (count is None or count < 1):
        msg = "the number of iothreads needs to be set and positive for the dedicated policy"
        causes.append(Cause(type=INVALID, message=msg, field=f"{field}.domain.ioThreads.count"))
    return causes


def _sound(spec: VirtualMachineInstanceSpec, field: str) -> list[Cause]:
    devices = spec.domain.devices
    sound = devices.sound if devices else None
    if sound is None:
        return []
    causes: list[Cause] = []
    if sound.model and sound.model not in SOUND_MODELS:
        msg = "Sound device type is not supported. Options: 'ich9' or 'ac97'"
        causes.append(Cause(type=INVALID, message=msg, field=f"{field}.Sound"))
    if not sound.name:
        msg = "Sound device requires a name field."
        causes.append(Cause(type=INVALID, message=msg, field=f"{field}.Sound"))
    return causes


def _dns_policy(spec: VirtualMachineInstanceSpec, field: str) -> list[Cause]:
    policy = spec.dns_policy
    if not policy or policy in DNS_POLICIES:
        return []
    listed = _go_list(list(DNS_POLICIES))
    msg = f"DNSPolicy: {policy} is not supported, valid values: {listed}"
    return [Cause(type=NOT_SUPPORTED, message=msg, field=f"{field}.dnsPolicy")]


def _dns_config(config: PodDNSConfig | None, policy: str | None, path: str) -> list[Cause]:
    if policy == "None":
        if config is None:
            msg = "must provide `dnsConfig` when `dnsPolicy` is None"
            return [Cause(type=REQUIRED, message=msg, field=path)]
        if not config.nameservers:
            msg = "must provide at least one DNS nameserver when `dnsPolicy` is None"
            return [Cause(type=REQUIRED, message=msg, field="nameservers")]
    if config is None:
        return []
    causes: list[Cause] = []
    servers = config.nameservers or []
    if len(servers) > MAX_NAMESERVERS:
        msg = f"must not have more than {MAX_NAMESERVERS} nameservers: {_go_list(servers)}"
        causes.append(Cause(type=INVALID, message=msg, field="nameservers"))
    for server in servers:
        if not _is_ip(server):
            msg = f"must be valid IP address: {server}"
            causes.append(Cause(type=INVALID, message=msg, field="nameservers"))
    searches = config.searches or []
    if len(searches) > MAX_SEARCH_PATHS:
        msg = f"must not have more than {MAX_SEARCH_PATHS} search paths"
        causes.append(Cause(type=INVALID, message=msg, field="searchDomains"))
    if len(" ".join(searches)) > MAX_SEARCH_CHARS:
        msg = (
            f"must not have more than {MAX_SEARCH_CHARS} characters (including spaces) "
            "in the search list"
        )
        causes.append(Cause(type=INVALID, message=msg, field="searchDomains"))
    for search in searches:
        for error in names.subdomain_errors(search):
            causes.append(Cause(type=INVALID, message=error, field="searchDomains"))
    for option in config.options or []:
        if not option.name:
            msg = "Option.Name must not be empty"
            causes.append(Cause(type=INVALID, message=msg, field="options"))
    return causes


def _is_ip(value: str) -> bool:
    # Go's net.ParseIP: no IPv6 zone, no leading zeros in IPv4 (Python agrees on the latter)
    if "%" in value:
        return False
    try:
        ipaddress.ip_address(value)
    except ValueError:
        return False
    return True


def _go_list(values: list[str]) -> str:
    """A Go string slice formatted with %s / %v: `[a b c]`."""
    return "[" + " ".join(values) + "]"
