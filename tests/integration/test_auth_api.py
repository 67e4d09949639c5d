"""Authentication and RBAC on the api: 401 without (or with wrong) credentials, KubeVirt's
roles as bound in the auth file (view, edit in one namespace), `kubectl auth can-i`, and
the authenticated user as the actor of the events (seen in `virtstream why`)."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
import typer
from typer.testing import CliRunner

from cli import kubeconfig
from cli.debug import register
from events.meta import Aggregate, Kind
from eventstore.jetstream import JetStreamStore
from ops.nats_server import NatsServer
from ops.pki import Pki
from services.api.guard import Guard
from services.api.nats_endpoints import answer
from services.api.service import ApiService
from tests.integration.test_api_support import RunningApi, create_namespace, running_api

KUBECTL = shutil.which("kubectl", path=str(Path(sys.executable).parent)) or "kubectl"
VMS = "/apis/kubevirt.io/v1/namespaces/{ns}/virtualmachines"
VIEW, EDIT = "view-token-0123456789", "edit-token-0123456789"
EXTRA = {
    "tokens": [
        {"token": VIEW, "user": "victor", "groups": ["viewers"]},
        {"token": EDIT, "user": "alice"},
    ],
    "clusterRoleBindings": [
        {
            "name": "viewers",
            "roleRef": {"kind": "ClusterRole", "name": "kubevirt.io:view"},
            "subjects": [{"kind": "Group", "name": "viewers"}],
        }
    ],
    "roleBindings": [
        {
            "name": "alice-edit",
            "namespace": "dev",
            "roleRef": {"kind": "ClusterRole", "name": "kubevirt.io:edit"},
            "subjects": [{"kind": "User", "name": "alice"}],
        }
    ],
}


def vm(name: str) -> dict[str, object]:
    return {
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachine",
        "metadata": {"name": name},
        "spec": {
            "runStrategy": "Halted",
            "template": {"spec": {"domain": {"devices": {}, "memory": {"guest": "64Mi"}}}},
        },
    }


@pytest.fixture
async def api(store: JetStreamStore, pki: Pki) -> AsyncIterator[RunningApi]:
    async with running_api(store, extra=EXTRA, pki=pki) as running:
        await create_namespace(running, "dev")
        yield running


def client(api: RunningApi, token: str = "") -> httpx.AsyncClient:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return httpx.AsyncClient(base_url=api.url, headers=headers, verify=api.verify, timeout=10)


async def test_no_or_wrong_credentials_are_401_but_health_and_version_are_public(
    api: RunningApi,
) -> None:
    assert api.store is not None
    before = await api.store.stream_last_seq()
    async with client(api) as anonymous, client(api, "not-a-token") as wrong:
        r = await anonymous.get(VMS.format(ns="default"))
        assert r.status_code == 401
        assert r.json() == {
            "apiVersion": "v1",
            "kind": "Status",
            "status": "Failure",
            "message": "Unauthorized",
            "reason": "Unauthorized",
            "code": 401,
        }
        assert (await anonymous.get("/apis")).status_code == 401  # discovery: authenticated
        for path in ("/healthz", "/version"):
            assert (await anonymous.get(path)).status_code == 200
        assert (await wrong.get("/healthz")).status_code == 401
        assert (await wrong.post(VMS.format(ns="default"), json=vm("x"))).status_code == 401
    assert await api.store.stream_last_seq() == before  # nothing appended


async def test_a_viewer_reads_but_cannot_start_or_delete(api: RunningApi) -> None:
    async with client(api, api.token) as admin, client(api, VIEW) as viewer:
        assert (await admin.post(VMS.format(ns="default"), json=vm("x"))).status_code == 201
        before = await api.store.stream_last_seq()
        assert (await viewer.get(f"{VMS.format(ns='default')}/x")).status_code == 200
        assert (await viewer.get(VMS.format(ns="default"))).status_code == 200
        start = "/apis/subresources.kubevirt.io/v1/namespaces/default/virtualmachines/x/start"
        r = await viewer.put(start, json={})
        assert r.status_code == 403
        assert r.json()["reason"] == "Forbidden"
        assert r.json()["message"] == (
            'virtualmachines.subresources.kubevirt.io "x" is forbidden: User "victor" cannot '
            'update resource "virtualmachines/start" in API group "subresources.kubevirt.io" '
            'in the namespace "default"'
        )
        r = await viewer.delete(f"{VMS.format(ns='default')}/x")
        assert r.status_code == 403
        assert r.json()["message"] == (
            'virtualmachines.kubevirt.io "x" is forbidden: User "victor" cannot delete '
            'resource "virtualmachines" in API group "kubevirt.io" in the namespace "default"'
        )
        assert await api.store.stream_last_seq() == before  # nothing appended


async def test_an_editor_bound_to_one_namespace_is_refused_in_another(api: RunningApi) -> None:
    async with client(api, EDIT) as alice:
        assert (await alice.post(VMS.format(ns="dev"), json=vm("mine"))).status_code == 201
        r = await alice.post(VMS.format(ns="default"), json=vm("theirs"))
        assert r.status_code == 403
        assert r.json()["message"] == (
            'virtualmachines.kubevirt.io is forbidden: User "alice" cannot create resource '
            '"virtualmachines" in API group "kubevirt.io" in the namespace "default"'
        )
        # a role binding reaches no cluster-wide list
        assert (await alice.get("/apis/kubevirt.io/v1/virtualmachines")).status_code == 403


async def kubectl(config: Path, *args: str) -> tuple[int, str]:
    env = {**os.environ, "KUBECONFIG": str(config), "HOME": str(config.parent)}
    proc = await asyncio.create_subprocess_exec(
        KUBECTL, *args, env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    return proc.returncode or 0, (out + err).decode().strip()


async def test_kubectl_auth_can_i_answers_as_the_bindings_say(
    api: RunningApi, tmp_path: Path
) -> None:
    assert api.pki is not None
    ca = api.pki.ca.read_bytes()
    configs = {}
    for who, token in (("viewer", VIEW), ("alice", EDIT)):
        (tmp_path / who).mkdir()
        path = tmp_path / who / "kubeconfig"
        configs[who] = kubeconfig.write(path, api.url, token=token, ca_pem=ca)
    viewer, alice = configs["viewer"], configs["alice"]
    assert await kubectl(viewer, "auth", "can-i", "list", "virtualmachines") == (0, "yes")
    assert (await kubectl(viewer, "auth", "can-i", "delete", "virtualmachines"))[1] == "no"
    assert (await kubectl(alice, "auth", "can-i", "create", "vms", "-n", "dev")) == (0, "yes")
    assert (await kubectl(alice, "auth", "can-i", "create", "vms", "-n", "default"))[1] == "no"
    # KubeVirt's edit role: no live migrations without the migrate role
    can_migrate = await kubectl(alice, "auth", "can-i", "create", "vmim", "-n", "dev")
    assert can_migrate[1] == "no"


async def test_the_actor_of_an_event_is_the_user_who_asked(
    api: RunningApi, nats_server: NatsServer
) -> None:
    async with client(api, EDIT) as alice:
        assert (await alice.post(VMS.format(ns="dev"), json=vm("who"))).status_code == 201
    events = await api.store.load(Aggregate(Kind.VM, "dev", "who"))
    assert [s.event.meta.actor.user for s in events] == ["alice"]
    app = typer.Typer()
    register(app)
    argv = ["why", "vm/dev/who", "--nats-url", nats_server.url]
    argv += ["--stream", api.store.settings.name]
    result = await asyncio.to_thread(CliRunner().invoke, app, argv, env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    assert "virt-api (alice)" in result.output


async def test_the_cli_with_wrong_credentials_says_so_in_one_line(
    api: RunningApi, monkeypatch: pytest.MonkeyPatch
) -> None:
    from cli.main import app as cli_app

    monkeypatch.setenv("VIRTSTREAM_TOKEN", "not-a-token")
    monkeypatch.setenv("VIRTSTREAM_CA", str(api.pki.ca if api.pki else ""))
    result = await asyncio.to_thread(
        CliRunner().invoke, cli_app, ["--server", api.url, "get", "vms"]
    )
    assert result.exit_code == 1
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(
        "error: You must be logged in to the server (Unauthorized)"
    ), result.output


async def test_an_intent_over_nats_with_a_token_is_authorized_and_its_user_the_actor(
    api: RunningApi,
) -> None:
    assert api.authenticator is not None
    service = ApiService(api.runner, api.store)
    guard = Guard.of(api.authenticator, service.kinds)
    subject = "virt-api.v1.dev.virtualmachines.by-nats.create"
    body = json.dumps(vm("by-nats")).encode()

    def bearer(token: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {token}"}

    refused = await answer(service, subject, body, bearer(VIEW), "c1", guard)
    assert refused.code == 403
    assert refused.error == (
        'virtualmachines.kubevirt.io "by-nats" is forbidden: User "victor" cannot create '
        'resource "virtualmachines" in API group "kubevirt.io" in the namespace "dev"'
    )
    assert (await answer(service, subject, body, bearer("nope"), "c2", guard)).code == 401
    created = await answer(service, subject, body, bearer(EDIT), "c3", guard)
    assert created.code == 201
    events = await api.store.load(Aggregate(Kind.VM, "dev", "by-nats"))
    assert [s.event.meta.actor.user for s in events] == ["alice"]
