"""Nothing listens unauthenticated under `virtstream up`:

- the nodes' console servers serve the api alone (mutual TLS with the cluster's CA and
  KubeVirt's names; the console through the api is `test_qemu_console.py`);
- an intent over NATS without a token is refused, or runs as the auth file's
  `natsIntents` identity under RBAC (the real NATS client);
- /metrics of the api, the controller and the handlers needs a token (Prometheus's, which
  `up --metrics` scrapes with: `test_observability_up.py`);
- every port `up --metrics` listens on answers an anonymous local client with health at
  most: nats-server's monitoring port is closed, Prometheus wants its user (whose password
  the api's Prometheus proxy reads from the data dir), the NATS port wants a user;
- an `Idempotency-Key` is honoured by every api replica and is its user's own;
- `up --nats-url` writes the NATS users for that server and starts nothing until the
  server enforces them."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import ssl
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import msgspec
import nats
import pytest
import yaml
from nats.js.api import StorageType
from websockets.asyncio.client import connect
from websockets.exceptions import InvalidHandshake, InvalidStatus

from core.context import Append, Outcome, RequestContext
from core.idempotency import Idempotency
from events.catalog import VMCreated
from events.codec import decode
from events.meta import Kind
from eventstore.connection import ConnectOptions, jetstream_answers
from eventstore.jetstream import JetStreamStore
from eventstore.keyed import JetStreamKeyedRecords
from ops import nats_auth
from ops import pki as pki_
from ops.nats_server import NatsServer
from ops.ports import free_port
from ops.supervisor import importable, interrupt
from projections.cluster import Cluster
from readside.runner import ProjectionRunner
from services.api.service import ApiService
from services.handler.console_server import ConsoleServer
from services.runtime.mtls import TlsFiles
from tests.conftest import REPO
from tests.integration.polling import until
from tests.integration.up_process import RunningUp, running_up

pytestmark = pytest.mark.skipif(
    not (importable("services.api") and importable("services.handler")),
    reason="api, controller and handlers are needed",
)

VMS = "/apis/kubevirt.io/v1/namespaces/default/virtualmachines"
# the handshake fails (TLS 1.3: the server's refusal of the client certificate comes after
# the client's part of the handshake, so the client sees the connection end instead)
REFUSED = (ssl.SSLError, OSError, InvalidHandshake)


def vm(name: str, strategy: str = "Halted") -> dict[str, Any]:
    return {
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachine",
        "metadata": {"name": name},
        "spec": {
            "runStrategy": strategy,
            "template": {"spec": {"domain": {"memory": {"guest": "64Mi"}, "devices": {}}}},
        },
    }


# ----------------------------------------------------------- console server
@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> pki_.Pki:
    return pki_.ensure(tmp_path_factory.mktemp("doors-pki"))


@pytest.fixture
async def console(pki: pki_.Pki) -> AsyncIterator[int]:
    files = TlsFiles(pki.handler_server_cert, pki.handler_server_key, pki.ca)
    server = ConsoleServer("test:///default", "127.0.0.1", 0, files)
    port = await server.start()
    yield port
    await server.close()


def _client(pki: pki_.Pki, cert: Path | None, key: Path | None) -> ssl.SSLContext:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.load_verify_locations(cafile=pki.ca)
    if cert is not None:
        ctx.load_cert_chain(cert, key)
    return ctx


async def _dial(port: int, ctx: ssl.SSLContext) -> int:
    """The HTTP status the console server answers a console request with."""
    url = f"wss://127.0.0.1:{port}/v1/namespaces/default/virtualmachineinstances/x/console"
    try:
        async with connect(url, ssl=ctx, open_timeout=5):
            return 101
    except InvalidStatus as e:
        return e.response.status_code


async def test_the_console_server_serves_the_api_alone(pki: pki_.Pki, console: int) -> None:
    # no client certificate: the TLS handshake fails, nothing is served
    with pytest.raises(REFUSED):
        await _dial(console, _client(pki, None, None))
    # the node's own certificate is a server's: it cannot pass for a client
    with pytest.raises(REFUSED):
        await _dial(console, _client(pki, pki.handler_server_cert, pki.handler_server_key))
    # a client certificate of the same CA, but not the api's (kubectl's admin): 403
    admin = _client(pki, pki.admin_cert, pki.admin_key)
    assert await _dial(console, admin) == 403
    # the api's: past TLS and the name check, answered for the guest (not on this node)
    api = TlsFiles(pki.handler_client_cert, pki.handler_client_key, pki.ca).client_context()
    assert await _dial(console, api) == 404
    # and plain WebSockets are not served at all
    with pytest.raises(REFUSED):
        async with connect(
            f"ws://127.0.0.1:{console}/v1/namespaces/default/virtualmachineinstances/x/console",
            open_timeout=5,
        ):
            pass


# ------------------------------------------------------------ one `up` for the rest
@pytest.fixture(scope="module")
def up() -> Iterator[RunningUp]:
    metrics = ("--metrics", "--prometheus-port", str(free_port()), "--scrape-interval", "1s")
    with running_up("vs-doors-", 1, *metrics) as running:
        yield running


def _token(up: RunningUp, name: str) -> str:
    return (up.data_dir / "credentials" / name).read_text().strip()


def _edit_auth(up: RunningUp, change: dict[str, Any]) -> None:
    """The operator edits the auth file; the api reads it again within a second."""
    path = up.data_dir / "auth.yaml"
    doc = yaml.safe_load(path.read_text())
    for key, value in change.items():
        doc[key] = [*doc.get(key, []), *value] if isinstance(value, list) else value
    path.write_text(yaml.safe_dump(doc))
    time.sleep(1.5)


async def _nats(up: RunningUp, user: str = "scripts") -> nats.NATS:
    password = _token(up, f"nats-{user}")
    return await nats.connect(up.nats_url, user=user, password=password)


async def _intent(nc: nats.NATS, name: str, token: str = "") -> tuple[int, dict[str, Any]]:
    headers = {"Authorization": f"Bearer {token}"} if token else None
    subject = f"virt-api.v1.default.virtualmachines.{name}.create"
    msg = await nc.request(subject, json.dumps(vm(name)).encode(), 10, headers=headers)
    return int((msg.headers or {})["Virt-Status-Code"]), json.loads(msg.data)


async def test_an_intent_without_a_token_runs_as_the_configured_identity(up: RunningUp) -> None:
    nc = await _nats(up)
    try:
        seq = int(up.http.get(VMS).json()["metadata"]["resourceVersion"])
        code, body = await _intent(nc, "nats-anon")
        assert (code, body["reason"]) == (401, "Unauthorized")  # refused by default

        _edit_auth(up, {"natsIntents": {"user": "nightly", "groups": ["automation"]}})
        code, body = await _intent(nc, "nats-anon")
        assert code == 403
        assert body["message"] == (
            'virtualmachines.kubevirt.io "nats-anon" is forbidden: User "nightly" cannot '
            'create resource "virtualmachines" in API group "kubevirt.io" in the namespace '
            '"default"'
        )
        assert int(up.http.get(VMS).json()["metadata"]["resourceVersion"]) == seq

        binding = {
            "name": "nightly-edit",
            "namespace": "default",
            "roleRef": {"kind": "ClusterRole", "name": "kubevirt.io:edit"},
            "subjects": [{"kind": "Group", "name": "automation"}],
        }
        _edit_auth(up, {"roleBindings": [binding]})
        code, body = await _intent(nc, "nats-anon")
        assert code == 201, body
        # a token still wins: the admin's intent is the admin's
        code, _ = await _intent(nc, "nats-admin", _token(up, "admin-token"))
        assert code == 201
        js = nc.jetstream()
        for name, user in (("nats-anon", "nightly"), ("nats-admin", "admin")):
            msg = await js.get_last_msg("VIRT", f"virt.vm.default.{name}.VMCreated._")
            assert decode(msg.data or b"").meta.actor.user == user
    finally:
        await nc.close()


def _metrics_ports(up: RunningUp) -> dict[str, int]:
    """The controller's and the handler's metrics ports, from what `up` recorded."""
    recorded = msgspec.json.decode((up.data_dir / "up.json").read_bytes())
    out = {}
    for name, r in recorded.items():
        argv = r["argv"]
        if "--metrics-port" in argv:
            out[name] = int(argv[argv.index("--metrics-port") + 1])
    return out


def test_metrics_need_a_token(up: RunningUp) -> None:
    ca = ssl.create_default_context(cafile=up.data_dir / "pki" / "ca.crt")
    prometheus = {"Authorization": f"Bearer {_token(up, 'prometheus-token')}"}
    admin = {"Authorization": f"Bearer {_token(up, 'admin-token')}"}
    with httpx.Client(verify=ca, timeout=10) as http:
        url = f"{up.url}/metrics"
        anonymous = http.get(url)
        assert anonymous.status_code == 401 and anonymous.json()["reason"] == "Unauthorized"
        assert http.get(url, headers=prometheus).status_code == 200
        assert "kubevirt_" in http.get(url, headers=admin).text  # cluster-admin may
        # Prometheus's token reads /metrics and nothing else
        refused = http.get(f"{up.url}{VMS}", headers=prometheus)
        assert refused.status_code == 403
        assert 'User "prometheus" cannot list resource' in refused.json()["message"]

        ports = _metrics_ports(up)
        assert {"controller", "handler node-1"} <= set(ports)
        for port in ports.values():
            url = f"https://127.0.0.1:{port}/metrics"  # HTTPS, with the cluster's CA
            assert http.get(url).status_code == 401
            assert http.get(url, headers=admin).status_code == 401  # the api's users: no
            answered = http.get(url, headers=prometheus)
            assert answered.status_code == 200 and "virtstream_" in answered.text
            assert http.get(f"https://127.0.0.1:{port}/healthz").status_code == 200


# ------------------------------------------------------------ every open port
# what an anonymous client may read: health; the rest of what is probed must be refused
HEALTH = ("/healthz", "/readyz", "/livez", "/-/healthy", "/-/ready")
PROBED = (
    "/", "/metrics", "/varz", "/connz?subs=1", "/jsz?streams=1", "/subsz", "/accountz",
    "/api/v1/query?query=up", "/api/v1/targets", "/api/v1/status/config", "/graph",
    "/federate?match[]=up", "/apis", "/api/v1/nodes", "/prometheus/api/v1/query?query=up",
    VMS, "/debug/pprof/",
)  # fmt: skip


def _listening_ports(pids: set[int]) -> set[int]:
    """The TCP ports these processes listen on (their sockets' inodes in /proc/net/tcp*)."""
    inodes = set()
    for pid in pids:
        with contextlib.suppress(OSError):
            for fd in Path(f"/proc/{pid}/fd").iterdir():
                with contextlib.suppress(OSError):
                    target = os.readlink(fd)
                    if target.startswith("socket:["):
                        inodes.add(target[8:-1])
    ports = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] == "0A" and fields[9] in inodes:  # LISTEN
                ports.add(int(fields[1].rsplit(":", 1)[1], 16))
    return ports


def _processes_of(data_dir: Path) -> set[int]:
    """Every process whose command line names the data dir (services, nats-server,
    Prometheus), and their children."""
    found: set[int] = set()
    parents: dict[int, int] = {}
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == os.getpid():
            continue
        with contextlib.suppress(OSError):
            if str(data_dir).encode() in (proc / "cmdline").read_bytes():
                found.add(int(proc.name))
            stat = (proc / "stat").read_text()
            parents[int(proc.name)] = int(stat.rsplit(")", 1)[1].split()[1])
    grown = True
    while grown:
        more = {pid for pid, parent in parents.items() if parent in found} - found
        found |= more
        grown = bool(more)
    return found


def _first_bytes(port: int) -> bytes:
    """What the port says before it is asked anything (NATS: its INFO line)."""
    import socket

    with socket.create_connection(("127.0.0.1", port), timeout=2) as sock:
        sock.settimeout(0.5)
        try:
            return sock.recv(5)
        except TimeoutError:
            return b""


def _http_answers(port: int, ca: ssl.SSLContext) -> dict[str, int]:
    """Each probed path's status, over HTTPS (the cluster's CA, no client certificate)
    where the port speaks TLS, else plain HTTP."""
    for scheme, verify in (("https", ca), ("http", False)):
        try:
            with httpx.Client(verify=verify, timeout=5) as http:
                return {p: http.get(f"{scheme}://127.0.0.1:{port}{p}").status_code
                        for p in (*PROBED, *HEALTH)}  # fmt: skip
        except httpx.TransportError:
            continue
    raise AssertionError(f"port {port} speaks neither HTTP nor HTTPS nor NATS")


async def _anonymous_nats_refused(port: int) -> None:
    with pytest.raises(Exception, match=r"[Aa]uthorization"):
        await nats.connect(
            f"nats://127.0.0.1:{port}", allow_reconnect=False, max_reconnect_attempts=0
        )


def test_an_anonymous_local_client_gets_nothing_but_health_from_any_port(
    up: RunningUp,
) -> None:
    ca = ssl.create_default_context(cafile=up.data_dir / "pki" / "ca.crt")
    ca.check_hostname = False
    ports = _listening_ports(_processes_of(up.data_dir))
    recorded = _metrics_ports(up)
    # the api, NATS, the controller's, the upkeep's and the handler's metrics, Prometheus:
    # no more
    assert {up.port, up.nats_port, *recorded.values()} < ports, ports
    assert len(ports) == 6, f"ports open under `up --metrics`: {sorted(ports)}"
    answered: dict[int, dict[str, int]] = {}
    for port in sorted(ports):
        if _first_bytes(port) == b"INFO ":
            assert port == up.nats_port
            asyncio.run(_anonymous_nats_refused(port))
            continue
        answers = _http_answers(port, ca)
        opened = {p: code for p, code in answers.items() if p not in HEALTH and code < 400}
        assert not opened, f"port {port} answers an anonymous client: {opened}"
        answered[port] = answers
    # Prometheus refuses even its health without its user; with it, it answers
    prom_port = next(p for p in ports if p not in {up.port, up.nats_port, *recorded.values()})
    assert answered[prom_port]["/-/ready"] == 401
    password = (up.data_dir / "credentials" / "prometheus-password").read_text().strip()
    with httpx.Client(auth=("virtstream", password), timeout=10) as prom:
        r = prom.get(f"http://127.0.0.1:{prom_port}/api/v1/query", params={"query": "up"})
        assert r.status_code == 200 and r.json()["status"] == "success"
    # the console's charts: the api relays as that user
    relayed = up.http.get("/prometheus/api/v1/query", params={"query": "up"})
    assert relayed.status_code == 200, relayed.text
    assert relayed.json()["status"] == "success"
    web = yaml.safe_load((up.data_dir / "prometheus" / "web.yml").read_text())
    assert password not in str(web)  # Prometheus keeps the hash only
    source = up.data_dir / "grafana" / "provisioning" / "datasources" / "prometheus.yaml"
    ds = yaml.safe_load(source.read_text())["datasources"][0]
    assert ds["url"] == f"http://127.0.0.1:{prom_port}" and ds["basicAuth"] is True
    assert ds["secureJsonData"]["basicAuthPassword"] == password
    assert source.stat().st_mode & 0o777 == 0o600


@contextlib.contextmanager
def second_api(up: RunningUp) -> Iterator[str]:
    """Another api process on the same bus, as `up` runs its own (same user and files)."""
    port = free_port()
    d = up.data_dir
    env = {
        **os.environ,
        "VIRTSTREAM_NATS_USER": "api",
        "VIRTSTREAM_NATS_PASSWORD": _token(up, "nats-api"),
    }
    proc = subprocess.Popen(
        [sys.executable, "-m", "services.api", "--nats-url", up.nats_url, "--port", str(port),
         "--auth-file", str(d / "auth.yaml"), "--tls-cert", str(d / "pki" / "server.crt"),
         "--tls-key", str(d / "pki" / "server.key"), "--client-ca", str(d / "pki" / "ca.crt")],
        cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        yield f"https://127.0.0.1:{port}"
    finally:
        interrupt(proc, 30)


def test_an_idempotency_key_is_honoured_by_every_replica_and_is_its_users(
    up: RunningUp,
) -> None:
    _edit_auth(
        up,
        {
            "tokens": [{"token": "bob-token-0123456789", "user": "bob", "groups": ["dev"]}],
            "clusterRoleBindings": [
                {
                    "name": "dev-edit",
                    "roleRef": {"kind": "ClusterRole", "name": "kubevirt.io:edit"},
                    "subjects": [{"kind": "Group", "name": "dev"}],
                }
            ],
        },
    )
    ca = ssl.create_default_context(cafile=up.data_dir / "pki" / "ca.crt")
    admin = {"Authorization": f"Bearer {_token(up, 'admin-token')}"}
    bob = {"Authorization": "Bearer bob-token-0123456789"}
    with second_api(up) as other, httpx.Client(verify=ca, timeout=15) as http:
        until(lambda: http.get(f"{other}/readyz").is_success, 60, "the second api")
        key = {"Idempotency-Key": "create-k1"}
        first = http.post(f"{up.url}{VMS}", json=vm("idem-1"), headers={**admin, **key})
        assert first.status_code == 201, first.text
        seq = int(http.get(f"{up.url}{VMS}", headers=admin).json()["metadata"]["resourceVersion"])

        # the same request on the other replica: the first's answer, nothing appended
        again = http.post(f"{other}{VMS}", json=vm("idem-1"), headers={**admin, **key})
        assert again.status_code == 201, again.text
        assert again.json()["metadata"]["uid"] == first.json()["metadata"]["uid"]
        listed = http.get(f"{other}{VMS}", headers=admin).json()
        assert int(listed["metadata"]["resourceVersion"]) == seq
        # the same key with another request, on either replica: refused
        other_body = http.post(
            f"{other}{VMS}", json=vm("idem-1", "Always"), headers={**admin, **key}
        )
        assert other_body.status_code == 422
        assert "already used for a different request" in other_body.json()["message"]

        # bob's key is bob's: the admin's request under it is not his answer
        mine = http.post(f"{other}{VMS}", json=vm("idem-bob"), headers={**bob, **key})
        assert mine.status_code == 201, mine.text
        assert mine.json()["metadata"]["name"] == "idem-bob"
        same = http.post(f"{up.url}{VMS}", json=vm("idem-bob"), headers={**bob, **key})
        assert same.json()["metadata"]["uid"] == mine.json()["metadata"]["uid"]
        # and the admin's same request under the same key is still the admin's
        theirs = http.post(f"{up.url}{VMS}", json=vm("idem-1"), headers={**admin, **key})
        assert theirs.json()["metadata"]["uid"] == first.json()["metadata"]["uid"]


# ------------------------------------------------ nats-server without monitoring
def test_a_server_without_monitoring_is_ready_to_its_users_alone(tmp_path: Path) -> None:
    """`up`'s servers open no monitoring port; whether one serves JetStream is asked over
    the client port, as a user (an anonymous client learns nothing)."""
    users = nats_auth.users(["node-1"])
    reader = next(u for u in users if u.name == "reader")
    probe = ConnectOptions(user=reader.name, password=reader.password)
    server = NatsServer(
        tmp_path / "nats",
        authorization=nats_auth.authorization_block(users),
        monitoring=False,
        client=probe,
    )
    assert "http:" not in server.config() and server.monitoring_url == ""
    server.start_sync()
    try:
        assert server.ready() and server.ready(clustered=True)
        assert not jetstream_answers(server.url, ConnectOptions())  # anonymous: refused
        assert server.http_port == 0
    finally:
        server.stop_sync()


# ----------------------------------------------------------- an external NATS
def test_up_on_an_external_nats_writes_and_uses_its_users() -> None:
    with tempfile.TemporaryDirectory(prefix="vs-ext-") as d:  # short: sockets live there
        _up_on_an_external_nats(Path(d))


def _up_on_an_external_nats(tmp_path: Path) -> None:
    bare = NatsServer(tmp_path / "nats")  # anyone may connect: not for virtstream
    bare.start_sync()
    data = tmp_path / "up"
    try:
        refused = subprocess.run(
            [sys.executable, "-m", "cli.main", "up", "--data-dir", str(data),
             "--port", str(free_port()), "--nats-url", bare.url],
            cwd=REPO, capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        include = data / "nats" / "authorization.conf"
        assert refused.returncode == 1
        out = " ".join(refused.stdout.split())
        assert (
            f"lets clients in without credentials: copy {include} beside its config file, "
            "add `include authorization.conf` to that and reload it" in out
        ), out
        assert include.stat().st_mode & 0o777 == 0o600
    finally:
        bare.stop_sync()

    # the owner includes the file (here: the same server, restarted with it)
    shutil.copy(include, tmp_path / "nats" / include.name)
    secured = NatsServer(
        tmp_path / "nats", port=bare.settings.port, authorization=f"include {include.name}\n"
    )
    secured.start_sync()
    try:
        with running_up("", 1, "--nats-url", secured.url, data_dir=data) as up:
            r = up.http.post(VMS, json=vm("on-external"))
            assert r.status_code == 201, r.text
            asyncio.run(_external_bus_is_secured(secured.url, up))
    finally:
        secured.stop_sync()


async def _external_bus_is_secured(url: str, up: RunningUp) -> None:
    with pytest.raises(Exception, match=r"[Aa]uthorization"):
        await nats.connect(url, allow_reconnect=False, max_reconnect_attempts=0)
    errors: list[str] = []

    async def on_error(e: Exception) -> None:
        errors.append(str(e))

    password = _token(up, "nats-handler-node-1")
    nc = await nats.connect(url, user="handler-node-1", password=password, error_cb=on_error)
    try:
        await nc.publish("virt-api.v1.default.virtualmachines.x.delete", b"{}")
        await nc.flush()
        await asyncio.sleep(0.5)
        assert any("permissions violation" in e.lower() for e in errors), errors
    finally:
        await nc.close()


# ------------------------------------------------- a keyed decision that never landed
async def test_a_keyed_decision_that_never_landed_is_replaced_by_the_next(
    store: JetStreamStore, nc: nats.NATS
) -> None:
    """The key's record is written before the append; when that append conflicts, the
    decision made again replaces it (a first-writer-wins record would keep answering with
    the stale one), and a retry with the key is answered with what landed."""
    bucket = f"idem-{store.settings.name}"
    keys = JetStreamKeyedRecords(nc.jetstream(), 120, bucket=bucket, storage=StorageType.MEMORY)
    runner = ProjectionRunner(store)
    await runner.start()
    api = ApiService(runner, store, keys=keys)
    calls: list[int] = []

    def decide(_: Cluster, ctx: RequestContext) -> Outcome:
        calls.append(1)
        expected = 7 if len(calls) == 1 else 0  # the first decision is stale
        meta = ctx.meta(Kind.VM, "default", "keyed", uid="u-keyed")
        manifest = {**vm("keyed"), "metadata": {"name": "keyed", "namespace": "default"}}
        event = VMCreated(meta=meta, manifest=manifest)
        return Outcome((Append(event, expected),), Kind.VM, "default/keyed", 201)

    idem = Idempotency.of("k-1", lambda: "POST /x", b'{"a": 1}')
    assert idem is not None
    try:
        outcome, seq = await api.appended(decide, "c", idem)
        assert len(calls) == 2 and outcome.appends[0].expected == 0
        again, seq_again = await api.appended(decide, "c", idem)
        assert len(calls) == 2 and again == outcome  # answered from the record
        assert seq_again == seq == await store.stream_last_seq() == 1
    finally:
        await runner.stop()
        await nc.jetstream().delete_key_value(bucket)
