"""`virtstream up --demo`: apply examples/kubevirt/vm-cirros.yaml and walk it through its
life (start, Running, pause, unpause, migrate when there are several nodes, stop),
printing each state as it is reached and how long it took. Raw KubeVirt REST calls, so it
also shows what the API speaks. In qemu mode it also waits for the guest's shell prompt on
its serial console and prints what the guest wrote there."""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import yaml
from rich.markup import escape

from services.launcher.rundir import guest_console_log

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "kubevirt" / "vm-cirros.yaml"
NS = "default"
VMS = f"/apis/kubevirt.io/v1/namespaces/{NS}/virtualmachines"
VMIS = f"/apis/kubevirt.io/v1/namespaces/{NS}/virtualmachineinstances"
SUB = f"/apis/subresources.kubevirt.io/v1/namespaces/{NS}"

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


def _put(http: httpx.Client, path: str, say: Say) -> None:
    r = http.put(path, json={})
    if not r.is_success:
        raise DemoFailed(f"PUT {path}: {r.status_code} {r.text}")


def _paused(vmi: dict[str, Any] | None) -> bool:
    conds = (vmi or {}).get("status", {}).get("conditions", []) or []
    return any(c.get("type") == "Paused" and c.get("status") == "True" for c in conds)


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
    api_url: str, nodes: int, say: Say = print, console_run_dir: Path | None = None
) -> bool:
    """console_run_dir: `up`'s run dir in qemu mode (the guests' console logs live there)."""
    manifest = yaml.safe_load(EXAMPLE.read_text())
    name = manifest["metadata"]["name"]
    vmi_path = f"{VMIS}/{name}"
    with httpx.Client(base_url=api_url, timeout=10.0) as http:
        try:
            t0 = time.monotonic()
            _wait("API is up", lambda: http.get(VMS).is_success, 60, say, t0)
            say(
                f"[bold]demo[/]: {EXAMPLE.name} (runStrategy {manifest['spec'].get('runStrategy')})"
            )
            t = time.monotonic()
            r = http.post(VMS, json=manifest)
            if r.status_code == 409:
                say(f"  {name} exists already: reusing it")
            elif not r.is_success:
                raise DemoFailed(f"create: {r.status_code} {r.text}")
            _wait(
                f"VirtualMachine {name} created",
                lambda: _get(http, f"{VMS}/{name}") is not None,
                10,
                say,
                t,
            )

            spec = manifest["spec"]
            if spec.get("runStrategy", "Halted") == "Halted" or spec.get("running") is False:
                t = time.monotonic()
                _put(http, f"{SUB}/virtualmachines/{name}/start", say)
            _wait(
                "VMI Running",
                lambda: ((_get(http, vmi_path) or {}).get("status", {}).get("phase") == "Running"),
                60, say, t,
            )  # fmt: skip
            if console_run_dir is not None:
                _guest_console(http, name, vmi_path, console_run_dir, say, t)
            t = time.monotonic()
            _put(http, f"{SUB}/virtualmachineinstances/{name}/pause", say)
            _wait("Paused", lambda: _paused(_get(http, vmi_path)), 30, say, t)
            t = time.monotonic()
            _put(http, f"{SUB}/virtualmachineinstances/{name}/unpause", say)
            _wait("Unpaused (Running)", lambda: not _paused(_get(http, vmi_path)), 30, say, t)
            if nodes > 1:
                _migrate(http, name, vmi_path, say)
            else:
                say("  migration skipped: one node (use --nodes 2)")
            t = time.monotonic()
            _put(http, f"{SUB}/virtualmachines/{name}/stop", say)
            _wait("Stopped (VMI gone)", lambda: _get(http, vmi_path) is None, 60, say, t)
            say(f"[bold green]demo passed[/] in {time.monotonic() - t0:.2f}s")
            return True
        except DemoFailed as e:
            say(f"[bold red]demo failed[/]: {e}")
            return False


def _migrate(http: httpx.Client, name: str, vmi_path: str, say: Say) -> None:
    """Live-migrate the VM (test mode: a simulated transfer between two real handlers) and
    wait for its migration to succeed and the VMI to run on the target."""
    source = (_get(http, vmi_path) or {}).get("status", {}).get("nodeName")
    t = time.monotonic()
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
