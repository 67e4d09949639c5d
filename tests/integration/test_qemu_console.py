"""A booted guest's console, VNC and screen through the real api and CLI, and its live
migration (qemu mode, TCG). One `virtstream up --hypervisor qemu --nodes 2` and one guest
(vm-cirros.yaml unchanged) for the module; the tests run in file order on that guest:
console, VNC, screenshot, then the migration (which moves it to the other node).

Skipped without the qemu packages or root."""

from __future__ import annotations

import json
import os
import random
import re
import signal
import ssl
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pexpect
import pytest
import yaml
from PIL import Image
from websockets.exceptions import ConnectionClosed, InvalidHandshake, InvalidStatus
from websockets.sync.client import connect

from tests.conftest import REPO
from tests.integration.polling import until
from tests.integration.qemu_support import CIRROS, qemu_marks
from tests.integration.qemu_up import (
    BOOT_TIMEOUT,
    SUB_VM,
    VMS,
    Cluster,
    read_for,
    running_cluster,
)

pytestmark = qemu_marks

COUNT = re.compile(r"count (\d+) up (\d+\.\d+)")


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    with running_cluster("vs-qc-", nodes=2) as c:
        assert c.http.post(VMS, json=yaml.safe_load(CIRROS.read_text())).is_success
        assert c.http.put(f"{SUB_VM}/vm-cirros/start", json={}).is_success
        c.phase("vm-cirros", "Running")
        c.console_shows("vm-cirros", "vm-cirros:~# ")  # the guest's prompt
        yield c


def test_console_answers_a_command_typed_through_the_cli(cluster: Cluster) -> None:
    token = f"{random.randrange(16**6):06x}"
    child = pexpect.spawn(
        sys.executable, ["-m", "cli.main", "console", "vm-cirros", "--timeout", "1"],
        cwd=str(REPO), env={**os.environ, "VIRTSTREAM_SERVER": cluster.server}, timeout=60,
    )  # fmt: skip
    try:
        child.expect("The escape sequence is")
        child.send("\r")
        child.expect("vm-cirros:~# ")
        # the shell's answer, not the typed line's echo: only the answer has 42 in it
        child.send(f"echo hello-$((6*7))-{token}\r")
        child.expect(f"hello-42-{token}")
        child.sendcontrol("]")
        child.expect(pexpect.EOF)
    finally:
        child.close()
    assert child.exitstatus == 0


def test_the_nodes_console_server_refuses_anyone_but_the_api(cluster: Cluster) -> None:
    """What the api reaches: a local process dialling the node's port itself gets nothing,
    not even with the admin's certificate (mutual TLS, the api's name only)."""
    node = cluster.http.get(f"/api/v1/nodes/{cluster.vmi('vm-cirros')['status']['nodeName']}")
    port = node.json()["status"]["daemonEndpoints"]["consoleEndpoint"]["Port"]
    path = "/v1/namespaces/default/virtualmachineinstances/vm-cirros/console"
    with pytest.raises((OSError, InvalidHandshake)):  # plain: nothing speaks it
        connect(f"ws://127.0.0.1:{port}{path}", open_timeout=5).close()
    pki = cluster.data_dir / "pki"
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.load_verify_locations(cafile=pki / "ca.crt")
    # no client certificate: under TLS 1.3 the server's alert may come after the client's
    # side of the handshake, as the opening handshake's connection closing
    with pytest.raises((OSError, InvalidHandshake, ConnectionClosed)):
        connect(f"wss://127.0.0.1:{port}{path}", ssl=ctx, open_timeout=5).close()
    ctx.load_cert_chain(pki / "admin.crt", pki / "admin.key")
    with pytest.raises(InvalidStatus) as refused:  # the CA's, but not the api's
        connect(f"wss://127.0.0.1:{port}{path}", ssl=ctx, open_timeout=5).close()
    assert refused.value.response.status_code == 403


def test_console_of_a_missing_vmi_is_one_line_and_a_404(cluster: Cluster) -> None:
    r = cluster.cli("console", "no-such-vmi", "--timeout", "0")
    assert r.returncode == 1
    assert r.stderr.strip().splitlines() == [
        "error: Can't connect to websocket (404): virtualmachineinstances.kubevirt.io "
        '"no-such-vmi" not found'
    ]


def test_vnc_proxy_only_gives_a_port_that_speaks_rfb(cluster: Cluster) -> None:
    env = {**os.environ, "VIRTSTREAM_SERVER": cluster.server}
    proxy = subprocess.Popen(
        [sys.executable, "-m", "cli.main", "vnc", "vm-cirros", "--proxy-only"],
        cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert proxy.stdout is not None
        port = json.loads(proxy.stdout.readline())["port"]
        import socket

        with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
            assert s.recv(12) == b"RFB 003.008\n"  # QEMU's ProtocolVersion
            s.sendall(b"RFB 003.008\n")
            count = s.recv(1)[0]  # the security types QEMU offers
            assert count >= 1 and 1 in s.recv(count)  # 1: None (no password on loopback)
    finally:
        proxy.send_signal(signal.SIGINT)
        proxy.wait(timeout=10)


def test_a_screenshot_of_the_booted_guest_is_a_non_blank_png(
    cluster: Cluster, tmp_path: Path
) -> None:
    out = tmp_path / "screen.png"
    r = cluster.cli("screenshot", "vm-cirros", str(out))
    assert r.returncode == 0, r.stderr
    image = Image.open(out)
    assert image.format == "PNG" and image.width >= 640
    # text on the VGA console (console=tty0), not one flat colour
    low, high = image.convert("L").getextrema()
    assert isinstance(low, int) and isinstance(high, int) and high > low


def test_live_migration_keeps_the_guest_running_and_the_console_follows(
    cluster: Cluster,
) -> None:
    """One console session through the api, open across the live migration: it reads the
    guest's counter on, from the target, and what is typed afterwards reaches the guest."""
    source = cluster.vmi("vm-cirros")["status"]["nodeName"]
    source_qemus = cluster.qemus(source)
    assert len(source_qemus) == 1
    with cluster.console_ws("vm-cirros") as ws:
        ws.send(
            b"\r(i=0; while true; do i=$((i+1)); "
            b"echo \"count $i up $(cut -d' ' -f1 /proc/uptime)\"; sleep 1; done) &\r"
        )
        before = [(int(n), float(u)) for n, u in COUNT.findall(read_for(ws, 4))]
        assert before, "the counter runs"
        assert cluster.http.put(f"{SUB_VM}/vm-cirros/migrate", json={}).is_success

        def migrated() -> str | None:
            status = cluster.vmi("vm-cirros")["status"]
            state = status.get("migrationState") or {}
            done = state.get("completed") and status.get("nodeName") != source
            return str(status["nodeName"]) if done else None

        seen = read_for(ws, 0.5)
        target = None
        deadline = time.monotonic() + BOOT_TIMEOUT
        while target is None:
            assert time.monotonic() < deadline, "the migration did not complete"
            seen += read_for(ws, 1)  # the same session, reading on
            target = migrated()
        until(lambda: not cluster.qemus(source), timeout=30, what="the source's QEMU gone")
        assert len(cluster.qemus(target)) == 1
        seen += read_for(ws, 5)  # the counter, now from the target's QEMU
        counts = [(int(n), float(u)) for n, u in COUNT.findall(seen)]
        last_n, last_up = before[-1]
        assert counts and counts[-1][0] > last_n + 2, seen[-500:]
        assert counts[-1][1] > last_up, "uptime went on: no restart"
        assert [n for n, _ in counts] == sorted(n for n, _ in counts)
        marker = f"{random.randrange(10**6):06d}"
        ws.send(f"\recho moved-$((6*7))-{marker}\r".encode())
        answer = ""
        end = time.monotonic() + 30
        while f"moved-42-{marker}" not in answer:
            assert time.monotonic() < end, f"no answer from the target: {answer[-500:]}"
            answer += read_for(ws, 1)
