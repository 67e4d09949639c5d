"""`virtstream up --demo`: a short tour. It applies examples/kubevirt/vm-cirros.yaml and
walks the VM through its life (start, Running, pause, unpause, migrate when there are
several nodes, stop), saying at each step which command does the same and what the
services do, while a live table (watches on the VM and its VMI, as `virtstream get vms -w`)
shows each change as the api serves it. Raw KubeVirt REST calls, so it also shows what the API
speaks. In qemu mode it also waits for the guest's shell prompt on its serial console and
prints what the guest wrote there. Afterwards `using_it` prints how to carry on with the
cluster that stays up."""

from __future__ import annotations

import os
import re
import shutil
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import yaml
from rich.markup import escape

from cli import whatif_process
from cli.settings import DEFAULT_SERVER
from client import apply as client_apply
from client import credentials
from client.api import Client
from services.launcher.rundir import guest_console_log

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "kubevirt" / "vm-cirros.yaml"
NS = "default"
VMS = f"/apis/kubevirt.io/v1/namespaces/{NS}/virtualmachines"
VMIS = f"/apis/kubevirt.io/v1/namespaces/{NS}/virtualmachineinstances"
SUB = f"/apis/subresources.kubevirt.io/v1/namespaces/{NS}"
DEFAULT_NATS = "nats://127.0.0.1:4222"

Say = Callable[[str], None]


class DemoFailed(Exception):
    pass


def _wait(what: str, probe: Callable[[], bool], timeout: float, say: Say, started: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if probe():
                say(f"  [green]✓[/] {what} ({time.monotonic() - started:.2f}s)")
                return
        except (httpx.HTTPError, KeyError, ValueError):
            pass
        time.sleep(0.1)
    raise DemoFailed(f"timed out after {timeout:.0f}s waiting for: {what}")


def _get(http: httpx.Client, path: str) -> dict[str, Any] | None:
    r = http.get(path)
    if r.status_code == 404:
        return None
    r.raise_for_status()
    body: dict[str, Any] = r.json()
    return body


def _put(http: httpx.Client, path: str) -> None:
    r = http.put(path, json={})
    if not r.is_success:
        raise DemoFailed(f"PUT {path}: {r.status_code} {r.text}")


def _paused(vmi: dict[str, Any] | None) -> bool:
    conds = (vmi or {}).get("status", {}).get("conditions", []) or []
    return any(c.get("type") == "Paused" and c.get("status") == "True" for c in conds)


def _step(say: Say, command: str, what: str) -> float:
    """Narrate a step: the CLI command that does the same, then what happens."""
    say(f"[bold cyan]$ virtstream {command}[/]")
    say(f"  [dim]{what}[/]")
    return time.monotonic()


class LiveTable:
    """What the api serves, live: one row per change of the VM or its VMI (a watch on
    each kind, as `virtstream get vms -w` and `get vmis -w`), indented under the narration:
    the VM's printableStatus, the VMI's phase and node."""

    HEADER = ("NAME", "VM STATUS", "VMI PHASE", "NODE", "READY")
    WIDTHS = (12, 12, 12, 10, 5)

    def __init__(self, api_url: str, say: Say) -> None:
        self.api_url, self.say = api_url, say
        self.stopped = threading.Event()
        self.lock = threading.Lock()
        self.vm: dict[str, Any] = {}
        self.vmi: dict[str, Any] = {}
        self.last: tuple[str, ...] = ()
        self.rv = ""
        self.threads = [
            threading.Thread(target=self._follow, args=(kind,), daemon=True)
            for kind in ("vms", "vmis")
        ]

    def __enter__(self) -> LiveTable:
        # both watches start from this point of the log, so no change before they are
        # connected is missed
        with Client(self.api_url, timeout=5) as c:
            _, self.rv = c.list_with_version("vms", NS)
        self._print(self.HEADER)
        for t in self.threads:
            t.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.stopped.set()
        for t in self.threads:
            t.join(timeout=3)

    def _print(self, cells: tuple[str, ...]) -> None:
        line = "   ".join(c.ljust(w) for c, w in zip(cells, self.WIDTHS, strict=True))
        self.say(f"    [dim]{line.rstrip()}[/]")

    def _changed(self, kind: str, obj: dict[str, Any] | None) -> None:
        with self.lock:
            if kind == "vms":
                self.vm = obj or {}
            else:
                self.vmi = obj or {}
            vm, vmi = self.vm.get("status") or {}, self.vmi.get("status") or {}
            name = (self.vm.get("metadata") or self.vmi.get("metadata") or {}).get("name", "")
            row = (
                str(name),
                str(vm.get("printableStatus") or "-"),
                str(vmi.get("phase") or "-"),
                str(vmi.get("nodeName") or "-"),
                str(bool(vm.get("ready"))),
            )
            if row != self.last:
                self.last = row
                self._print(row)

    def _follow(self, kind: str) -> None:
        rv: str | None = self.rv or None
        with Client(self.api_url, timeout=5) as c:
            # short watches, resumed from the last change, so the thread can end between them
            while not self.stopped.is_set():
                try:
                    for ev, obj in c.watch(kind, NS, resource_version=rv, timeout_seconds=1):
                        if ev == "ERROR":
                            rv = None
                            break
                        rv = str(obj["metadata"].get("resourceVersion") or rv)
                        self._changed(kind, None if ev == "DELETED" else obj)
                except (httpx.HTTPError, ValueError, KeyError):
                    time.sleep(0.2)


_ESCAPES = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1bc|\r")
#: The guest's shell prompt (ops/guest/profile: "<hostname>:<dir># ").
_PROMPT = re.compile(r"^\S+:\S+# ", re.M)


def _guest_console(
    http: httpx.Client, name: str, vmi_path: str, run_dir: Path, say: Say, started: float
) -> None:
    node = (_get(http, vmi_path) or {}).get("status", {}).get("nodeName", "")
    log = guest_console_log(run_dir, node, NS, name)
    text: list[str] = []

    def prompt() -> bool:
        text[:] = [_ESCAPES.sub("", log.read_text(errors="replace")) if log.exists() else ""]
        return bool(_PROMPT.search(text[0]))

    _wait("guest booted to its shell (serial console)", prompt, 120, say, started)
    say(f"  [dim]{log}:[/]")
    for line in text[0].strip().splitlines():
        if line.strip():
            say(f"  [cyan]│[/] {escape(line)}")


def run_demo(
    api_url: str,
    nodes: int,
    say: Say = print,
    console_run_dir: Path | None = None,
    nats_url: str = "",
) -> bool:
    """console_run_dir: `up`'s run dir in qemu mode (the guests' console logs live there);
    nats_url: the log's, for the tour's last step (a what-if over it), skipped without."""
    manifest = yaml.safe_load(EXAMPLE.read_text())
    name = manifest["metadata"]["name"]
    vmi_path = f"{VMIS}/{name}"
    with httpx.Client(timeout=10.0, **credentials.httpx_options(api_url)) as http:
        try:
            t0 = time.monotonic()
            _wait("API is up", lambda: http.get(VMS).is_success, 60, say, t0)
            say(
                f"[bold]demo[/]: {EXAMPLE.name} through its life. Each step is one command; "
                "every change is an event on the stream that the next service reacts to. "
                "Indented: the VM and its VMI as the api serves them, at each change."
            )
            with LiveTable(api_url, say):
                _tour(http, manifest, name, vmi_path, nodes, say, console_run_dir)
            if nats_url:
                _whatif(nats_url, say)
            say(f"[bold green]demo passed[/] in {time.monotonic() - t0:.2f}s")
            return True
        except DemoFailed as e:
            say(f"[bold red]demo failed[/]: {e}")
            return False


def _tour(
    http: httpx.Client,
    manifest: dict[str, Any],
    name: str,
    vmi_path: str,
    nodes: int,
    say: Say,
    console_run_dir: Path | None = None,
) -> None:
    strategy = manifest["spec"].get("runStrategy", "Halted")
    t = _step(
        say,
        f"apply -f examples/kubevirt/{EXAMPLE.name}",
        f"the api appends VMCreated; runStrategy {strategy}: a VM object, no VMI yet",
    )
    # as `apply` creates it: with the last-applied annotation, so a later apply of the same
    # file finds nothing to change
    r = http.post(VMS, json=client_apply.modified(manifest, "default"))
    if r.status_code == 409:
        say(f"  {name} exists already (this data dir was used before): reusing it")
    elif not r.is_success:
        raise DemoFailed(f"create: {r.status_code} {r.text}")
    _wait(f"VirtualMachine {name}", lambda: _get(http, f"{VMS}/{name}") is not None, 10, say, t)

    vmi = _get(http, vmi_path)
    if vmi is None or (vmi.get("status") or {}).get("phase") != "Running":
        t = _step(
            say,
            f"start {name}",
            "VMStartRequested → the controller creates the VMI and schedules it on a node → "
            "that node's handler spawns a launcher, which starts the libvirt domain",
        )
        if strategy == "Halted" or manifest["spec"].get("running") is False:
            _put(http, f"{SUB}/virtualmachines/{name}/start")
        _wait(
            "VMI Running",
            lambda: (_get(http, vmi_path) or {}).get("status", {}).get("phase") == "Running",
            60, say, t,
        )  # fmt: skip
    if console_run_dir is not None:
        _guest_console(http, name, vmi_path, console_run_dir, say, t)
    t = _step(say, f"pause vm {name}", "the handler tells the launcher to suspend the domain")
    _put(http, f"{SUB}/virtualmachineinstances/{name}/pause")
    _wait("Paused", lambda: _paused(_get(http, vmi_path)), 30, say, t)
    t = _step(say, f"unpause vm {name}", "and to resume it")
    _put(http, f"{SUB}/virtualmachineinstances/{name}/unpause")
    _wait("Unpaused (Running)", lambda: not _paused(_get(http, vmi_path)), 30, say, t)
    if nodes > 1:
        _migrate(http, name, vmi_path, say)
    else:
        say("  migration skipped: one node (use --nodes 2)")
    t = _step(
        say,
        f"stop {name}",
        "runStrategy becomes Halted → the controller deletes the VMI → the launcher shuts "
        "the domain down",
    )
    _put(http, f"{SUB}/virtualmachines/{name}/stop")
    _wait("Stopped (VMI gone)", lambda: _get(http, vmi_path) is None, 60, say, t)


def _migrate(http: httpx.Client, name: str, vmi_path: str, say: Say) -> None:
    """Live-migrate the VM (test mode: a simulated transfer between two real handlers) and
    wait for its migration to succeed and the VMI to run on the target."""
    source = (_get(http, vmi_path) or {}).get("status", {}).get("nodeName")
    t = _step(
        say,
        f"migrate {name}",
        "a VirtualMachineInstanceMigration → the controller picks a target node → the two "
        "handlers move the domain",
    )
    r = http.put(f"{SUB}/virtualmachines/{name}/migrate", json={})
    if not r.is_success:
        raise DemoFailed(f"migrate: {r.status_code} {r.text[:200]}")
    failed: list[str] = []

    def moved() -> bool:
        status = (_get(http, vmi_path) or {}).get("status", {})
        state = status.get("migrationState") or {}
        if state.get("failed"):
            failed.append(str(state.get("failureReason") or "migration failed"))
            return True
        node = status.get("nodeName")
        return bool(state.get("completed") and node and node != source)

    _wait(f"migrated from {source}", moved, 60, say, t)
    if failed:
        raise DemoFailed(f"migration failed: {failed[0]}")
    status = (_get(http, vmi_path) or {}).get("status", {})
    say(f"  VMI {name} now runs on [bold]{status.get('nodeName')}[/] (phase {status.get('phase')})")


def _whatif(nats_url: str, say: Say) -> None:
    """The log so far through today's controller decider again: it must decide alike."""
    t = _step(
        say,
        "whatif",
        "the log replayed through the controller's decider in a sandbox (nothing is "
        "appended): each decision the log records is made again",
    )
    w = whatif_process.summary(nats_url, timeout=60)
    if "error" in w:
        raise DemoFailed(f"whatif: {w['error']}")
    say(
        f"  {w['events']} events decided on again: {w['reproduced']} of the "
        f"{w['recorded']} decisions recorded reproduced, {w['differences']} differ "
        f"({time.monotonic() - t:.2f}s)"
    )
    if w["differences"]:
        raise DemoFailed(
            f"whatif: {w['differences']} decisions differ from the log's (a decider bug)"
        )


def using_it(api_url: str, nats_url: str, say: Say) -> None:
    """How to carry on: the CLI on PATH, the server flags when not the defaults, and the
    README's first commands."""
    bin_dir = Path(sys.executable).parent
    on_path = shutil.which("virtstream") == str(bin_dir / "virtstream")
    env = []
    if not on_path:
        rel = os.path.relpath(bin_dir)
        env.append(f'export PATH="{"$PWD/" + rel if not rel.startswith("..") else bin_dir}:$PATH"')
    if api_url != DEFAULT_SERVER:
        env.append(f"export VIRTSTREAM_SERVER={api_url}")
    if nats_url != DEFAULT_NATS:
        env.append(f"export VIRTSTREAM_NATS={nats_url}")
    say(
        "[bold]The cluster keeps running[/] (Ctrl-C stops it). "
        "In another shell, from this directory:"
    )
    for line in [
        *env,
        "virtstream get vms",
        "virtstream start vm-cirros && virtstream get vmis -w",
        "virtstream why vmi/default/vm-cirros",
        "virtstream console vm-cirros   # qemu mode: the guest's shell (Ctrl+] leaves)",
        "virtstream get vms vm-cirros --at 1m",
    ]:
        say(f"  {line}")
