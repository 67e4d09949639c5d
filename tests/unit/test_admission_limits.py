# ruff: noqa: E501  (exact Kubernetes and KubeVirt messages are long literals)
"""Names, namespaces, quantities and counts: the API server's and KubeVirt's rules, as pure
functions (the HTTP side is tests/integration/test_api_hostile.py)."""

from typing import Any

import pytest

from core.admission import default_vm, validate_vm
from core.names import (
    LABEL_FMT,
    SUBDOMAIN_FMT,
    go_quote,
    invalid_object,
    validate_identity,
    validate_namespace,
    validate_object_name,
    validate_socket_fit,
)
from events.manifest import load
from events.objects import VirtualMachine
from events.quantity import QUANTITY_MAX, parse_cpu_millis, parse_quantity


def test_name_messages_are_the_api_servers() -> None:
    causes = validate_object_name("UPPER")
    assert [(c.field, c.type) for c in causes] == [("metadata.name", "FieldValueInvalid")]
    assert causes[0].message == f'Invalid value: "UPPER": {SUBDOMAIN_FMT}'
    status = invalid_object("VirtualMachine", "kubevirt.io", "UPPER", causes)
    assert status.code == 422 and status.reason == "Invalid"
    assert status.message == (
        'VirtualMachine.kubevirt.io "UPPER" is invalid: metadata.name: Invalid value: "UPPER": '
        "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' "
        "or '.', and must start and end with an alphanumeric character (e.g. 'example.com', "
        "regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
    )


def test_namespaces_are_labels() -> None:
    assert validate_namespace("default") == []
    dotted = validate_namespace("a.b")
    assert [c.message for c in dotted] == [f'Invalid value: "a.b": {LABEL_FMT}']
    assert dotted[0].field == "metadata.namespace"
    long = validate_namespace("a" * 64)
    assert [c.message.split(": ", 2)[-1] for c in long] == ["must be no more than 63 characters"]
    both = validate_namespace("A" * 400)
    assert len(both) == 2


def test_several_errors_print_as_an_aggregate() -> None:
    causes = validate_identity("a b", "x" * 254, namespaced=True)
    status = invalid_object("VirtualMachine", "kubevirt.io", "x" * 254, causes)
    assert status.message.startswith(
        'VirtualMachine.kubevirt.io "' + "x" * 254 + '" is invalid: [metadata.name: Invalid value'
    )
    assert status.message.endswith("]")
    assert [c.field for c in causes] == ["metadata.name", "metadata.namespace"]


@pytest.mark.parametrize("bad", [".", "*", ">", "~", " ", "\t"])
def test_no_bus_metacharacter_passes_a_namespace(bad: str) -> None:
    assert validate_namespace(f"a{bad}b")
    if bad == ".":
        assert validate_object_name("a.b") == []  # a dot is a valid subdomain
    else:
        assert validate_object_name(f"a{bad}b")


def test_go_quote_escapes_as_go_does() -> None:
    assert go_quote("a\tb") == '"a\\tb"'
    assert go_quote('q"') == '"q\\""'
    assert go_quote("é") == '"é"'
    assert go_quote("\x01") == '"\\x01"'


def test_required_name() -> None:
    [cause] = validate_object_name("")
    assert cause.message == "Required value: name or generateName is required"
    assert validate_object_name("", generate_name="web-") == []


def test_socket_fit_depends_on_the_namespace() -> None:
    assert validate_socket_fit("default", "a" * 48) == []
    [cause] = validate_socket_fit("default", "a" * 49)
    assert "must be no more than 48 characters in namespace" in cause.message
    assert validate_socket_fit("ns", "a" * 53) == []
    # checked only for kinds that run a launcher
    assert validate_identity("default", "a" * 64, namespaced=True) == []
    assert validate_identity("default", "a" * 64, namespaced=True, socket_limit=56)


def test_quantities_are_capped_like_kubernetes() -> None:
    assert parse_quantity("1e100") == QUANTITY_MAX
    assert parse_quantity("999999999999Ei") == QUANTITY_MAX
    assert parse_cpu_millis("1e30") == QUANTITY_MAX
    with pytest.raises(ValueError):
        parse_quantity("1e99999999999")
    with pytest.raises(ValueError):
        parse_quantity(float("inf"))


def vm(domain: dict[str, Any], **spec: Any) -> VirtualMachine:
    return load(
        {
            "apiVersion": "kubevirt.io/v1",
            "kind": "VirtualMachine",
            "metadata": {"name": "v"},
            "spec": {"runStrategy": "Manual", "template": {"spec": {"domain": domain, **spec}}},
        },
        VirtualMachine,
    )


def messages(obj: VirtualMachine) -> list[str]:
    return [c.message for c in validate_vm(default_vm(obj, "uuid"))]


P = "spec.template.spec.domain"


@pytest.mark.parametrize(
    ("domain", "message"),
    [
        (
            {"resources": {"requests": {"memory": "-1Gi"}}},
            f"{P}.resources.requests.memory '-1Gi': must be greater than or equal to 0.",
        ),
        (
            {"memory": {"guest": "-1Gi"}},
            f"{P}.memory.guest '-1Gi': must be greater than or equal to 0.",
        ),
        ({"memory": {"guest": "0"}}, f"{P}.memory.guest '0': must be greater than or equal to 1M."),
        # no memory at all: a VMI's rule alone (tests/unit/test_admission_scope.py)
        ({"resources": {"requests": {"memory": "0"}}}, ""),
        (
            {"memory": {"guest": "1e100"}},
            f"{P}.memory.guest '1e100': must be no more than 9223372036854775807.",
        ),
        (
            {"resources": {"limits": {"memory": "999999999999Ei"}}, "memory": {"guest": "1Gi"}},
            f"{P}.resources.limits.memory '999999999999Ei': must be no more than 9223372036854775807.",
        ),
        (
            {"memory": {"guest": "64Mi"}, "resources": {"requests": {"cpu": "-1"}}},
            f"{P}.resources.requests.cpu '-1': must be greater than or equal to 0.",
        ),
        (
            {"memory": {"guest": "64Mi"}, "cpu": {"cores": -1}},
            f"{P}.cpu.cores '-1': must be greater than or equal to 1.",
        ),
        (
            {"memory": {"guest": "64Mi"}, "cpu": {"sockets": 0}},
            f"{P}.cpu.sockets '0': must be greater than or equal to 1.",
        ),
        (
            {"memory": {"guest": "64Mi"}, "cpu": {"threads": 2**63}},
            f"{P}.cpu.threads '{2**63}': must be no more than 4294967295.",
        ),
        (
            {"memory": {"guest": "64Mi", "hugepages": {"pageSize": "2Mi"}}, "resources": {}},
            "",  # 64Mi is a multiple of 2Mi: accepted
        ),
        (
            {"memory": {"guest": "3Mi", "hugepages": {"pageSize": "2Mi"}}},
            f"{P}.resources.requests.memory '0' is not a multiple of the page size {P}.memory.hugepages.pageSize '2Mi'",
        ),
        (
            {"memory": {"guest": "1Mi", "hugepages": {"pageSize": "2Mi"}}},
            f"{P}.resources.requests.memory '0' must be equal to or larger than page size {P}.memory.hugepages.pageSize '2Mi'",
        ),
        (
            {"memory": {"guest": "64Mi", "hugepages": {"pageSize": "huge"}}},
            f"{P}.memory.hugepages.pageSize 'huge': quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'",
        ),
    ],
)
def test_quantity_and_count_rules(domain: dict[str, Any], message: str) -> None:
    got = messages(vm(domain))
    assert got == ([message] if message else []), got


def test_grace_period_must_not_be_negative() -> None:
    got = messages(vm({"memory": {"guest": "64Mi"}}, terminationGracePeriodSeconds=-5))
    assert got == [
        "spec.template.spec.terminationGracePeriodSeconds '-5': must be greater than or equal to 0."
    ]


def test_an_explicit_topology_is_kept_and_a_missing_one_defaulted() -> None:
    defaulted = default_vm(vm({"memory": {"guest": "64Mi"}, "cpu": {"cores": 2}}), "u")
    cpu = defaulted.spec.template.spec.domain.cpu
    assert cpu is not None and (cpu.sockets, cpu.cores, cpu.threads) == (1, 2, 1)
    absurd = default_vm(
        vm({"memory": {"guest": "64Mi"}, "resources": {"requests": {"cpu": "1e100"}}}), "u"
    )
    cpu = absurd.spec.template.spec.domain.cpu
    assert cpu is not None and cpu.sockets == 2**32 - 1  # and the request itself is refused
