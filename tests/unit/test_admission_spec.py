# ruff: noqa: E501  (exact KubeVirt messages are long literals)
"""Input devices, sound, I/O threads policy, DNS policy and config: KubeVirt's messages and
fields, for VMIs (spec.…) and VM templates (spec.template.spec.…)."""

from typing import Any

import pytest

from tests.unit.test_admission_domain import _domain, _spec, both, vm_causes, vmi_causes

INVALID = "FieldValueInvalid"
REQUIRED = "FieldValueRequired"


def _devices(**extra: Any) -> dict[str, Any]:
    devices: dict[str, Any] = {"disks": [{"name": "root", "disk": {"bus": "virtio"}}]}
    devices.update(extra)
    return _domain(devices=devices)


@pytest.mark.parametrize(
    "device",
    [{"name": "t"}, {"name": "t", "type": "tablet", "bus": "usb"}, {"name": "t", "bus": "virtio"}],
)
def test_tablets_on_usb_or_virtio_are_accepted(device: dict[str, str]) -> None:
    assert vmi_causes(_spec(_devices(inputs=[device]))) == []
    assert vm_causes(_spec(_devices(inputs=[device]))) == []


def test_input_devices_are_tablets_on_usb_or_virtio() -> None:
    both(
        _spec(_devices(inputs=[{"name": "k", "type": "keyboard", "bus": "usb"}])),
        (INVALID, "Input device can have only tablet type.", "spec.domain.devices.inputs[0].type"),
    )
    both(
        _spec(_devices(inputs=[{"name": "t", "type": "tablet", "bus": "ps2"}])),
        (
            INVALID,
            "Input device can have only virtio or usb bus.",
            "spec.domain.devices.inputs[0].bus",
        ),
    )


def test_sound_needs_a_supported_model_and_a_name() -> None:
    assert vmi_causes(_spec(_devices(sound={"name": "audio"}))) == []
    assert vmi_causes(_spec(_devices(sound={"name": "audio", "model": "ac97"}))) == []
    both(
        _spec(_devices(sound={"name": "audio", "model": "sb16"})),
        (INVALID, "Sound device type is not supported. Options: 'ich9' or 'ac97'", "spec.Sound"),
    )
    both(
        _spec(_devices(sound={"model": "ich9"})),
        (INVALID, "Sound device requires a name field.", "spec.Sound"),
    )


def test_io_threads_policy() -> None:
    for policy in ("shared", "auto"):
        assert vmi_causes(_spec(_domain(ioThreadsPolicy=policy))) == []
    pool = {"ioThreadsPolicy": "supplementalPool", "ioThreads": {"supplementalPoolThreadCount": 2}}
    assert vmi_causes(_spec(_domain(**pool))) == []
    both(
        _spec(_domain(ioThreadsPolicy="dedicated")),
        (INVALID, "Invalid IOThreadsPolicy (dedicated)", "spec.domain.ioThreadsPolicy"),
    )
    both(
        _spec(_domain(ioThreadsPolicy="supplementalPool")),
        (
            INVALID,
            "the number of iothreads needs to be set and positive for the dedicated policy",
            "spec.domain.ioThreads.count",
        ),
    )


def test_dedicated_io_thread_has_kubevirts_wire_name() -> None:
    disks = [{"name": "root", "disk": {"bus": "virtio"}, "dedicatedIOThread": True}]
    assert vmi_causes(_spec(_domain(devices={"disks": disks}))) == []


def test_dns_policy_is_one_of_kubernetes() -> None:
    for policy in ("ClusterFirst", "ClusterFirstWithHostNet", "Default"):
        assert vmi_causes(_spec(dnsPolicy=policy)) == []
    both(
        _spec(dnsPolicy="Google"),
        (
            "FieldValueNotSupported",
            "DNSPolicy: Google is not supported, valid values: [ClusterFirstWithHostNet ClusterFirst Default None ]",
            "spec.dnsPolicy",
        ),
    )


def test_dns_policy_none_needs_a_config_with_a_nameserver() -> None:
    both(
        _spec(dnsPolicy="None"),
        (REQUIRED, "must provide `dnsConfig` when `dnsPolicy` is None", "spec.dnsConfig"),
    )
    both(
        _spec(dnsPolicy="None", dnsConfig={"searches": ["example.com"]}),
        (
            REQUIRED,
            "must provide at least one DNS nameserver when `dnsPolicy` is None",
            "nameservers",
        ),
    )
    ok = {"nameservers": ["10.0.0.53", "fd00::53"], "searches": ["a.example.com"]}
    assert vmi_causes(_spec(dnsPolicy="None", dnsConfig=ok)) == []


@pytest.mark.parametrize(
    ("config", "cause"),
    [
        (
            {"nameservers": ["1.1.1.1", "1.0.0.1", "8.8.8.8", "8.8.4.4"]},
            (
                INVALID,
                "must not have more than 3 nameservers: [1.1.1.1 1.0.0.1 8.8.8.8 8.8.4.4]",
                "nameservers",
            ),
        ),
        (
            {"nameservers": ["dns.example"]},
            (INVALID, "must be valid IP address: dns.example", "nameservers"),
        ),
        (
            {"nameservers": ["fe80::1%eth0"]},
            (INVALID, "must be valid IP address: fe80::1%eth0", "nameservers"),
        ),
        (
            {"searches": [f"s{i}.example" for i in range(7)]},
            (INVALID, "must not have more than 6 search paths", "searchDomains"),
        ),
        (
            {"searches": [c * 60 for c in "abcde"]},
            (
                INVALID,
                "must not have more than 256 characters (including spaces) in the search list",
                "searchDomains",
            ),
        ),
        (
            {"searches": ["Example.com"]},
            (
                INVALID,
                "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')",
                "searchDomains",
            ),
        ),
        ({"options": [{"value": "2"}]}, (INVALID, "Option.Name must not be empty", "options")),
    ],
)
def test_dns_config_rules(config: dict[str, Any], cause: tuple[str, str, str]) -> None:
    both(_spec(dnsConfig=config), cause)


def test_cpu_feature_policies_isolation_and_hotplug() -> None:
    features = [{"name": "pcid", "policy": "require"}, {"name": "vmx"}]
    assert vmi_causes(_spec(_domain(cpu={"features": features}))) == []
    both(
        _spec(_domain(cpu={"features": [{"name": "pcid", "policy": "always"}]})),
        (
            "FieldValueNotSupported",
            "CPU feature pcid uses policy always that is not supported.",
            "spec.domain.cpu.features[0].policy",
        ),
    )
    both(
        _spec(_domain(cpu={"isolateEmulatorThread": True})),
        (
            INVALID,
            "IsolateEmulatorThread should be only set in combination with DedicatedCPUPlacement",
            "spec.domain.cpu.isolateEmulatorThread",
        ),
    )
    assert vmi_causes(_spec(_domain(cpu={"sockets": 2, "maxSockets": 4}))) == []
    both(
        _spec(_domain(cpu={"sockets": 4, "maxSockets": 2})),
        (
            INVALID,
            "Number of sockets in CPU topology is greater than the maximum sockets allowed",
            "spec.domain.cpu.sockets",
        ),
    )


def test_a_probe_has_exactly_one_handler() -> None:
    assert vmi_causes(_spec(readinessProbe={"guestAgentPing": {}})) == []
    both(
        _spec(readinessProbe={"exec": {"command": ["true"]}, "guestAgentPing": {}}),
        (
            INVALID,
            "spec.readinessProbe must have exactly one probe type set",
            "spec.readinessProbe",
        ),
    )
    for causes, path in (
        (vmi_causes, "spec.livenessProbe"),
        (vm_causes, "spec.template.spec.livenessProbe"),
    ):
        assert causes(_spec(livenessProbe={"initialDelaySeconds": 5})) == [
            (
                REQUIRED,
                f"either {path}.tcpSocket, {path}.exec or {path}.httpGet must be set if a {path} is specified",
                path,
            )
        ]


def test_network_probes_need_the_pod_network() -> None:
    probe = {"tcpSocket": {"port": 22}}
    assert vmi_causes(_spec(readinessProbe=probe)) == []  # the default pod network
    no_pod = _spec(_devices(autoattachPodInterface=False), readinessProbe=probe)
    both(
        no_pod,
        (
            INVALID,
            "spec.readinessProbe.tcpSocket is only allowed if the Pod Network is attached",
            "spec.readinessProbe.tcpSocket",
        ),
    )


def test_video_and_panic_devices() -> None:
    assert vmi_causes(_spec(_devices(video={"type": "virtio"}))) == []
    both(
        _spec(_devices(video={"type": "virtio"}, autoattachGraphicsDevice=False)),
        (
            INVALID,
            "Video configuration is not allowed when autoattachGraphicsDevice is set to false",
            "spec.video",
        ),
    )
    assert vmi_causes(_spec(_devices(panicDevices=[{"model": "isa"}]))) == []
    both(
        _spec(_devices(panicDevices=[{"model": "pcspk"}])),
        (
            INVALID,
            "invalid PanicDeviceModel(pcspk)",
            "spec.domain.devices.panicDevices[0].model",
        ),
    )
