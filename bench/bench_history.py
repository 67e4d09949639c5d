"""History benchmark: what a cluster's age costs its restarts and its debugging.

  python -m bench.bench_history --events N [--events M ...] [--results FILE] [--plot PNG]

Per size, on a fresh data dir under /tmp:

1. **a real lifecycle**: `virtstream up --nodes 2`; one VM through the api: create
   (Halted), start, Running, a live migration, the migration deleted, a relabel, stop,
   start and stop again, delete. Every event of it (VM, VMI, migration aggregates) is the
   template: what the real services wrote.
2. **a year of it**: `up` stops; its nats-server alone serves the store while the template
   is appended again and again through the JetStream adapter's connection (publish_async,
   in waves of interleaved lifecycles, `occurred_at` spread over a year; with `--whatif`
   one after another) until the stream holds N events. Each copy gets its own names, uids
   (a uid the controller derives from its decision's id, and the launcher pod's name drawn
   from it, derived from the copy's decision id) and event ids; an id that names its
   cause's stream sequence (`<service>/<seq>/<n>`) names the copy's cause, causation and
   correlation ids follow, and a cause's sequence (`causationSeq`) is the copy's of that
   cause, so `why` walks a copy as it walks the original. `ALIVE` copies
   are kept at every size, spread over the year (stopped before their deletion: Halted VMs
   with up to a year behind them): the same cluster, younger or older; the others end (VM
   deleted, VMIs removed, migrations deleted). What the services would have left
   after a real year is set up too: their durable consumers start after the year (they
   consumed it as it came) and their checkpoints are the year folded with their own folds
   and codecs (they saved one every 10,000 events or minute).
3. **the real services on it**: `up` again on the same data dir, then, measured:
   - each service's restart to ready (kill -9; the supervisor starts it again after
     0.5 s): from the kill and from the new process's start to its /readyz;
   - a whole-cluster restart (`up` stopped and started) to a new VM Running;
   - `why` and `replay` of the first copy's VM (an early, long-deleted VM), in-process as
     the CLI runs them once connected;
   - `get --at` (the api's `?at=`) of that VM at a point of its life, and of the newest
     kept VM at the end of the log;
   - `verify` (the api's lists against a rebuild);
   - disk bytes per event (the store dir), the event stream's size.
   `virtstream verify` is also run once on the filled log, so the copies are known to fold
   exactly as the api folds them.

Before 3., the same restarts on a fresh cluster (`floor_*`): the floor each figure reads
against on a shared machine. `--keep` leaves the dir (the year described in `year.json`);
`--reuse DIR` runs 3. again on a kept year without filling it.

Results are merged into `--results` (JSON, one entry per size: the newest run of a size
replaces the older) and drawn into `--plot` (PNG): each figure against the event count.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable, Coroutine, Iterator
from pathlib import Path
from typing import Any

import httpx
import msgspec
import nats
from nats.aio.client import Client as NATS
from nats.js.api import (
    AckPolicy,
    ConsumerConfig,
    DeliverPolicy,
    StorageType,
    StoreCompression,
    StreamConfig,
    StreamSource,
)

from bench import whatif_cost
from bench.exec_common import REPO, Up, start_up, wait_ready
from cli.whatif import run_whatif
from client import credentials
from events import subjects
from events.catalog import Event, Resources
from events.codec import decode, encode, event_type
from events.envelope import Stored
from events.meta import Aggregate, Kind
from eventstore import archive, checkpoints, index
from eventstore.connection import ConnectOptions
from eventstore.index import Indexer
from eventstore.jetstream import JetStreamStore
from eventstore.kv import JsBucket
from eventstore.settings import StreamSettings
from ops.nats_server import find_binary
from projections import launcher_pods
from projections.cluster import Cluster
from projections.replay import Step
from readside import causality, timetravel, verify
from services.controller import emit
from services.controller.reactor import ControllerReactor
from services.upkeep import retire

NS = "default"
TEMPLATE = "histtmplvm"  # distinctive: replaced by each copy's name wherever it occurs
TEMPLATE_MIG = f"{TEMPLATE}-mig"
YEAR = 365 * 24 * 3600.0
WAVE = 20  # lifecycles interleaved at a time
# with --whatif one at a time: interleaved copies of one recorded life were placed where
# the template was, on the same node at once, which the scheduler would not have done; a
# year of copies one after another is a history today's controller would have written
# the VMs that stay (Halted), at every size: the same cluster, a day or a year old (a
# share of the copies would make the larger years larger clusters too)
ALIVE = 250
VMS = f"/apis/kubevirt.io/v1/namespaces/{NS}/virtualmachines"
VMIS = f"/apis/kubevirt.io/v1/namespaces/{NS}/virtualmachineinstances"
VMIMS = f"/apis/kubevirt.io/v1/namespaces/{NS}/virtualmachineinstancemigrations"
SUB = f"/apis/subresources.kubevirt.io/v1/namespaces/{NS}/virtualmachines"
UUID = re.compile(rb"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
HINT = re.compile(r"^(?P<svc>[^/]+)/(?P<seq>\d+)/(?P<n>\d+)$")


def vm_manifest(name: str, run_strategy: str = "Halted") -> dict[str, object]:
    return {
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachine",
        "metadata": {"name": name, "namespace": NS, "labels": {"app": "history"}},
        "spec": {
            "runStrategy": run_strategy,
            "template": {
                "metadata": {"labels": {"app": "history"}},
                "spec": {
                    "domain": {"memory": {"guest": "64Mi"}, "devices": {}},
                    "terminationGracePeriodSeconds": 0,
                },
            },
        },
    }


async def until(probe: Callable[[], Awaitable[bool]], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(httpx.HTTPError):
            if await probe():
                return
        await asyncio.sleep(0.05)
    raise SystemExit(f"timed out: {what}")


async def vmi_phase(http: httpx.AsyncClient, name: str) -> str:
    r = await http.get(f"{VMIS}/{name}")
    if r.status_code == 404:
        return ""
    r.raise_for_status()
    return str((r.json().get("status") or {}).get("phase") or "")


async def running(http: httpx.AsyncClient, name: str) -> bool:
    return await vmi_phase(http, name) == "Running"


async def vmi_gone(http: httpx.AsyncClient, name: str) -> bool:
    return (await http.get(f"{VMIS}/{name}")).status_code == 404


# ---------------------------------------------------------------- 1. the template
async def lifecycle(http: httpx.AsyncClient, name: str) -> None:
    """One VM's life through the api, each step waited for as a user would."""
    mig = f"{name}-mig"
    (await http.post(VMS, json=vm_manifest(name))).raise_for_status()
    (await http.put(f"{SUB}/{name}/start")).raise_for_status()
    await until(lambda: running(http, name), 60, f"{name} Running")
    body = {
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachineInstanceMigration",
        "metadata": {"name": mig, "namespace": NS},
        "spec": {"vmiName": name},
    }
    (await http.post(VMIMS, json=body)).raise_for_status()

    async def migrated() -> bool:
        r = await http.get(f"{VMIMS}/{mig}")
        return (r.json().get("status") or {}).get("phase") in ("Succeeded", "Failed")

    await until(migrated, 60, f"{mig} final")
    (await http.delete(f"{VMIMS}/{mig}")).raise_for_status()
    patch = {"metadata": {"labels": {"app": "history", "tier": "year"}}}
    r = await http.patch(
        f"{VMS}/{name}", json=patch, headers={"Content-Type": "application/merge-patch+json"}
    )
    r.raise_for_status()
    for again in (False, True):
        (await http.put(f"{SUB}/{name}/stop")).raise_for_status()
        await until(lambda: vmi_gone(http, name), 60, f"{name} stopped")
        if not again:
            (await http.put(f"{SUB}/{name}/start")).raise_for_status()
            await until(lambda: running(http, name), 60, f"{name} Running again")
    (await http.delete(f"{VMS}/{name}")).raise_for_status()

    async def vm_gone() -> bool:
        return (await http.get(f"{VMS}/{name}")).status_code == 404

    await until(vm_gone, 60, f"{name} deleted")


async def template_events(store: JetStreamStore) -> list[Stored]:
    filters = [
        subjects.aggregate_filter(Kind.VM, NS, TEMPLATE),
        subjects.aggregate_filter(Kind.VMI, NS, TEMPLATE),
        subjects.aggregate_filter(Kind.MIGRATION, NS, TEMPLATE_MIG),
    ]
    return [s async for s in store.replay(filters)]


# ------------------------------------------------------------------- 2. copies
class Template:
    """The recorded lifecycle, ready to be copied: each event as JSON builtins and its
    position; where the kept copies stop (the VM's deletion)."""

    def __init__(self, events: list[Stored]) -> None:
        self.events = events
        self.raw = [encode(s.event) for s in events]
        self.seq_index = {s.seq: i for i, s in enumerate(events)}
        self.ids = {s.event.meta.event_id for s in events}
        self.uids = sorted({u for raw in self.raw for u in UUID.findall(raw)})
        # a uid the controller derived from its decision's id (emit.new_uid): a copy derives
        # its own from the copy's decision id, as the controller deciding on the copy would
        decided = {emit.uid_of(s.event.meta.event_id): s.event.meta.event_id for s in events}
        self.derived = {u: decided[u.decode()] for u in self.uids if u.decode() in decided}
        self.t0 = events[0].event.meta.occurred_at
        deletes = [i for i, s in enumerate(events) if type(s.event).__name__ == "VMDeleted"]
        # the VM is stopped (VMI removed) before its deletion: a copy cut there is Halted
        self.keep_len = deletes[0] if deletes else len(events)

    def __len__(self) -> int:
        return len(self.events)


class Copy:
    """One copy's renaming: names, uids, event ids (with the copy's cause sequences)."""

    def __init__(self, t: Template, k: int, base_time: float, keep_every: int) -> None:
        self.t = t
        self.k = k
        self.name = f"h{k:07d}"
        self.base = base_time
        self.uids: dict[bytes, bytes] = {}  # the template's uid → the copy's, as met
        self.seqs: dict[int, int] = {}  # template index → the copy's stream sequence
        # the first copy ends (the early VM is a long-deleted one), every `keep_every`th stays
        self.length = t.keep_len if k % keep_every == keep_every - 1 else len(t)

    def uid(self, old: bytes) -> bytes:
        """The copy's uid for a template's: a derived one from the copy's decision id (once
        the events its id names are written), any other one of the copy's own."""
        new = self.uids.get(old)
        if new is None:
            eid = self.t.derived.get(old)
            if eid is not None:
                new = emit.uid_of(self.event_id(eid)).encode()
            else:
                new = str(uuid.uuid5(uuid.NAMESPACE_OID, f"{self.k}/{old.decode()}")).encode()
            self.uids[old] = new
        return new

    def rename(self, raw: bytes) -> bytes:
        present = [u for u in self.t.uids if u in raw]
        for old in present:  # a launcher pod's name ends with a suffix drawn from a uid
            pod = launcher_pods.pod_name(TEMPLATE, old.decode()).encode()
            if pod in raw:
                new = launcher_pods.pod_name(self.name, self.uid(old).decode()).encode()
                raw = raw.replace(pod, new)
        raw = raw.replace(TEMPLATE.encode(), self.name.encode())
        for old in present:
            raw = raw.replace(old, self.uid(old))
        return raw

    def event_id(self, eid: str) -> str:
        if eid not in self.t.ids:
            return eid  # outside the template (a node's event): the same cause
        m = HINT.match(eid)
        if m is not None and int(m["seq"]) in self.t.seq_index:
            i = self.t.seq_index[int(m["seq"])]
            if i in self.seqs:
                return f"{m['svc']}/{self.seqs[i]}/{m['n']}"
        renamed = self.rename(eid.encode()).decode()
        # a decision's id ends with the version (a sequence) it was decided on: the copy's
        # decision was decided on the copy's event, as a replay of the year decides it
        head, _, tail = renamed.rpartition("/")
        if head and tail.isdigit() and (at := self.t.seq_index.get(int(tail), -1)) in self.seqs:
            return f"{head}/{self.seqs[at]}"
        return renamed if renamed != eid else f"{eid}~{self.k}"

    def cause_seq(self, seq: int) -> int:
        """The copy's sequence of the template's cause at `seq` (a cause outside the
        template: the same event, at the same sequence; 0: its copy is not written)."""
        i = self.t.seq_index.get(seq)
        if i is None:
            return seq
        return self.seqs.get(i, 0)

    def event(self, i: int, seq: int) -> Event:
        """The copy of template event `i`, stored at `seq`."""
        self.seqs[i] = seq
        d = msgspec.json.decode(self.rename(self.t.raw[i]))
        meta = d["meta"]
        meta["eventId"] = self.event_id(self.t.events[i].event.meta.event_id)
        cm = self.t.events[i].event.meta
        meta["correlationId"] = self.event_id(cm.correlation_id)
        if cm.causation_id:
            meta["causationId"] = self.event_id(cm.causation_id)
        if cm.causation_seq:
            meta.pop("causationSeq", None)
            seq_of_cause = self.cause_seq(cm.causation_seq)
            if seq_of_cause:
                meta["causationSeq"] = seq_of_cause
        meta["occurredAt"] = self.base + (cm.occurred_at - self.t.t0)
        return decode(msgspec.json.encode(d))


def copies(
    t: Template, first_seq: int, total: int, now: float, width: int = WAVE
) -> Iterator[tuple[Copy, Event]]:
    """Events until `total` are written: waves of `width` interleaved copies."""
    every = max(1, int(total / len(t)) // ALIVE)  # ALIVE of the copies are kept
    per_copy = (len(t) * (every - 1) + t.keep_len) / every
    n_copies = max(1, int(total / per_copy) + 1)
    seq = first_seq
    written = 0
    k = 0
    while written < total:
        wave = [Copy(t, k + j, now - YEAR + (k + j) * YEAR / n_copies, every) for j in range(width)]
        k += width
        step = 0
        while wave and written < total:
            alive = []
            for c in wave:
                if step >= c.length:
                    continue
                alive.append(c)
                yield c, c.event(step, seq)
                seq += 1
                written += 1
                if written >= total:
                    return
            wave = alive
            step += 1


async def fill(js_nc: NATS, stream: str, t: Template, total: int) -> tuple[int, float, str, str]:
    """Append `total` copied events; returns the last seq, events/s, the first copy's name
    and the last kept copy's (complete, Halted) name."""
    js = js_nc.jetstream()
    # and the index the upkeep kept as the events came: its entries written alongside (the
    # same entries, subjects and ids its indexer writes; reading the year back to index it
    # would cost the set-up more than the fill)
    indexed = await index.ensure(JetStreamStore(js_nc, StreamSettings(name=stream)))
    first = int((await js.stream_info(stream)).state.last_seq) + 1
    started = time.perf_counter()
    pending = 0
    first_name = kept = ""
    written = copies(t, first, total, time.time(), 1 if WHATIF else WAVE)
    for seq, (c, ev) in enumerate(written, start=first):
        first_name = first_name or c.name
        if c.length < len(t) and len(c.seqs) == c.length:
            kept = c.name
        subject = subjects.event_subject(ev.meta.aggregate, event_type(ev), ev.meta.node)
        data = encode(ev)
        await js.publish_async(
            subject, data, stream=stream, headers={"Nats-Msg-Id": ev.meta.event_id}
        )
        for n, (entry, body) in enumerate(index.entries(subject, data)):
            await js.publish_async(entry, body, stream=indexed, headers=index.entry_headers(seq, n))
        pending += 1
        if pending >= 4000:
            await js.publish_async_completed()
            pending = 0
    await js.publish_async_completed()
    last = int((await js.stream_info(stream)).state.last_seq)
    if last != first + total - 1:
        raise SystemExit(f"the fill stored {last - first + 1} events, not {total}")
    return last, total / (time.perf_counter() - started), first_name, kept


# --------------------------------------------------------------- 3. measurements
RESTART_TIMEOUT = 300.0
RESTARTED = (("api", "api"), ("controller", "controller"), ("handler node-1", "handler"))


def services(up: Up) -> dict[str, dict[str, Any]]:
    return dict(json.loads((up.data_dir / "up.json").read_text()))


def ready_url(up: Up, name: str) -> str:
    if name == "api":
        return f"{up.api}/readyz"
    argv = services(up)[name]["argv"]
    scheme = "https" if "--metrics-tls-cert" in argv else "http"  # up serves it with TLS
    return f"{scheme}://127.0.0.1:{argv[argv.index('--metrics-port') + 1]}/readyz"


async def restart_to_ready(
    up: Up, name: str, timeout: float = RESTART_TIMEOUT
) -> tuple[float, float] | None:
    """kill -9 `name`; seconds from the kill, and from its new process's start, to ready
    (None: not ready within `timeout`)."""
    url = ready_url(up, name)
    old = services(up)[name]["pid"]
    # the api's CA signed every service's certificate
    opts = credentials.httpx_options(up.api) if name == "api" or url.startswith("https") else {}
    os.kill(old, signal.SIGKILL)
    killed = time.monotonic()
    spawned = 0.0
    async with httpx.AsyncClient(timeout=2, **opts) as http:
        while time.monotonic() - killed < timeout:
            if not spawned:
                with contextlib.suppress(OSError, ValueError, KeyError):
                    if services(up)[name]["pid"] != old:
                        spawned = time.monotonic()
            if spawned:
                with contextlib.suppress(httpx.HTTPError):
                    r = await http.get(url.removeprefix(up.api) if name == "api" else url)
                    if r.status_code == 200:
                        now = time.monotonic()
                        return now - killed, now - spawned
            await asyncio.sleep(0.02)
    return None


async def new_vm_running(up: Up, name: str, started: float) -> float:
    async with httpx.AsyncClient(**credentials.httpx_options(up.api, wait=60), timeout=5) as http:

        async def posted() -> bool:
            r = await http.post(VMS, json=vm_manifest(name, "Always"))
            return r.status_code in (200, 201, 409)

        await until(posted, RESTART_TIMEOUT, f"create {name}")
        await until(lambda: running(http, name), RESTART_TIMEOUT, f"{name} Running")
    return time.monotonic() - started


def du(path: Path) -> int:
    total = 0
    for f in path.rglob("*"):
        with contextlib.suppress(OSError):  # a scratch stream's files going meanwhile
            if f.is_file():
                total += f.stat().st_size
    return total


async def connect(url: str, data_dir: Path, user: str = "admin") -> NATS:
    """As `user` of the `up` whose data dir this is (also while `up` is down)."""
    password = credentials.nats_password(data_dir, user) or ""
    return await nats.connect(url, **ConnectOptions(user=user, password=password).nats_kwargs())


FAILED = -1.0  # a figure whose command failed (a JetStream request timed out): see the log


async def timed(make: Callable[[], Awaitable[Any]], rounds: int = 3) -> tuple[float, Any]:
    """The median of `rounds` runs (seconds) and the last result; (FAILED, None) when a
    run raised (said on stdout)."""
    times = []
    result = None
    for _ in range(rounds):
        t = time.perf_counter()
        try:
            result = await make()
        except Exception as e:
            print(f"failed after {time.perf_counter() - t:.1f}s: {e!r}", flush=True)
            return FAILED, None
        times.append(time.perf_counter() - t)
    return sorted(times)[len(times) // 2], result


QUIET_CPU = 0.1  # of one core, the cluster's processes together: below it, it is quiet
DEBUG_ROUNDS = 5


async def quiet(up: Up, timeout: float = 60.0) -> float:
    """Seconds until the cluster's processes (nats-server and the services) use less than
    `QUIET_CPU` of a core over half a second: after nine kill -9s the services catch up
    and checkpoint for a while, and a figure of the debugging tools taken meanwhile is a
    figure of that (`timeout`: measured anyway)."""

    def cpu_seconds() -> float:
        ticks = 0
        for pid in up.services().values():
            with contextlib.suppress(OSError, ValueError, IndexError):
                after_name = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
                ticks += int(after_name[11]) + int(after_name[12])  # utime, stime
        return ticks / os.sysconf("SC_CLK_TCK")

    started = time.monotonic()
    before = cpu_seconds()
    while time.monotonic() - started < timeout:
        await asyncio.sleep(0.5)
        now = cpu_seconds()
        if (now - before) / 0.5 < QUIET_CPU:
            break
        before = now
    return time.monotonic() - started


async def debug_figures(up: Up, early: str, late: str) -> dict[str, float]:
    """`why` and `replay` as the CLI runs them once connected (a store of its own each
    time: the hot log's floor is read again), the first `why` after the server's start
    (its archive blocks cold) apart from the median of the next `DEBUG_ROUNDS`."""
    nc = await connect(up.nats_url, up.data_dir, "reader")
    out: dict[str, float] = {}
    try:
        store = JetStreamStore(nc, StreamSettings())
        vm = Aggregate(kind=Kind.VM, namespace=NS, name=early)

        def why() -> Awaitable[causality.Chain]:
            return causality.why(JetStreamStore(nc, StreamSettings()), vm)

        def replay() -> Awaitable[list[Step]]:
            return timetravel.aggregate_replay(JetStreamStore(nc, StreamSettings()), vm)

        out["why_first_s"], _ = await timed(why, rounds=1)
        out["why_s"], chain = await timed(why, rounds=DEBUG_ROUNDS)
        out["why_hops"] = len(chain.hops) if chain else 0
        out["replay_s"], steps = await timed(replay, rounds=DEBUG_ROUNDS)
        out["replay_steps"] = len(steps) if steps else 0
        # a point of the early VM's life: its VMI Running
        vmi = subjects.aggregate_filter(Kind.VMI, NS, early)
        point = 0
        with contextlib.suppress(Exception):
            async for s in store.replay([vmi]):
                if type(s.event).__name__ == "DomainStarted":
                    point = s.seq
                    break

        # why the early VM was Running at that point: its VMI's start, the controller's
        # and the handler's effects back to the user's request, each cause one get by the
        # sequence its effect carries, in the archive
        def why_running() -> Awaitable[causality.Chain]:
            return causality.why(JetStreamStore(nc, StreamSettings()), vm, anchor_seq=point)

        if point:
            out["why_running_s"], chain = await timed(why_running, rounds=DEBUG_ROUNDS)
            out["why_running_hops"] = len(chain.hops) if chain else 0
            out["why_running_complete"] = int(bool(chain and chain.complete))
        info = await nc.jetstream().stream_info(store.stream)
        out["stream_bytes"] = info.state.bytes
        out["stream_messages"] = info.state.messages
        async with httpx.AsyncClient(**credentials.httpx_options(up.api), timeout=600) as http:

            async def get_at(name: str, at: int) -> int:
                r = await http.get(f"{VMS}/{name}", params={"at": str(at)})
                r.raise_for_status()
                return r.status_code

            out["get_at_early_s"], _ = await timed(lambda: get_at(early, point))
            last = int(info.state.last_seq)
            out["get_at_late_s"], _ = await timed(lambda: get_at(late, last))
            admin = await connect(up.nats_url, up.data_dir)
            try:
                writer = JetStreamStore(admin, StreamSettings())
                if FULL_VERIFY:
                    out["verify_full_s"], report = await timed(
                        lambda: verify.verify(writer, http, full=True, save=True), rounds=1
                    )
                    if report is not None and not report.ok:  # recorded, and the run goes on
                        out["verify_full_differences"] = len(report.differences)
                        print(f"verify --full found {len(report.differences)} differences:")
                        for d in report.differences[:10]:
                            print(f"  {d}", flush=True)
                    # the default: from the checkpoint the full run saved, to the live views
                    out["verify_s"], report = await timed(
                        lambda: verify.verify(writer, http, full=False, save=True), rounds=1
                    )
                    if report is not None and not report.ok:
                        out["verify_differences"] = len(report.differences)
                        print(f"verify found {len(report.differences)} differences", flush=True)
                if WHATIF:
                    out.update(await whatif_figures(writer))
                out.update(await storage_figures(admin))
            finally:
                await admin.close()
    finally:
        await nc.close()
    return out


COMPRESSION_COST = True  # --no-compression-cost: skip the two scratch mirrors (long at 1M)
FULL_VERIFY = True  # --no-verify: skip `verify` (its first run folds the whole archive)
WHATIF = False  # --whatif: `whatif` over the whole year against a rebuild of the views


async def whatif_figures(store: JetStreamStore) -> dict[str, float]:
    """`virtstream whatif` with no change over the whole log (the archive included)
    against a rebuild of the views from the same log, one after the other: their times
    and the differences the what-if found (none expected)."""
    started = time.perf_counter()
    await whatif_cost.rebuild(store)
    rebuild_s = time.perf_counter() - started
    started = time.perf_counter()
    report, _ = await run_whatif(store, ControllerReactor(), "", "", "")
    whatif_s = time.perf_counter() - started
    print(
        f"whatif {whatif_s:.1f} s (rebuild {rebuild_s:.1f} s, x{whatif_s / rebuild_s:.2f}): "
        f"{report.events} events, {len(report.differences)} differences",
        flush=True,
    )
    for d in report.differences[:5]:
        print(f"  {d}", flush=True)
    return {
        "whatif_s": whatif_s,
        "whatif_rebuild_s": rebuild_s,
        "whatif_differences": len(report.differences),
    }


async def storage_figures(nc: NATS) -> dict[str, float]:
    """The hot log and the archive; what S2 costs: two scratch mirrors of the archive, one
    S2-compressed and one not, each timed until it holds everything, then removed."""
    js = nc.jetstream()
    out: dict[str, float] = {}
    hot = await js.stream_info("VIRT")
    out["stream_bytes"] = hot.state.bytes
    out["stream_messages"] = hot.state.messages
    with contextlib.suppress(Exception):
        arch = await js.stream_info(archive.archive_name("VIRT"))
        out["archive_bytes"] = arch.state.bytes
        out["archive_messages"] = arch.state.messages
        if not COMPRESSION_COST:
            return out
        target = int(arch.state.last_seq)
        for label, compression in (("s2", StoreCompression.S2), ("none", StoreCompression.NONE)):
            name = f"BENCH_MIRROR_{label.upper()}"
            t = time.perf_counter()
            await js.add_stream(
                StreamConfig(
                    name=name,
                    mirror=StreamSource(name=archive.archive_name("VIRT")),
                    storage=StorageType.FILE,
                    compression=compression,
                )
            )
            try:
                while True:
                    info = await js.stream_info(name)
                    if info.state.last_seq >= target:
                        break
                    await asyncio.sleep(0.1)
                out[f"mirror_{label}_s"] = time.perf_counter() - t
                out[f"mirror_{label}_bytes"] = info.state.bytes
            finally:
                await js.delete_stream(name)
    return out


async def precreate_durables(nc: NATS, last: int, nodes: int) -> None:
    """The services' durable consumers, at the end of the year: during a real year they
    consumed (and acked) every event as it came, so none of the copies is pending."""
    from services.controller.reactor import ControllerReactor
    from services.handler.node_info import NodeConfig
    from services.handler.reactor import HandlerReactor

    js = nc.jetstream()
    wanted = {ControllerReactor.name: list(ControllerReactor().filters())}
    for i in range(1, nodes + 1):
        node = f"node-{i}"
        d = HandlerReactor(
            NodeConfig(name=node), capacity=Resources(cpu_millis=0, memory_bytes=0), labels={}
        )
        wanted[d.name] = list(d.filters())
    for name, filters in wanted.items():
        with contextlib.suppress(Exception):
            await js.delete_consumer("VIRT", name)
        await js.add_consumer(
            "VIRT",
            ConsumerConfig(
                durable_name=name,
                filter_subjects=filters,
                ack_policy=AckPolicy.EXPLICIT,
                deliver_policy=DeliverPolicy.BY_START_SEQUENCE,
                opt_start_seq=last + 1,
                ack_wait=10.0,
                max_ack_pending=4096,
                max_deliver=-1,
            ),
        )


async def prebuild_checkpoints(nc: NATS, last: int, nodes: int) -> float:
    """The services' checkpoints at the end of the year, folded here with their own folds
    and codecs: during a real year each service saved one every 10,000 events or minute,
    so the newest was at most that old (the restarts measured fold such a tail on top).
    Returns the seconds it took (the year's one full fold)."""
    from readside import view_checkpoints
    from services.controller.checkpoint import ControllerCodec
    from services.controller.state import ControllerState
    from services.handler.checkpoint import HandlerCodec
    from services.handler.node_info import NodeConfig
    from services.handler.reactor import HandlerReactor, HandlerState
    from services.runtime.checkpointing import Checkpointer

    started = time.perf_counter()
    store = JetStreamStore(nc, StreamSettings())
    controller = ControllerReactor()
    cstate = ControllerState()
    cversions: dict[str, int] = {}
    deciders = [
        HandlerReactor(
            NodeConfig(name=f"node-{i}"),
            capacity=Resources(cpu_millis=0, memory_bytes=0),
            labels={},
        )
        for i in range(1, nodes + 1)
    ]
    hstates = [HandlerState() for _ in deciders]
    hversions: list[dict[str, int]] = [{} for _ in deciders]
    hfilters = [list(d.filters()) for d in deciders]
    views = Cluster(kube_events=True)  # the api's fold: its Events too
    async for st in store.replay(until_seq=last, raw=True):
        key = subjects.aggregate_key(st.subject)
        cstate = controller.evolve(cstate, st)
        cversions[key] = st.seq
        views.apply(st)
        for i, d in enumerate(deciders):
            if any(subjects.matches(f, st.subject) for f in hfilters[i]):
                hstates[i] = d.evolve(hstates[i], st)
                hversions[i][key] = st.seq
    folded = time.perf_counter()
    print(f"year folded in {folded - started:.1f} s", flush=True)
    # as each shell's checkpoints kept them: the versions of what its state still holds
    cversions = {k: v for k, v in cversions.items() if controller.holds(cstate, k)}
    for i, d in enumerate(deciders):
        hversions[i] = {k: v for k, v in hversions[i].items() if d.holds(hstates[i], k)}
    cp = Checkpointer(store, controller.name, ControllerCodec())
    cp.take(last, cversions, cstate)
    await cp.settle()
    for i, d in enumerate(deciders):
        hp = Checkpointer(store, d.name, HandlerCodec())
        hp.take(last, hversions[i], hstates[i])
        await hp.settle()
    await view_checkpoints.save(store, checkpoints.API_VIEWS, views)
    # and the hot log as the upkeep's retirer would have kept it all year: the year's ended
    # aggregates out of it, below the floor (the archive mirrored the fill as it came)
    saved = time.perf_counter()
    print(f"checkpoints saved in {saved - folded:.1f} s", flush=True)
    while await archive.archived_upto(nc.jetstream(), "VIRT") < last:  # noqa: ASYNC110
        await asyncio.sleep(0.5)
    mirrored = time.perf_counter()
    print(f"archive caught up {mirrored - saved:.1f} s later", flush=True)
    retirer = retire.Retirer(store, retire.ClusterViews(lambda: views), pace=0.0)
    await retirer.start()  # the recorded floor and the log's trimming
    await retirer.stop()  # its rounds are driven here
    await retirer.round()
    while retirer.behind:  # a year's way, a floor move at a time
        await retirer.round()
    retired = time.perf_counter()
    print(
        f"year's hot log: {retirer.retired} ended aggregates purged in {retired - mirrored:.1f} s",
        flush=True,
    )
    # and the index the upkeep kept as the events came
    indexer = Indexer(store, pace=0.0)
    await indexer.start()
    try:
        while indexer.upto < last:  # noqa: ASYNC110
            await asyncio.sleep(0.5)
    finally:
        await indexer.stop()
    print(f"index caught up in {time.perf_counter() - retired:.1f} s", flush=True)
    return time.perf_counter() - started


async def settled(up: Up, last: int, timeout: float) -> float:
    """Seconds until every service has a checkpoint covering the year and the hot log's
    floor has moved past the year's ended aggregates (a code without either: at once)."""
    started = time.monotonic()
    nc = await connect(up.nats_url, up.data_dir)
    try:
        js = nc.jetstream()
        try:
            kv = JsBucket(await js.key_value(checkpoints.BUCKET))
        except Exception:
            return 0.0
        # the api's views are saved every 10,000 events (and a minute while events come)
        names = {"virt-controller": last, "virt-handler-node-1": last}
        names[checkpoints.API_VIEWS] = last - 10_000
        previous = -1
        while time.monotonic() - started < timeout:
            try:
                heads = {n: await checkpoints.head(kv, n) for n in names}
                floor = await archive.read_floor(js, "VIRT")
                hot = (await js.stream_info("VIRT")).state.messages
            except (TimeoutError, nats.errors.Error):  # a busy server: ask again
                await asyncio.sleep(5.0)
                continue
            # and the retirer done with what the first start found: the hot log has
            # stopped shrinking
            if (
                all(h is not None and h.last_seq >= names[n] for n, h in heads.items())
                and floor >= last - 2 * retire.WINDOW
                and hot == previous
            ):
                return time.monotonic() - started
            previous = hot
            await asyncio.sleep(5.0)
    finally:
        await nc.close()
    return time.monotonic() - started


async def run_size(total: int, nodes: int, keep: bool) -> dict[str, float]:
    root = Path(tempfile.mkdtemp(prefix="vs-hist-"))
    data_dir = root / "d"
    result: dict[str, float] = {"events_requested": total}
    up = start_up(data_dir, nodes, "64Gi", 64)
    try:
        await wait_ready(up, nodes)
        async with httpx.AsyncClient(
            **credentials.httpx_options(up.api, wait=60), timeout=10
        ) as http:
            await lifecycle(http, TEMPLATE)
        nc = await connect(up.nats_url, data_dir)
        try:
            template = Template(await template_events(JetStreamStore(nc, StreamSettings())))
        finally:
            await nc.close()
        result["template_events"] = len(template)
    finally:
        up.stop()
    print(f"template: {len(template)} events of one lifecycle", flush=True)

    # the year, appended with the services down (they would decide on half-copied lives)
    # without an fsync per event: the services' own server fsyncs every write again
    conf = root / "fill-nats.conf"
    text = (data_dir / "nats" / "nats-server.conf").read_text()
    conf.write_text(text.replace('sync_interval: "always"', 'sync_interval: "2m"'))
    server = subprocess.Popen(  # noqa: ASYNC220  (a benchmark: nothing else runs meanwhile)
        [find_binary(), "-c", str(conf), "-l", str(root / "fill-nats.log")],
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                nc = await connect(up.nats_url, data_dir)
                break
            except Exception:
                if time.monotonic() > deadline:
                    raise
                await asyncio.sleep(0.2)
        try:
            await archive.ensure(nc.jetstream(), "VIRT")
            last, rate, early, late = await fill(nc, "VIRT", template, total)
            await precreate_durables(nc, last, nodes)
            result["prebuild_checkpoints_s"] = await prebuild_checkpoints(nc, last, nodes)
        finally:
            await nc.close()
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(30)
    result["events"] = last
    result["fill_per_s"] = rate
    print(f"filled: {last} events ({rate:.0f}/s); early VM {early}, late {late}", flush=True)
    year = {"result": result, "early": early, "late": late, "nodes": nodes, "port": up.port}
    (root / KEPT).write_text(json.dumps({**year, "nats_port": up.nats_port}))
    return await measure(up, root, result, early, late, nodes, keep)


KEPT = "year.json"  # in a kept run's dir: what `--reuse` needs to measure it again


async def remeasure(root: Path, keep: bool) -> dict[str, float]:
    """The measurements again on a year a `--keep` run left (the fill and the checkpoints
    it prebuilt are not redone; what the first measurement appended stays in the log)."""
    year = json.loads((root / KEPT).read_text())
    up = Up(root / "d", year["port"], year["nats_port"], None)  # type: ignore[arg-type]
    result = {k: v for k, v in year["result"].items() if k in FILL_KEYS}
    return await measure(up, root, result, year["early"], year["late"], year["nodes"], keep)


FILL_KEYS = (
    "events_requested", "template_events", "events", "fill_per_s", "prebuild_checkpoints_s",
)  # fmt: skip


RESTART_ROUNDS = 5  # kills of each service; the median is the figure (one is noise here)


async def restarts(up: Up, result: dict[str, float], prefix: str = "") -> None:
    """kill -9 of each service in turn, to ready again, `RESTART_ROUNDS` times."""
    for name, key in RESTARTED:
        rounds = []
        for _ in range(RESTART_ROUNDS):
            await asyncio.sleep(2)
            took = await restart_to_ready(up, name)
            if took is None:
                break
            rounds.append(took)
        if len(rounds) < RESTART_ROUNDS:  # recorded as the timeout, marked as not reached
            result[f"{prefix}restart_{key}_s"] = RESTART_TIMEOUT
            result[f"{prefix}restart_{key}_timeout"] = 1
            print(f"{prefix}restart {name}: not ready {RESTART_TIMEOUT:.0f}s after kill -9")
            continue
        # from the kill: the first round's (the supervisor backs off on the next ones)
        since_kill = rounds[0][0]
        since_start = sorted(r[1] for r in rounds)[RESTART_ROUNDS // 2]
        result[f"{prefix}restart_{key}_s"] = since_start
        result[f"{prefix}restart_{key}_from_kill_s"] = since_kill
        print(
            f"{prefix}restart {name}: ready {since_start:.2f}s after its start "
            f"({since_kill:.2f}s after kill -9)",
            flush=True,
        )


async def floors(root: Path, nodes: int) -> dict[str, float]:
    """The same restarts on a fresh cluster (its log a few events long), measured in the
    same run: what a restart costs on this machine at this load, whatever the log."""
    data_dir = root / "floor" / "d"
    data_dir.parent.mkdir(parents=True, exist_ok=True)
    out: dict[str, float] = {}
    up = start_up(data_dir, nodes, "64Gi", 64)
    try:
        await wait_ready(up, nodes)
        await restarts(up, out, "floor_")
        with contextlib.suppress(SystemExit):
            await wait_ready(up, nodes, timeout=120)
    finally:
        up.stop()
    took = await cluster_restarts(up)
    if took is not None:
        out["floor_cluster_restart_vm_running_s"] = took
    shutil.rmtree(data_dir.parent, ignore_errors=True)
    return out


CLUSTER_ROUNDS = 3  # whole-cluster restarts; the median is the figure


async def cluster_restarts(up: Up) -> float | None:
    """`up` (stopped) started again on its data dir, to a new VM Running, `CLUSTER_ROUNDS`
    times; the median (None: one round never got there). Each VM has a name of its own:
    the previous round's was stopped, Halted, by `up`'s Ctrl-C."""
    rounds = []
    for _ in range(CLUSTER_ROUNDS):
        started = time.monotonic()
        up = start_again(up)
        try:
            name = f"after-restart-{uuid.uuid4().hex[:6]}"
            rounds.append(await new_vm_running(up, name, started))
        except SystemExit as e:
            print(f"whole-cluster restart: {e}")
            return None
        finally:
            up.stop()
    print(f"whole-cluster restarts: {', '.join(f'{r:.2f}s' for r in rounds)}", flush=True)
    return sorted(rounds)[CLUSTER_ROUNDS // 2]


async def measure(
    up: Up, root: Path, result: dict[str, float], early: str, late: str, nodes: int, keep: bool
) -> dict[str, float]:
    last = int(result["events"])
    data_dir = up.data_dir
    result.update(await floors(root, nodes))
    up = start_again(up)
    try:
        t = time.monotonic()
        await wait_ready(up, nodes, timeout=3600)
        result["first_start_ready_s"] = time.monotonic() - t
        result["settle_s"] = await settled(up, last, timeout=1200)
        print(
            f"first start: ready in {result['first_start_ready_s']:.0f}s, checkpoints "
            f"and the hot log's floor {result['settle_s']:.0f}s later",
            flush=True,
        )
        # the first start's catch-up, checkpoints and retirement leave the server compacting
        # for a while: restarts are measured on a cluster at rest, as the floor's are
        result["quiet_before_restarts_s"] = await quiet(up, timeout=300)
        print(f"quiet {result['quiet_before_restarts_s']:.1f}s after settling", flush=True)
        await restarts(up, result)
        with contextlib.suppress(SystemExit):  # a service that never came back: go on
            await wait_ready(up, nodes, timeout=120)
        result["quiet_s"] = await quiet(up)
        print(f"quiet {result['quiet_s']:.1f}s after the restarts", flush=True)
        result.update(await debug_figures(up, early, late))
        result["disk_bytes"] = du(data_dir / "nats")
        result["disk_bytes_per_event"] = result["disk_bytes"] / last
    finally:
        up.stop()
    # the whole cluster: up again, a new VM to Running
    took = await cluster_restarts(up)
    result["cluster_restart_vm_running_s"] = RESTART_TIMEOUT if took is None else took
    if took is None:
        result["cluster_restart_vm_running_timeout"] = 1
    if not keep:
        shutil.rmtree(root, ignore_errors=True)
    else:
        print(f"kept: {root}")
    return result


def start_again(up: Up) -> Up:
    """`up` on the same data dir and ports (the credentials and the store are there)."""
    proc = subprocess.Popen(
        [*start_cmd(up)],
        cwd=REPO,
        stdout=open(up.data_dir.parent / "up-again.log", "ab"),  # noqa: SIM115
        stderr=subprocess.STDOUT,
    )
    return Up(up.data_dir, up.port, up.nats_port, proc)


def start_cmd(up: Up) -> list[str]:
    return [
        sys.executable, "-m", "cli.main", "up", "--data-dir", str(up.data_dir),
        "--nodes", "2", "--port", str(up.port), "--nats-port", str(up.nats_port),
        "--node-memory", "64Gi", "--node-cpus", "64",
    ]  # fmt: skip


# ------------------------------------------------------------------- report
FIGURES = [
    ("restart_api_s", "api restart → ready", "s"),
    ("restart_controller_s", "controller restart → ready", "s"),
    ("restart_handler_s", "handler restart → ready", "s"),
    ("cluster_restart_vm_running_s", "whole cluster restart → new VM Running", "s"),
    ("floor_restart_api_s", "floor: api restart → ready, fresh cluster", "s"),
    ("floor_restart_controller_s", "floor: controller restart → ready, fresh cluster", "s"),
    ("floor_restart_handler_s", "floor: handler restart → ready, fresh cluster", "s"),
    ("floor_cluster_restart_vm_running_s", "floor: whole cluster restart, fresh cluster", "s"),
    ("why_first_s", "why (early VM), the first after the server's start", "s"),
    ("why_s", "why (early VM)", "s"),
    ("why_running_s", "why (early VM, at its VMI Running: through the archive)", "s"),
    ("replay_s", "replay (early VM)", "s"),
    ("get_at_early_s", "get --at (early VM, early point)", "s"),
    ("get_at_late_s", "get --at (kept VM, last point)", "s"),
    ("verify_s", "verify", "s"),
    ("whatif_s", "whatif, no change, the whole log", "s"),
    ("whatif_rebuild_s", "a rebuild of the views from the same log", "s"),
    ("disk_bytes_per_event", "disk bytes per event", "B"),
    ("stream_bytes", "event stream (hot) bytes", "B"),
]


def table(results: dict[str, dict[str, float]]) -> str:
    sizes = sorted(results, key=int)
    head = "| figure | " + " | ".join(f"{int(s):,} events" for s in sizes) + " |"
    lines = [head, "|---|" + "---|" * len(sizes)]
    for key, label, unit in FIGURES:
        cells = []
        for s in sizes:
            v = results[s].get(key)
            if v is None:
                cells.append("")
            elif v == FAILED:
                cells.append("failed (JetStream timed out)")
            elif results[s].get(key.removesuffix("_s") + "_timeout"):
                cells.append(f"> {v:.0f} s")
            elif unit == "s":
                cells.append(f"{v * 1000:.0f} ms" if v < 1 else f"{v:.2f} s")
            else:
                cells.append(f"{v / 1e6:.1f} MB" if v >= 1e6 else f"{v:.0f} B")
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def plot(results: dict[str, dict[str, float]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sizes = sorted(results, key=int)
    xs = [results[s].get("events", int(s)) for s in sizes]
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(13, 5))
    for key, label, unit in FIGURES:
        if unit != "s":
            continue
        ys = [results[s].get(key) for s in sizes]
        pts = [(x, y) for x, y in zip(xs, ys, strict=True) if y is not None and y > 0]
        if pts:
            ax1.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=label)
    ax1.set_xscale("log")
    ax1.set_yscale("log")
    ax1.set_xlabel("events in the log")
    ax1.set_ylabel("seconds")
    ax1.set_title("restarts and debugging against the log's age")
    ax1.grid(True, which="both", alpha=0.3)
    ax1.legend(fontsize=7)
    for key, label in (("stream_bytes", "event stream (hot)"), ("disk_bytes", "store dir")):
        ys = [results[s].get(key) for s in sizes]
        pts = [(x, y / 1e6) for x, y in zip(xs, ys, strict=True) if y is not None]
        if pts:
            ax2.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=label)
    ax2.set_xscale("log")
    ax2.set_yscale("log")
    ax2.set_xlabel("events in the log")
    ax2.set_ylabel("MB")
    ax2.set_title("storage")
    ax2.grid(True, which="both", alpha=0.3)
    ax2.legend(fontsize=7)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=90)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--events", type=int, action="append", help="log size (repeatable)")
    ap.add_argument("--nodes", type=int, default=2)
    ap.add_argument("--results", type=Path, default=REPO / "docs" / "perf" / "history.json")
    ap.add_argument("--plot", type=Path, default=REPO / "docs" / "perf" / "history.png")
    ap.add_argument("--keep", action="store_true", help="keep the data dir")
    ap.add_argument(
        "--no-compression-cost",
        action="store_true",
        help="skip what S2 costs (two scratch mirrors of the whole archive)",
    )
    ap.add_argument(
        "--no-verify",
        action="store_true",
        help="skip `verify` (its first run folds the whole archive: ~12 min at 5M here)",
    )
    ap.add_argument(
        "--whatif",
        action="store_true",
        help="time `whatif` over the whole log against a rebuild of the views",
    )
    ap.add_argument(
        "--reuse",
        type=Path,
        help="measure again on the year a --keep run left in this dir (no fill; kept)",
    )
    a = ap.parse_args()
    global COMPRESSION_COST, FULL_VERIFY, WHATIF
    COMPRESSION_COST = not a.no_compression_cost
    FULL_VERIFY = not a.no_verify
    WHATIF = a.whatif
    results: dict[str, dict[str, float]] = {}
    with contextlib.suppress(OSError, ValueError):
        results = json.loads(a.results.read_text())
    runs: list[tuple[int, Callable[[], Coroutine[Any, Any, dict[str, float]]]]] = [
        (n, functools.partial(run_size, n, a.nodes, a.keep)) for n in a.events or [100_000]
    ]
    if a.reuse is not None:
        year = json.loads((a.reuse / KEPT).read_text())
        n = int(year["result"]["events_requested"])
        runs = [(n, functools.partial(remeasure, a.reuse, True))]
    for n, run in runs:
        r = asyncio.run(run())
        results[str(n)] = r
        a.results.parent.mkdir(parents=True, exist_ok=True)
        a.results.write_text(json.dumps(results, indent=1, sort_keys=True))
        for k, v in sorted(r.items()):
            print(f"  {k}: {v:.4g}")
    print(table(results))
    plot(results, a.plot)
    print(f"plot: {a.plot}")


if __name__ == "__main__":
    main()
