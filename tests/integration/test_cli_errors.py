"""Every failure a user can cause without a cluster, or with none running, ends in one line
on stderr naming what went wrong and what to do, a non-zero exit, within seconds, and no
traceback (unless --debug asks for it). The real `virtstream` command for the entry point's
own handling; typer's CliRunner for the rest."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner, Result

from cli.main import app
from eventstore.jetstream import JetStreamStore
from ops.nats_server import NatsServer, free_port

REPO = Path(__file__).resolve().parents[2]
CIRROS = str(REPO / "examples" / "kubevirt" / "vm-cirros.yaml")


def one_line(code: int, stdout: str, stderr: str, *wanted: str) -> str:
    assert code != 0, (stdout, stderr)
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1, stderr
    for text in wanted:
        assert text in lines[0], lines[0]
    assert "Traceback" not in stdout + stderr
    return lines[0]


def invoke(*args: str, stdin: str | None = None) -> Result:
    return CliRunner().invoke(app, list(args), input=stdin)


def fails(r: Result, *wanted: str) -> str:
    assert r.exception is None or isinstance(r.exception, SystemExit), repr(r.exception)
    return one_line(r.exit_code, r.stdout, r.stderr, *wanted)


def real(*args: str, timeout: float = 30) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "cli.main", *args],
        cwd=REPO, capture_output=True, text=True, timeout=timeout,
    )  # fmt: skip


@pytest.fixture
def nowhere() -> str:
    """A port nothing listens on."""
    return f"127.0.0.1:{free_port()}"


def test_manifest_files(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("kind: VirtualMachine\nmetadata:\n  name: x\n spec: [\n")
    p = real("apply", "-f", str(bad))  # the command itself: no traceback from the entry point
    line = one_line(p.returncode, p.stdout, p.stderr, f"error parsing {bad}", "(line 4, column 2)")
    assert line.startswith("error: ")
    fails(invoke("apply", "-f", str(tmp_path / "nosuch.yaml")), "does not exist", "nosuch.yaml")
    empty = tmp_path / "empty.yaml"
    empty.write_text("---\n")
    fails(invoke("apply", "-f", str(empty)), "no objects passed to apply")
    fails(invoke("create", "-f", str(empty)), "no objects passed to create")
    fails(invoke("apply", "-f", "-", stdin=""), "no objects passed to apply")
    nokind = tmp_path / "nokind.yaml"
    nokind.write_text("apiVersion: kubevirt.io/v1\nmetadata:\n  name: x\n")
    fails(invoke("apply", "-f", str(nokind)), f'error validating "{nokind}": kind not set')
    scalar = tmp_path / "scalar.yaml"
    scalar.write_text("just text\n")
    fails(invoke("apply", "-f", str(scalar)), f"error parsing {scalar}", "must be a mapping")
    fails(invoke("apply", "-f", CIRROS, "--validate", "loose"), "--validate must be strict")


def test_no_api(nowhere: str) -> None:
    server = f"http://{nowhere}"
    for args in (["get", "vms"], ["apply", "-f", CIRROS], ["start", "vm-cirros"]):
        started = time.monotonic()
        fails(invoke("--server", server, *args), f"The connection to the server {server}")
        assert time.monotonic() - started < 5


def test_no_nats(nowhere: str) -> None:
    """why and verify (and the other debug commands) with no cluster: one line, quickly."""
    nats = f"nats://{nowhere}"
    for args in (["why", "vm/default/vm-cirros"], ["verify"]):
        started = time.monotonic()
        p = real(*args, "--nats-url", nats)
        one_line(p.returncode, p.stdout, p.stderr, f"cannot connect to NATS at {nats}")
        assert time.monotonic() - started < 10


def test_references_and_points_without_a_cluster(nowhere: str) -> None:
    """Malformed input is refused before anything is contacted."""
    nats = ["--nats-url", f"nats://{nowhere}"]
    for args in (["why", "vm-cirros"], ["replay", "vm-cirros"], ["events", "-a", "vm-cirros"]):
        fails(invoke(*args, *nats), "'vm-cirros' names no kind", "vm/vm-cirros")
    fails(invoke("why", "pod/x", *nats), "unknown kind 'pod'", "vms, vmis")
    fails(invoke("why", "node/a/b", *nats), "expected node/NAME")
    fails(invoke("at", "5m", "pods", *nats), "unknown kind 'pods'")
    fails(invoke("at", "soon", "vms", *nats), "'soon': expected a sequence number")
    fails(invoke("replay", "vm/x", "--until", "later", *nats), "'later': expected")
    server = ["--server", f"http://{nowhere}"]
    fails(invoke(*server, "start", "vmi", "x"), "start acts on vm")
    fails(invoke(*server, "drain", "vm/x"), "drain acts on node")
    fails(invoke(*server, "delete", "vm"), "delete needs KIND NAME")


def test_unexpected_failures_are_one_line_unless_debug(
    nats_server: NatsServer, store: JetStreamStore
) -> None:
    """A failure no command expects (here NATS refusing a bucket name) is one line; --debug
    shows its traceback."""
    args = ["checkpoint", "--bucket", "no spaces allowed", "--nats-url", nats_server.url,
            "--stream", store.stream]  # fmt: skip
    p = real(*args)
    one_line(p.returncode, p.stdout, p.stderr, "InvalidBucketNameError", "--debug shows")
    p = real("--debug", *args)
    assert p.returncode != 0 and "Traceback" in p.stderr


def test_snapshot_is_the_checkpoint_commands_old_name_and_says_so(
    nats_server: NatsServer, store: JetStreamStore
) -> None:
    args = ["--nats-url", nats_server.url, "--stream", store.stream, "--name", "cli-alias"]
    new = real("checkpoint", *args)
    assert new.returncode == 0 and new.stderr == "", new.stderr
    assert new.stdout.startswith("checkpoint cli-alias: sequence "), new.stdout
    old = real("snapshot", *args)
    assert old.returncode == 0, old.stderr
    assert old.stderr == 'Command "snapshot" is deprecated, use "checkpoint" instead\n'
    assert old.stdout.startswith("checkpoint cli-alias: sequence "), old.stdout


def test_a_role_without_nats_or_with_its_port_taken(nowhere: str, nats_server: NatsServer) -> None:
    """A control-plane role run as `up` runs it (`python -m services.controller`): NATS
    unreachable, or its metrics port taken, ends its log with one line and exit 1, not a
    traceback (the lines before it are the service's JSON log)."""

    def role(*args: str) -> str:
        p = subprocess.run(
            [sys.executable, "-m", "services.controller", *args],
            cwd=REPO, capture_output=True, text=True, timeout=30,
        )  # fmt: skip
        assert p.returncode == 1, (p.stdout, p.stderr)
        assert "Traceback" not in p.stdout + p.stderr
        return p.stderr.strip().splitlines()[-1]

    started = time.monotonic()
    last = role("--nats-url", f"nats://{nowhere}")
    assert last.startswith("virt-controller: error: no NATS server answered"), last
    assert "is NATS running?" in last
    assert time.monotonic() - started < 15
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        last = role("--nats-url", nats_server.url, "--metrics-port", str(port))
    assert last.startswith(f"virt-controller: error: cannot serve /metrics on 127.0.0.1:{port}")
    assert "in use" in last, last
