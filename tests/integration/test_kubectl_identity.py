"""Who asks, and what kubectl does with it, against one `virtstream up --nodes 1` with the
real kubectl and the `kubernetes` Python client: impersonation (`--as`, `--as-group`,
authorized by the `impersonate` verb), `auth can-i --list` (SelfSubjectRulesReview) and
`auth whoami` (SelfSubjectReview)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client, config

from ops.supervisor import importable
from tests.conftest import REPO
from tests.integration.test_kubectl import Cluster, _rows, _write
from tests.integration.up_process import running_up

pytestmark = pytest.mark.skipif(
    not (importable("services.api") and importable("services.handler")),
    reason="api, controller and handlers are needed",
)

VERA, ALICE = "vera-token-0123456789", "alice-token-0123456789"


@dataclass
class Up(Cluster):
    nats_url: str = ""

    def actors(self, ref: str) -> list[str]:
        """The users who asked for an object's events (`virtstream events`)."""
        out = subprocess.run(
            [sys.executable, "-m", "cli.main", "events", "-a", ref, "-o", "json",
             "--nats-url", self.nats_url],
            cwd=REPO, capture_output=True, text=True, timeout=60, check=True,
        ).stdout  # fmt: skip
        return [json.loads(line)["actor"].get("user", "") for line in out.splitlines()]


@pytest.fixture(scope="module")
def cluster() -> Iterator[Up]:
    with running_up("vs-kid-", 1) as up:
        path = up.data_dir / "auth.yaml"
        doc = yaml.safe_load(path.read_text())
        doc["tokens"] += [
            {"token": VERA, "user": "vera", "groups": ["interns"]},
            {"token": ALICE, "user": "alice", "groups": ["devs"]},
        ]
        doc["roleBindings"] = [
            {
                "name": "devs-edit",
                "namespace": "default",
                "roleRef": {"kind": "ClusterRole", "name": "kubevirt.io:edit"},
                "subjects": [{"kind": "Group", "name": "devs"}],
            }
        ]
        path.write_text(yaml.safe_dump(doc))
        time.sleep(1.5)  # the api reads the auth file again within a second
        yield Up(up.url, up.http, up.data_dir / "kubeconfig", up.data_dir, up.nats_url)


def _bind(cluster: Cluster, binding: dict[str, Any]) -> None:
    path = cluster.home / "auth.yaml"
    doc = yaml.safe_load(path.read_text())
    doc["roleBindings"] = [*doc.get("roleBindings", []), binding]
    path.write_text(yaml.safe_dump(doc))
    time.sleep(1.5)


def test_can_i_as_another_user_answers_as_that_users_own_token(cluster: Cluster) -> None:
    k = cluster.kubectl
    own = k("--token", VERA, "auth", "can-i", "create", "vms", check=False)
    impersonated = k("auth", "can-i", "create", "vms", "--as=vera", check=False)
    assert (own.code, own.out.strip()) == (1, "no")
    assert (impersonated.code, impersonated.out.strip()) == (1, "no")
    # the impersonated user's groups are asked for too, and answer with their bindings
    as_dev = k("auth", "can-i", "create", "vms", "--as=vera", "--as-group=devs")
    assert as_dev.out.strip() == "yes"
    refused = k("get", "vms", "--as=vera", check=False)
    assert refused.code == 1
    assert refused.err.strip() == (
        "Error from server (Forbidden): virtualmachines.kubevirt.io is forbidden: User "
        '"vera" cannot list resource "virtualmachines" in API group "kubevirt.io" in the '
        'namespace "default"'
    )

    _bind(cluster, {
        "name": "vera-view", "namespace": "default",
        "roleRef": {"kind": "ClusterRole", "name": "kubevirt.io:view"},
        "subjects": [{"kind": "User", "name": "vera"}],
    })  # fmt: skip
    for args in (("--token", VERA), ("--as=vera",)):
        assert k(*args, "auth", "can-i", "list", "vms").out.strip() == "yes"
        assert k(*args, "auth", "can-i", "delete", "vms", check=False).out.strip() == "no"
    assert k("get", "vms", "--as=vera").code == 0


def test_impersonation_needs_the_impersonate_verb(cluster: Up, tmp_path: Path) -> None:
    k = cluster.kubectl
    # alice may edit VMs in default, but not act as someone else
    assert k("--token", ALICE, "auth", "can-i", "create", "vms").out.strip() == "yes"
    refused = k("--token", ALICE, "auth", "can-i", "create", "vms", "--as=vera", check=False)
    assert refused.code == 1
    assert refused.err.strip() == (
        'Error from server (Forbidden): users "vera" is forbidden: User "alice" cannot '
        'impersonate resource "users" in API group "" at the cluster scope'
    )
    group = k("--token", ALICE, "get", "vms", "--as=alice", "--as-group=system:masters",
              check=False)  # fmt: skip
    assert group.code == 1 and "cannot impersonate resource" in group.err
    # an impersonated write is the impersonated user's: its events' actor
    vm = str(_write(tmp_path, _vm("as-alice")))
    k("create", "--as=alice", "--as-group=devs", "-f", vm)  # her groups are not looked up
    assert cluster.actors("vm/default/as-alice") == ["alice"]


def _vm(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachine",
        "metadata": {"name": name},
        "spec": {
            "runStrategy": "Halted",
            "template": {"spec": {"domain": {"memory": {"guest": "64Mi"}, "devices": {}}}},
        },
    }


def test_can_i_list_shows_the_users_rules(cluster: Cluster) -> None:
    k = cluster.kubectl
    admin = _rows(k("auth", "can-i", "--list").out)
    assert admin[0] == ["Resources", "Non-Resource", "URLs", "Resource", "Names", "Verbs"]
    assert ["*.*", "[]", "[]", "[*]"] in admin[1:]

    listed = k("--token", ALICE, "auth", "can-i", "--list").out
    alice = {r[0]: " ".join(r[3:]) for r in _rows(listed)[1:]}
    assert alice["virtualmachines.kubevirt.io"] == "[get list watch create update patch delete]"
    assert alice["virtualmachines.subresources.kubevirt.io/start"] == "[update]"
    assert "*.*" not in alice
    # in another namespace the RoleBinding does not hold
    elsewhere = k("--token", ALICE, "auth", "can-i", "--list", "-n", "other").out
    assert "virtualmachines.kubevirt.io" not in elsewhere
    assert "selfsubjectaccessreviews.authorization.k8s.io" in elsewhere
    # impersonated: the impersonated user's rules
    as_alice = k("auth", "can-i", "--list", "--as=alice", "--as-group=devs").out
    assert "virtualmachines.kubevirt.io" in as_alice and "*.*" not in as_alice


def test_whoami_names_the_user_and_its_groups(cluster: Cluster) -> None:
    k = cluster.kubectl
    assert _rows(k("auth", "whoami").out) == [
        ["ATTRIBUTE", "VALUE"],
        ["Username", "admin"],
        ["Groups", "[system:masters", "system:authenticated]"],
    ]
    alice = json.loads(k("--token", ALICE, "auth", "whoami", "-o", "json").out)
    assert alice["apiVersion"] == "authentication.k8s.io/v1"
    assert alice["status"]["userInfo"] == {
        "username": "alice",
        "groups": ["devs", "system:authenticated"],
    }
    as_vera = _rows(k("auth", "whoami", "--as=vera", "--as-group=interns").out)
    assert as_vera[1:] == [["Username", "vera"], ["Groups", "[interns", "system:authenticated]"]]


def test_the_python_client_reviews(cluster: Cluster) -> None:
    api = config.new_client_from_config(config_file=str(cluster.kubeconfig))
    who = client.AuthenticationV1Api(api).create_self_subject_review(client.V1SelfSubjectReview())
    assert who.status is not None and who.status.user_info is not None
    assert who.status.user_info.username == "admin"
    rules = client.AuthorizationV1Api(api).create_self_subject_rules_review(
        client.V1SelfSubjectRulesReview(spec=client.V1SelfSubjectRulesReviewSpec(namespace="x"))
    )
    status = rules.status
    assert status is not None and status.incomplete is False
    assert any(r.resources == ["*"] and r.verbs == ["*"] for r in status.resource_rules)
