"""A newcomer's first hour against one real `virtstream up --nodes 2` (shared by the
module): time travel before the first event, between events and after the last, by
sequence and by time, in the CLI (`get --at`, `at`) and the api (`?at=`); `apply` that
changes nothing; unknown fields; `get -w` rows; one verb vocabulary; one-line errors from
the debug commands; the README's commands as written; drain's report; a folder of examples.

The CLI runs in-process through typer's CliRunner (the README's lines in a real shell);
every check is on the exit code, the message and the absence of a traceback."""

from __future__ import annotations

import datetime as dt
import itertools
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from typer.testing import CliRunner, Result

from cli.main import app
from ops.nats_server import free_port
from ops.supervisor import importable
from tests.integration.polling import status_of, until
from tests.integration.up_process import running_up

REPO = Path(__file__).resolve().parents[2]
VMS = "/apis/kubevirt.io/v1/namespaces/default/virtualmachines"
VMIS = "/apis/kubevirt.io/v1/namespaces/default/virtualmachineinstances"
SUB = "/apis/subresources.kubevirt.io/v1/namespaces/default/virtualmachines"

pytestmark = pytest.mark.skipif(
    not (importable("services.api") and importable("services.handler")),
    reason="api, controller and handlers are needed",
)


@dataclass
class Cluster:
    url: str
    nats: str
    http: httpx.Client
    data_dir: Path
    started_at: float


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    started_at = time.time()
    with running_up("vs-first-", 2) as up:
        # the CLI as a user gives it: the plain URL, upgraded by the credentials it finds
        url = f"http://127.0.0.1:{up.port}"
        yield Cluster(url, up.nats_url, up.http, up.data_dir, started_at)


def cli(c: Cluster, *args: str, stdin: str | None = None) -> Result:
    return CliRunner().invoke(
        app, ["--server", c.url, *args], input=stdin, env={"VIRTSTREAM_NATS": c.nats}
    )


def ok(r: Result) -> str:
    assert r.exit_code == 0, (r.stdout, r.stderr, r.exception)
    assert "Traceback" not in r.output
    return r.stdout


def fails(r: Result, *wanted: str) -> str:
    """A non-zero exit with one line on stderr holding `wanted`, and no traceback."""
    assert r.exit_code != 0, r.output
    assert r.exception is None or isinstance(r.exception, SystemExit), repr(r.exception)
    lines = [line for line in r.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, r.stderr
    for text in wanted:
        assert text in lines[0], lines[0]
    assert "Traceback" not in r.output
    return lines[0]


def vm_manifest(name: str, strategy: str = "Halted", **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachine",
        "metadata": {"name": name},
        "spec": {
            "runStrategy": strategy,
            "template": {"spec": {
                "domain": {"memory": {"guest": "64Mi"}, "devices": {}},
                "terminationGracePeriodSeconds": 0,
            }},
            **spec,
        },
    }  # fmt: skip


def running(c: Cluster, name: str) -> dict[str, Any]:
    def probe() -> Any:
        r = c.http.get(f"{VMIS}/{name}")
        return r.is_success and r.json()["status"].get("phase") == "Running" and r.json()

    found: dict[str, Any] = until(probe, 60, f"{name} Running")
    return found


def settled_pause(c: Cluster, name: str, paused: bool) -> None:
    """Until the VMI's Paused condition says `paused` (an unpause is accepted before the
    launcher has resumed; a pause sent meanwhile is refused as already paused)."""

    def probe() -> bool:
        conditions = c.http.get(f"{VMIS}/{name}").json()["status"].get("conditions", [])
        now = any(x["type"] == "Paused" and x["status"] == "True" for x in conditions)
        return now is paused

    until(probe, 30, f"{name} {'paused' if paused else 'unpaused'}")


def iso(ts: float) -> str:
    return dt.datetime.fromtimestamp(ts, dt.UTC).isoformat()


def iso_second(ts: float) -> str:
    return dt.datetime.fromtimestamp(int(ts), dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def age_at(c: Cluster, name: str, point: str) -> str:
    header, row = ok(cli(c, "get", "vms", name, "--at", point)).splitlines()
    assert header.split()[:2] == ["NAME", "AGE"]
    return row.split()[1]


# ----------------------------------------------------------------- time travel
def test_time_travel_before_between_and_after(cluster: Cluster) -> None:
    c = cluster
    before = time.time()
    time.sleep(0.05)
    posted = c.http.post(VMS, json=vm_manifest("tt"))
    assert posted.status_code == 201, posted.text
    created = int(posted.json()["metadata"]["resourceVersion"])
    time.sleep(0.05)
    between = time.time()
    time.sleep(0.05)
    assert c.http.put(f"{SUB}/tt/start", json={}).is_success
    running(c, "tt")
    until(lambda: status_of(c.http, f"{VMS}/tt")["printableStatus"] == "Running")
    future = time.time() + 3600
    long_ago = f"@{c.started_at - 3600}"

    def status(r: Result) -> str:
        return str(json.loads(ok(r))["status"]["printableStatus"])

    # CLI `get --at` (through the api): before the first event nothing existed, by seq or time
    for point in ("0", "1h", long_ago, iso(c.started_at - 60)):
        fails(cli(c, "get", "vms", "tt", "--at", point), "(NotFound)", '"tt" not found')
        listed = cli(c, "get", "vms", "--at", point)
        assert listed.exit_code == 0 and "No resources found" in listed.stderr
        assert listed.stdout == ""
    # before its creation: it did not exist then, and since when it does
    line = fails(cli(c, "get", "vms", "tt", "--at", f"@{before}"), "(NotFound)")
    created_at = c.http.get(f"{VMS}/tt").json()["metadata"]["creationTimestamp"]
    assert line.endswith(
        f"at {iso_second(before)}: it did not exist then, it was created at {created_at}"
    )
    # a table's AGE is the object's age at that point, not today's
    assert age_at(c, "tt", f"@{future}") == "60m"
    assert age_at(c, "tt", str(created)) in ("0s", "1s")
    then = float(c.http.get(f"{VMS}/tt", params={"at": str(created)}).headers["virtstream-at-time"])
    assert before <= then <= between  # a sequence's time is its event's
    listed_at = ok(cli(c, "get", "vms", "--at", f"@{future}")).splitlines()
    assert [row.split()[1] for row in listed_at[1:] if row.split()[0] == "tt"] == ["60m"]
    # between: as created (Halted, Stopped)
    for point in (str(created), f"@{between}", iso(between)):
        assert status(cli(c, "get", "vms", "tt", "--at", point, "-o", "json")) == "Stopped"
    # after the last event: the present
    for point in ("99999999", f"@{future}", iso(future)):
        assert status(cli(c, "get", "vms", "tt", "--at", point, "-o", "json")) == "Running"

    # `at` (from the log itself)
    for point in ("0", "1h", long_ago):
        fails(cli(c, "at", point, "vms", "tt"), "did not exist")
        out = ok(cli(c, "at", point, "vms", "-o", "json"))
        assert json.loads(out)["items"] == []
    for point in (str(created), f"@{between}"):
        assert status(cli(c, "at", point, "vms", "tt", "-o", "json")) == "Stopped"
    for point in ("99999999", f"@{future}"):
        assert status(cli(c, "at", point, "vms", "tt", "-o", "json")) == "Running"

    # the api's ?at=
    for point in ("0", long_ago):
        body = c.http.get(VMS, params={"at": point}).json()
        assert body["items"] == [] and body["metadata"]["resourceVersion"] == "0"
        assert c.http.get(f"{VMS}/tt", params={"at": point}).status_code == 404
    body = c.http.get(VMS, params={"at": f"@{before}"}).json()
    assert "tt" not in [o["metadata"]["name"] for o in body["items"]]
    for point in (str(created), f"@{between}"):
        got = c.http.get(f"{VMS}/tt", params={"at": point}).json()
        assert got["status"]["printableStatus"] == "Stopped"
    for point in ("99999999", f"@{future}"):
        got = c.http.get(f"{VMS}/tt", params={"at": point}).json()
        assert got["status"]["printableStatus"] == "Running"
    assert c.http.get(VMS, params={"at": "99999999"}).json()["metadata"]["resourceVersion"] != "0"


# ------------------------------------------------------------ apply and fields
def test_apply_unchanged_appends_nothing(cluster: Cluster, tmp_path: Path) -> None:
    c = cluster
    f = tmp_path / "same.yaml"
    f.write_text(yaml.safe_dump(vm_manifest("same")))
    assert "virtualmachine.kubevirt.io/same created" in ok(cli(c, "apply", "-f", str(f)))
    first = c.http.get(f"{VMS}/same").json()["metadata"]
    events = ok(cli(c, "events", "--aggregate", "vm/default/same", "-o", "json"))
    assert "virtualmachine.kubevirt.io/same unchanged" in ok(cli(c, "apply", "-f", str(f)))
    again = c.http.get(f"{VMS}/same").json()["metadata"]
    assert again["resourceVersion"] == first["resourceVersion"]
    assert again["generation"] == first["generation"] == 1
    assert ok(cli(c, "events", "--aggregate", "vm/same", "-o", "json")) == events
    # a change is `configured` and a new generation
    f.write_text(yaml.safe_dump(vm_manifest("same", "Manual")))
    assert "virtualmachine.kubevirt.io/same configured" in ok(cli(c, "apply", "-f", str(f)))
    assert c.http.get(f"{VMS}/same").json()["metadata"]["generation"] == 2


def test_unknown_fields_warn_strict_and_ignore(cluster: Cluster, tmp_path: Path) -> None:
    c = cluster
    f = tmp_path / "frob.yaml"
    f.write_text(yaml.safe_dump(vm_manifest("frob", frobnicate=True)))
    # Strict: refused with the API server's message, nothing created
    line = fails(cli(c, "apply", "-f", str(f), "--validate", "strict"), "(BadRequest)")
    assert line.endswith(
        'VirtualMachine in version "v1" cannot be handled as a VirtualMachine: '
        'strict decoding error: unknown field "spec.frobnicate"'
    )
    assert c.http.get(f"{VMS}/frob").status_code == 404
    # Warn (the default): created, kept, and the CLI says so
    r = cli(c, "apply", "-f", str(f))
    assert "virtualmachine.kubevirt.io/frob created" in ok(r)
    assert r.stderr.strip() == 'Warning: unknown field "spec.frobnicate"'
    assert c.http.get(f"{VMS}/frob").json()["spec"]["frobnicate"] is True
    # the api's header, as Kubernetes writes it
    doc = {**vm_manifest("frob2", frobnicate=True)}
    doc["spec"]["template"]["spec"]["domain"]["devices"]["frob"] = 1
    resp = c.http.post(VMS, json=doc)
    assert resp.status_code == 201
    assert resp.headers["warning"] == (  # in the document's order
        '299 - "unknown field \\"spec.template.spec.domain.devices.frob\\"", '
        '299 - "unknown field \\"spec.frobnicate\\""'
    )
    strict = c.http.post(VMS, json=vm_manifest("frob3", x=1), params={"fieldValidation": "Strict"})
    assert strict.status_code == 400 and strict.json()["reason"] == "BadRequest"
    # Ignore: kept without a word
    f.write_text(yaml.safe_dump(vm_manifest("frob", "Manual", frobnicate=True)))
    r = cli(c, "apply", "-f", str(f), "--validate", "ignore")
    assert "frob configured" in ok(r) and r.stderr == ""
    assert c.http.get(f"{VMS}/frob").json()["spec"]["frobnicate"] is True


# ------------------------------------------------------------------- watch
def _columns(line: str) -> list[int]:
    return [m.start() for m in re.finditer(r"(?:^|(?<=\s{2}))\S", line)]


def test_get_watch_rows_like_kubectl(cluster: Cluster) -> None:
    c = cluster
    assert c.http.post(VMS, json=vm_manifest("w1")).status_code == 201
    assert c.http.post(VMS, json=vm_manifest("w2")).status_code == 201
    watch = subprocess.Popen(
        [sys.executable, "-m", "cli.main", "--server", c.url, "get", "vms", "-w"],
        cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    printed: list[str] = []
    reader = threading.Thread(target=lambda: printed.extend(watch.stdout or ()), daemon=True)
    reader.start()

    def row_of(name: str, status: str) -> bool:
        return any(line.split()[:1] == [name] and status in line.split() for line in printed)

    try:  # the list is printed once the watch is open (however long the CLI takes to start)
        until(lambda: row_of("w2", "Stopped"), 60, "the watch's list")
        assert c.http.put(f"{SUB}/w1/start", json={}).is_success
        running(c, "w1")
        until(lambda: row_of("w1", "Running"), 30, "w1 Running in the watch")
    finally:
        watch.send_signal(signal.SIGINT)
        watch.wait(timeout=10)
        reader.join(timeout=10)
    err = watch.stderr.read() if watch.stderr else ""
    lines = [line.rstrip("\n") for line in printed if line.strip()]
    header, rows = lines[0], lines[1:]
    assert header.split() == ["NAME", "AGE", "STATUS", "READY"]
    names = [row.split()[0] for row in rows]
    listed = len([o for o in c.http.get(VMS).json()["items"]])
    assert len(set(names[:listed])) == listed  # the list once, no row twice at the start
    w1 = [row.split()[2] for row in rows if row.split()[0] == "w1"]
    assert w1[0] == "Stopped" and w1[-1] == "Running" and "Starting" in w1
    assert all(a != b for a, b in itertools.pairwise(w1))  # no row repeats
    for row in rows:  # every row in the header's columns
        assert _columns(row) == _columns(header), (header, row)
    assert "Traceback" not in err


# -------------------------------------------------------------- vocabulary
def test_one_verb_and_kind_vocabulary(cluster: Cluster) -> None:
    c = cluster
    assert c.http.post(VMS, json=vm_manifest("voc", "Always")).status_code == 201
    running(c, "voc")
    # pause/unpause take NAME, KIND NAME or KIND/NAME, like start
    assert "VMI voc was scheduled to pause" in ok(cli(c, "pause", "voc"))
    settled_pause(c, "voc", True)
    assert "VM voc was scheduled to unpause" in ok(cli(c, "unpause", "vm", "voc"))
    settled_pause(c, "voc", False)
    assert "VMI voc was scheduled to pause" in ok(cli(c, "pause", "vmi/voc"))
    settled_pause(c, "voc", True)
    assert "VMI voc was scheduled to unpause" in ok(
        cli(c, "unpause", "virtualmachineinstance", "voc")
    )
    fails(cli(c, "pause", "node", "voc"), "pause acts on vmi or vm")
    fails(cli(c, "start", "vmi", "voc"), "start acts on vm")
    # `at` and `get` take the same kind names (the registry's)
    for name in ("vmims", "vmim", "virtualmachineinstancemigrations", "migrationpolicies"):
        ok(cli(c, "get", name))
        ok(cli(c, "at", "99999999", name))
    fails(cli(c, "at", "1", "deployments"), "unknown kind 'deployments'", "vms, vmis, vmims")
    fails(cli(c, "get", "deployments"), 'the server doesn\'t have a resource type "deployments"')
    # a node is node/NAME in every output
    out = ok(cli(c, "why", "node/node-1"))
    assert out.startswith("why node/node-1 ") and "node/_/" not in out
    assert ok(cli(c, "replay", "node/node-1")).startswith("node/node-1:")
    # node memory as kubectl prints quantities
    nodes = ok(cli(c, "get", "nodes"))
    memory = nodes.splitlines()[1].split()[4]
    assert re.fullmatch(r"\d+(Mi|Gi)?/\d+(Mi|Gi)", memory), memory
    # verify reads the api of the global --server
    assert ok(cli(c, "verify")).startswith("OK: ")
    bad = CliRunner().invoke(
        app, ["--server", f"http://127.0.0.1:{free_port()}", "verify"],
        env={"VIRTSTREAM_NATS": c.nats},
    )  # fmt: skip
    fails(bad, "cannot read the live views from http://127.0.0.1:")


def test_help_has_no_type_noise() -> None:
    for command in ("stop", "delete", "up", "pause", "get"):
        r = CliRunner().invoke(app, [command, "--help"], terminal_width=80)
        assert r.exit_code == 0
        assert "<bool>" not in r.stdout and "<str>" not in r.stdout and "<int" not in r.stdout
    stop = CliRunner().invoke(app, ["stop", "--help"]).stdout
    assert re.search(r"--grace-period SECONDS\s+Seconds the guest gets", stop), stop


# ------------------------------------------------------------ debug errors
def test_debug_commands_fail_in_one_line(cluster: Cluster) -> None:
    c = cluster
    assert c.http.post(VMS, json=vm_manifest("dbg")).status_code == 201
    for args in (["why", "dbg"], ["replay", "dbg"], ["events", "--aggregate", "dbg"]):
        fails(cli(c, *args), "'dbg' names no kind", "vm/dbg")
    # the VM's name with its kind is enough (the default namespace)
    assert "why vm/default/dbg" in ok(cli(c, "why", "vm/dbg"))
    assert ok(cli(c, "replay", "vm/dbg")).startswith("vm/default/dbg:")
    fails(cli(c, "replay", "vm/default/nosuch"), "vm/default/nosuch: no events")
    fails(cli(c, "why", "vm/default/nosuch"), "vm/default/nosuch: no events")
    fails(cli(c, "replay", "vm/dbg", "--until", "yesterday"), "'yesterday': expected")
    fails(cli(c, "at", "soon", "vms"), "'soon': expected a sequence number")
    fails(cli(c, "events", "--since", "x1"), "'x1': expected")


def test_no_task_noise_after_early_exits(cluster: Cluster) -> None:
    """The real command, so that asyncio's shutdown warnings would show on its stderr."""
    c = cluster
    env = {**os.environ, "VIRTSTREAM_NATS": c.nats, "VIRTSTREAM_SERVER": c.url}
    just_now = f"@{time.time() - 0.5}"
    for args in (["events", "--limit", "2"], ["replay", "node/node-1", "--until", just_now],
                 ["at", "5m", "vms"], ["at", "2", "nodes"]):  # fmt: skip
        p = subprocess.run(
            [sys.executable, "-m", "cli.main", *args], cwd=REPO, env=env,
            capture_output=True, text=True, timeout=30,
        )  # fmt: skip
        assert p.returncode == 0, p.stderr
        assert p.stderr == "", p.stderr


# ------------------------------------------------------------------ README
README = (REPO / "README.md").read_text()


def _readme_block(after: str, lang: str = "sh") -> list[str]:
    """The lines of the first `lang` code block after the text `after` in the README."""
    block = README[README.index(after) :]
    block = block[block.index(f"```{lang}\n") + len(lang) + 4 :]
    return block[: block.index("```")].splitlines()


def test_readme_commands_run_as_written(cluster: Cluster) -> None:
    """The README's "Using it" and debugging lines in a shell with the CLI on PATH (as the
    set-up says), then its Python snippet."""
    c = cluster
    env = {
        **os.environ,
        "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}",
        "VIRTSTREAM_SERVER": c.url,
        "VIRTSTREAM_NATS": c.nats,
    }
    if c.http.get(f"{VMS}/vm-cirros").is_success:  # another test's apply: a README start
        c.http.delete(f"{VMS}/vm-cirros")
        until(lambda: c.http.get(f"{VMS}/vm-cirros").status_code == 404)
    c.http.post(VMS, json=yaml.safe_load((REPO / "examples/kubevirt/vm-cirros.yaml").read_text()))
    lines = _readme_block("## Using it") + _readme_block("Debugging from the event log")
    ran = 0
    # an optional flag in brackets runs both ways: `dead-letters [--retry]`
    commands = []
    for raw in lines:
        line = raw.split("  #")[0].strip()
        if optional := re.search(r" \[(--[a-z-]+)\]", line):
            commands += [
                line.replace(optional[0], ""),
                line.replace(optional[0], f" {optional[1]}"),
            ]
        else:
            commands.append(line)
    for line in commands:
        if not line.startswith("virtstream ") or "[" in line:
            continue
        watch = " -w" in line
        p = subprocess.run(
            ["bash", "-c", f"timeout 3 {line}" if watch else line], cwd=REPO, env=env,
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        if "--at" in line and p.returncode == 1:  # a point before the VM existed
            assert "(NotFound)" in p.stderr, (line, p.stderr)
        else:
            assert p.returncode == (124 if watch else 0), (line, p.stdout, p.stderr)
        assert "Traceback" not in p.stderr, line
        ran += 1
        if line.startswith("virtstream start"):
            running(c, "vm-cirros")
        if line.startswith("virtstream stop"):
            until(lambda: c.http.get(f"{VMIS}/vm-cirros").status_code == 404, 60)
    assert ran >= 16
    # what it says below the block: applying the manifest again after `start` stops the VM
    assert "Applying the manifest again after `start` stops the VM (`configured`)" in README
    ok(cli(c, "start", "vm-cirros"))
    running(c, "vm-cirros")
    apply_line = lines[0].split("  #")[0].strip()
    assert apply_line == "virtstream apply -f examples/kubevirt/vm-cirros.yaml"
    p = subprocess.run(
        ["bash", "-c", apply_line], cwd=REPO, env=env, capture_output=True, text=True
    )
    assert p.stdout.strip() == "virtualmachine.kubevirt.io/vm-cirros configured", p.stdout
    until(lambda: c.http.get(f"{VMIS}/vm-cirros").status_code == 404, 60, "vm-cirros stopped")
    assert c.http.get(f"{VMS}/vm-cirros").json()["spec"]["runStrategy"] == "Halted"

    # /openapi.json with the token, as printed (the demo's data dir and port are this test's)
    (curl,) = _readme_block("needs the token too")
    base = str(c.http.base_url).rstrip("/")
    curl = curl.replace(".virtstream-demo", str(c.data_dir)).replace("https://127.0.0.1:8080", base)
    p = subprocess.run(["bash", "-c", curl], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0 and '"openapi":"3.' in p.stdout, (p.stdout, p.stderr)
    bare = subprocess.run(
        ["curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", "--cacert",
         str(c.data_dir / "pki" / "ca.crt"), f"{base}/openapi.json"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert bare.stdout == "401"  # without the token: what the README says

    # the Python example, in the checkout as it says; again: unchanged, and already running
    snippet = "\n".join(_readme_block("From Python, in the checkout", "python")).replace(
        "https://127.0.0.1:8080", c.url
    )
    for again in (False, True):
        p = subprocess.run(
            [sys.executable, "-c", snippet], cwd=REPO, capture_output=True, text=True, timeout=60
        )
        assert p.returncode == 0 and "Traceback" not in p.stderr, p.stderr
        assert re.search(r"(ADDED|MODIFIED) vm-python (Starting|Running)", p.stdout), p.stdout
        assert ("VM is already running" in p.stdout) is again, p.stdout
        assert "vm-cirros" not in p.stdout  # its watch is of its own VM
        if not again:
            running(c, "vm-python")
    assert c.http.get(f"{VMS}/vm-python").json()["metadata"]["generation"] == 1


# ----------------------------------------------------- drain, then examples
def test_drain_says_what_became_of_each_vmi(cluster: Cluster) -> None:
    c = cluster
    vmi = {
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachineInstance",
        "metadata": {"name": "lone"},
        "spec": {"domain": {"memory": {"guest": "64Mi"}, "devices": {}},
                 "terminationGracePeriodSeconds": 0},
    }  # fmt: skip
    assert c.http.post(VMIS, json=vmi).status_code == 201
    node = running(c, "lone")["status"]["nodeName"]
    try:
        out = ok(cli(c, "drain", node, "--timeout", "60"))
    finally:
        ok(cli(c, "uncordon", f"node/{node}"))
    assert "default/lone: deleted (evictionStrategy None" in out
    assert "gone from" not in out
    assert out.rstrip().endswith(f"node/{node} drained")


def test_apply_the_examples_folder(cluster: Cluster) -> None:
    c = cluster
    out = ok(cli(c, "apply", "-f", str(REPO / "examples" / "kubevirt")))
    lines = out.splitlines()
    # the migration goes after the VMI it moves, once that one runs
    assert lines[-1] == "virtualmachineinstancemigration.kubevirt.io/migration-job created"
    assert "virtualmachineinstance.kubevirt.io/vmi-migratable created" in lines
    until(
        lambda: (
            c.http.get(
                "/apis/kubevirt.io/v1/namespaces/default/virtualmachineinstancemigrations/migration-job"
            )
            .json()["status"]
            .get("phase")
            == "Succeeded"
        ),
        60,
        "the example migration",
    )
