"""`virtstream drain NODE` progress: after the drain request, show the node emptying.

Polls the VMIs still on the node and the migrations moving them, printing a line whenever
something changes, until no non-final VMI is left (exit 0). A VMI that leaves the node is
reported as what happened to it: migrated to another node (the same VMI, live-migrated),
restarted on another node (deleted and recreated by its VM), or deleted (a drain deletes the
VMIs it cannot migrate, as KubeVirt's eviction does). VMIs a drain cannot move
(evictionStrategy LiveMigrate but not live-migratable) are reported with KubeVirt's reason;
when only those are left, or on timeout, it stops with exit 1 (the node stays cordoned)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

JSON = dict[str, Any]
FINAL = ("Succeeded", "Failed")


def _condition(vmi: JSON, ctype: str) -> JSON | None:
    for c in (vmi.get("status") or {}).get("conditions") or []:
        if c.get("type") == ctype:
            return dict(c)
    return None


def blocked_reason(vmi: JSON) -> str | None:
    """KubeVirt's message when the drain will leave this VMI where it is."""
    if (vmi.get("spec") or {}).get("evictionStrategy") != "LiveMigrate":
        return None
    cond = _condition(vmi, "LiveMigratable")
    if cond is None or cond.get("status") != "False":
        return None
    name = (vmi.get("metadata") or {}).get("name", "")
    return f"VMI {name} is configured with an eviction strategy but is not live-migratable"


def _key(obj: JSON) -> str:
    md = obj.get("metadata") or {}
    return f"{md.get('namespace', '')}/{md.get('name', '')}"


def _on(vmi: JSON, node: str) -> bool:
    status = vmi.get("status") or {}
    return status.get("nodeName") == node and status.get("phase") not in FINAL


def _uid(obj: JSON | None) -> str:
    return str(((obj or {}).get("metadata") or {}).get("uid") or "")


def _left(key: str, last: JSON, now: JSON | None, node: str) -> str:
    """What became of a VMI that is no longer on the node: the same VMI (its uid) runs
    elsewhere only after a live migration; a new one of that name is its VM's restart."""
    status = (now or {}).get("status") or {}
    if now is not None and status.get("phase") not in FINAL and status.get("nodeName"):
        if _uid(now) == _uid(last):
            return f"{key}: migrated to {status['nodeName']}"
        return f"{key}: restarted on {status['nodeName']} (a new VMI of its VM)"
    strategy = (last.get("spec") or {}).get("evictionStrategy") or "None"
    if strategy == "LiveMigrate":
        return f"{key}: left {node}"
    return f"{key}: deleted (evictionStrategy {strategy}: a drain does not migrate it)"


def _moving(client: Any) -> dict[str, JSON]:
    """Active migrations by "ns/vmiName"."""
    out = {}
    for m in client.list("vmim", all_namespaces=True, raw=True):
        status = m.get("status") or {}
        if status.get("phase") in FINAL:
            continue
        ns = (m.get("metadata") or {}).get("namespace", "")
        out[f"{ns}/{(m.get('spec') or {}).get('vmiName', '')}"] = m
    return out


def _describe(vmi: JSON, mig: JSON | None) -> str:
    if (reason := blocked_reason(vmi)) is not None:
        return f"blocked: {reason}"
    if (vmi.get("metadata") or {}).get("deletionTimestamp"):
        return "shutting down"
    if mig is None:
        return (vmi.get("status") or {}).get("phase", "")
    st = mig.get("status") or {}
    state = st.get("migrationState") or {}
    line = f"migrating ({st.get('phase', 'Pending')})"
    if state.get("targetNode"):
        line += f" to {state['targetNode']}"
    total = state.get("dataTotalBytes")
    if total:
        done = state.get("dataProcessedBytes", 0)
        line += f" {100 * done // total}%"
    return line


def drain_progress(
    client: Any,
    node: str,
    *,
    timeout: float = 600.0,
    interval: float = 0.5,
    out: Callable[[str], None] = print,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
    before: list[JSON] | None = None,
) -> int:
    """Follow the drain of `node` (already requested) until it is empty: 0, or 1 when only
    blocked VMIs remain or `timeout` seconds pass. `client` is a client.api.Client.
    `before`: the VMIs listed before the drain was requested, so one deleted before the
    first poll is still reported."""
    deadline = clock() + timeout
    seen: dict[str, JSON] = {_key(v): v for v in before or [] if _on(v, node)}
    shown: dict[str, str] = dict.fromkeys(seen, "")
    while True:
        every = {_key(v): v for v in client.list("vmi", all_namespaces=True, raw=True)}
        vmis = [v for v in every.values() if _on(v, node)]
        moving = _moving(client) if vmis else {}
        lines = {_key(v): _describe(v, moving.get(_key(v))) for v in vmis}
        for k, line in sorted(lines.items()):
            if shown.get(k) != line:
                out(f"{k}: {line}")
        for k in sorted(shown.keys() - lines.keys()):
            out(_left(k, seen[k], every.get(k), node))
        shown = lines
        seen = {_key(v): v for v in vmis}
        if not vmis:
            out(f"node/{node} drained")
            return 0
        if all(line.startswith("blocked:") for line in lines.values()):
            out(f"node/{node} cannot be drained: {len(lines)} VMI(s) cannot be moved")
            return 1
        if clock() >= deadline:
            out(f"node/{node}: timed out with {len(vmis)} VMI(s) left")
            return 1
        sleep(interval)
