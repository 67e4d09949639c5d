"""Hostile input against a real `virtstream up`: requests that once crash-looped the
controller are refused, poison inside a VM's own subject leaves it operable, and no
service is restarted meanwhile."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import nats
import pytest

from cli.up import live_launchers
from ops.nats_server import free_port
from ops.supervisor import interrupt
from tests.integration.polling import until, up_client

REPO = Path(__file__).resolve().parents[2]
API = "/apis/kubevirt.io/v1/namespaces"
SUB = "/apis/subresources.kubevirt.io/v1/namespaces/default/virtualmachines"


def vm(name: str, namespace: str = "default") -> dict[str, Any]:
    return {
        "apiVersion": "kubevirt.io/v1", "kind": "VirtualMachine",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"runStrategy": "Manual", "template": {"spec": {
            "domain": {"memory": {"guest": "64Mi"}, "devices": {}},
            "terminationGracePeriodSeconds": 0}}},
    }  # fmt: skip


@pytest.fixture
def up() -> Iterator[tuple[httpx.Client, str, subprocess.Popen[bytes]]]:
    with tempfile.TemporaryDirectory(prefix="vs-hostile-") as d:
        port, nats_port = free_port(), free_port()
        proc = subprocess.Popen(
            [sys.executable, "-m", "cli.main", "up", "--data-dir", d, "--port", str(port),
             "--nats-port", str(nats_port), "--nodes", "1"],
            cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            env={**os.environ, "COLUMNS": "200"},
        )  # fmt: skip
        try:
            with up_client(port, timeout=5) as http:
                until(lambda: http.get("/readyz").is_success, what="the api ready")
                # poison comes from a user allowed to append anything (`up` keeps its
                # password in the data dir)
                password = (Path(d) / "credentials" / "nats-admin").read_text().strip()
                yield http, f"nats://admin:{password}@127.0.0.1:{nats_port}", proc
        finally:
            interrupt(proc, 60)
            for pid in live_launchers(Path(d) / "run"):
                os.kill(pid, signal.SIGKILL)


async def publish_poison(url: str, subject: str, data: bytes) -> None:
    nc = await nats.connect(url)
    try:
        await nc.jetstream().publish(subject, data, stream="VIRT")
    finally:
        await nc.close()


def test_hostile_requests_are_refused_and_nothing_restarts(
    up: tuple[httpx.Client, str, subprocess.Popen[bytes]],
) -> None:
    http, nats_url, proc = up
    # once a 201 that crash-looped the controller (`>` in a subject)
    for ns in ("%3E", "%2A", "a~b", "UPPER", "a.b", "a%20b"):
        r = http.post(f"{API}/{ns}/virtualmachines", json=vm("x", "default"))
        assert 400 <= r.status_code < 500, (ns, r.status_code, r.text)
    for name in ("a b", "a\tb", "*", ">", "a~b", "UPPER", "x" * 64):
        r = http.post(f"{API}/default/virtualmachines", json=vm(name))
        assert r.status_code == 422, (name, r.status_code, r.text)
    for body in ({"metadata": 5}, [1, 2], "nonsense"):
        r = http.post(f"{API}/default/virtualmachines", json=body)
        assert 400 <= r.status_code < 500, (body, r.status_code)

    # poison inside a VM's own subject: undecodable, and decodable with a wrong field type
    assert http.post(f"{API}/default/virtualmachines", json=vm("victim")).status_code == 201
    asyncio.run(publish_poison(nats_url, "virt.vm.default.victim.VMStartRequested._", b"{not json"))
    forged = b'{"type": "VMStartRequested", "meta": 5, "paused": "yes"}'
    asyncio.run(publish_poison(nats_url, "virt.vm.default.victim.VMStartRequested._", forged))

    # the VM stays operable and the cluster keeps working
    assert http.put(f"{SUB}/victim/start", json={}).status_code == 202
    vmis = f"{API}/default/virtualmachineinstances"

    def phase() -> str:
        r = http.get(f"{vmis}/victim")
        return str(r.json()["status"].get("phase", "")) if r.status_code == 200 else ""

    until(lambda: phase() == "Running", timeout=30, what="the poisoned VM running")
    assert http.put(f"{SUB}/victim/stop", json={}).status_code == 202
    until(lambda: http.get(f"{vmis}/victim").status_code == 404, what="the VMI gone")
    assert http.delete(f"{API}/default/virtualmachines/victim").is_success
    assert proc.poll() is None
    assert proc.stdout is not None
    os.set_blocking(proc.stdout.fileno(), False)
    said = (proc.stdout.read() or b"").decode()
    assert "restarting" not in said and "exited" not in said, said
