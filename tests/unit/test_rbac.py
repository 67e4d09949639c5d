"""RBAC on plain data: a request's attributes from its URL, KubeVirt's roles derived from the
kind registry (a new kind is covered), bindings' scopes, and the API server's words."""

from __future__ import annotations

from collections.abc import Mapping

from kinds.registry import REGISTRY
from services.api.auth import AuthConfig, from_certificate
from services.api.protowire import access_review
from services.api.rbac import (
    ADMIN,
    CLUSTER_ADMIN,
    EDIT,
    MIGRATE,
    VIEW,
    Attributes,
    Binding,
    Rule,
    Subject,
    User,
    allowed,
    attributes,
    cluster_roles,
    forbidden_message,
)
from tests.unit.test_kind_registry import TOY

ROLES = cluster_roles(REGISTRY)


def can(
    role: str, a: Attributes, namespace: str = "", roles: Mapping[str, tuple[Rule, ...]] = ROLES
) -> bool:
    user = User("u", ("system:authenticated",))
    return allowed(user, a, [Binding(role, (Subject("User", "u"),), namespace)], roles)


def test_attributes_are_read_from_the_url_as_the_api_server_does() -> None:
    vms = "/apis/kubevirt.io/v1/namespaces/ns/virtualmachines"
    assert attributes("GET", vms) == Attributes(
        "list", vms, True, "kubevirt.io", "virtualmachines", "", "ns", ""
    )
    assert attributes("GET", vms, "watch=true").verb == "watch"
    assert attributes("DELETE", vms).verb == "deletecollection"
    assert attributes("PATCH", f"{vms}/x").verb == "patch"
    start = attributes(
        "PUT", "/apis/subresources.kubevirt.io/v1/namespaces/ns/virtualmachines/x/start"
    )
    assert (start.verb, start.api_group, start.resource, start.subresource, start.name) == (
        "update", "subresources.kubevirt.io", "virtualmachines", "start", "x",
    )  # fmt: skip
    assert attributes("GET", "/api/v1/namespaces/dev").namespace == "dev"
    assert not attributes("GET", "/apis/kubevirt.io/v1").resource_request
    assert not attributes("GET", "/healthz").resource_request


def test_kubevirts_roles() -> None:
    def vm(verb: str, sub: str = "") -> Attributes:
        group = "subresources.kubevirt.io" if sub else "kubevirt.io"
        return Attributes(verb, "", True, group, "virtualmachines", sub, "ns", "x")

    vmim = Attributes("create", "", True, "kubevirt.io", "virtualmachineinstancemigrations")
    assert can(VIEW, vm("get")) and not can(VIEW, vm("delete"))
    assert not can(VIEW, vm("update", "start"))
    assert can(EDIT, vm("delete")) and can(EDIT, vm("update", "start"))
    assert not can(EDIT, vm("deletecollection")) and can(ADMIN, vm("deletecollection"))
    assert not can(EDIT, vmim) and not can(ADMIN, vmim) and can(MIGRATE, vmim)
    assert not can(EDIT, vm("update", "migrate")) and can(MIGRATE, vm("update", "migrate"))
    nodes = Attributes("list", "", True, "", "nodes")
    assert not can(ADMIN, nodes) and can(CLUSTER_ADMIN, nodes)


def test_consoles_are_for_editors() -> None:
    vmis = "/apis/subresources.kubevirt.io/v1/namespaces/ns/virtualmachineinstances/x"
    for stream in ("console", "vnc"):
        a = attributes("GET", f"{vmis}/{stream}")
        assert (a.verb, a.subresource) == ("get", stream)
        assert can(EDIT, a) and can(ADMIN, a) and not can(VIEW, a)


def test_a_registered_kind_is_in_the_roles() -> None:
    roles = cluster_roles(REGISTRY.with_(TOY))
    toys = Attributes("list", "", True, TOY.group, "toys", "", "ns")
    poke = Attributes("update", "", True, TOY.subresource_group, "toys", "poke", "ns", "t")
    assert can(VIEW, toys, roles=roles) and not can(VIEW, toys, roles=ROLES)
    assert can(EDIT, poke, roles=roles) and not can(VIEW, poke, roles=roles)


def test_a_role_binding_holds_in_its_namespace_only() -> None:
    create = Attributes("create", "", True, "kubevirt.io", "virtualmachines", "", "dev")
    assert can(EDIT, create, "dev")
    assert not can(EDIT, Attributes("create", "", True, "kubevirt.io", "virtualmachines",
                                    "", "other"), "dev")  # fmt: skip
    assert not can(EDIT, Attributes("list", "", True, "kubevirt.io", "virtualmachines"), "dev")


def test_public_and_discovery_paths() -> None:
    anonymous = User("system:anonymous", ("system:unauthenticated",))
    someone = User("u", ("system:authenticated",))
    assert allowed(anonymous, attributes("GET", "/healthz"), [], ROLES)
    assert not allowed(anonymous, attributes("GET", "/apis"), [], ROLES)
    assert allowed(someone, attributes("GET", "/apis/kubevirt.io/v1"), [], ROLES)


def test_forbidden_messages_are_the_api_servers() -> None:
    u = User("u")
    assert forbidden_message(u, attributes("GET", "/apis/kubevirt.io/v1/virtualmachines")) == (
        'virtualmachines.kubevirt.io is forbidden: User "u" cannot list resource '
        '"virtualmachines" in API group "kubevirt.io" at the cluster scope'
    )
    assert forbidden_message(u, attributes("GET", "/openapi/v2")) == (
        'forbidden: User "u" cannot get path "/openapi/v2"'
    )


def test_tokens_and_certificates_name_users() -> None:
    config = AuthConfig.parse({"tokens": [{"token": "t", "user": "a", "groups": ["g"]}]})
    assert config.by_token("t") == User("a", ("g",))
    assert config.by_token("T") is None
    cert = {"subject": ((("organizationName", "g1"),), (("commonName", "bob"),))}
    assert from_certificate(cert) == User("bob", ("g1",))


def test_kubectls_protobuf_access_review() -> None:
    body = (
        b"k8s\x00\n2\n\x17authorization.k8s.io/v1\x12\x17SelfSubjectAccessReview\x12S\n\x10"
        b'\n\x00\x12\x00\x1a\x00"\x00*\x002\x008\x00B\x00\x125\n3\n\x07default\x12\x04list'
        b'\x1a\x0bkubevirt.io"\x00*\x0fvirtualmachines2\x00:\x00\x1a\x08\x08\x00\x12\x00\x1a'
        b'\x00 \x00\x1a\x00"\x00'
    )
    assert access_review(body) == {
        "spec": {
            "resourceAttributes": {
                "namespace": "default",
                "verb": "list",
                "group": "kubevirt.io",
                "resource": "virtualmachines",
            }
        }
    }
