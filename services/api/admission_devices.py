"""KubeVirt's VMI spec rules for input devices, sound, I/O threads and DNS.

Pure, like services.api.admission (which calls `validate_devices` for VMIs and VM
templates). Messages and cause fields are KubeVirt's word for word, including its odd ones:
the sound rules name the field `spec.Sound`, and the DNS rules, copied by KubeVirt from
Kubernetes' pod validation, name `nameservers`, `searchDomains` and `options` without a path.
"""

from __future__ import annotations

import ipaddress

from events.objects import PodDNSConfig, VirtualMachineInstanceSpec
from events.objects import StatusCause as Cause
from services.api import names

INVALID = "FieldValueInvalid"
REQUIRED = "FieldValueRequired"
NOT_SUPPORTED = "FieldValueNotSupported"

INPUT_BUSES = ("usb", "virtio")
INPUT_TYPES = ("tablet",)
SOUND_MODELS = ("ich9", "ac97")
IO_THREADS_POLICIES = ("shared", "auto", "supplementalPool")
# Kubernetes' order, as its message lists them (the empty string last)
DNS_POLICIES = ("ClusterFirstWithHostNet", "ClusterFirst", "Default", "None", "")
MAX_NAMESERVERS = 3
MAX_SEARCH_PATHS = 6
MAX_SEARCH_CHARS = 256


def validate_devices(spec: VirtualMachineInstanceSpec, field: str) -> list[Cause]:
    return (
        _inputs(spec, field)
        + _io_threads(spec, field)
        + _dns_policy(spec, field)
        + _dns_config(spec.dns_config, spec.dns_policy, f"{field}.dnsConfig")
        + _sound(spec, field)
    )


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
