"""virt-handler's part of live migration: the target prepares, the source transfers.

State (`MigrationState`) is folded from the migration events ROUTED to this node (meta.node),
so a restarted handler rebuilds exactly what it had; events it appended for another node
(TargetPrepared → source, MigrationSucceeded/Aborted → target) are not folded here.

Target (MigrationScheduled routed here): TargetPreparing, spawn the target launcher (test
mode: a normal launcher, Start(paused=True); qemu mode: `migration_target=True`, it waits
for the incoming domain) → TargetPrepared(address) routed to the SOURCE. The target never
reports LauncherStarted/DomainStarted on the VMI (the VMI is Running on the source; those
would move it back to Scheduled). MigrationSucceeded (routed here) turns the job into an
ordinary VMIRecord (`migrated_in`): test mode resumes the domain; from then on the planner
reports the VMI's domain events from this node, first DomainMigratedIn (the target QEMU's
pid and domain type, no phase change). MigrationFailed/Aborted → destroy the
target launcher. The target launcher dying first → MigrationFailed("Target pod is down")
routed to the source.

Source (TargetPrepared routed here): MigrationStarted with OCC on the migration aggregate
(the controller's abort/fail is OCC too: exactly one of them wins), then the transfer —
test mode: `migration_sim` (SIMULATED: progress from guest memory and bandwidth), qemu
mode: MigrateTo to the launcher, its MigrationProgress relayed — then the handoff: source
pauses (test), MigrationSucceeded routed to the target, DomainStopped(Migrated) +
LauncherExited(source pod) on the VMI. An abort (MigrationAbortRequested routed here), a
MigrationFailed routed here or a timeout stop it: MigrationAborted routed to the target,
the VM keeps running on the source.

While a job is active the VMI key is OWNED here: `plan()` is not consulted for it (the
source's handoff pause/stop and the target's paused, not-yet-ours domain are not VMI
events). Event ids are `virt-handler-<node>/<migration uid>/<what>[/<n>]`.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Coroutine
from typing import TYPE_CHECKING, Any

import msgspec

from events.catalog import (
    DomainStopped,
    Event,
    LauncherExited,
    Manifest,
    MigrationAborted,
    MigrationAbortRequested,
    MigrationFailed,
    MigrationProgressed,
    MigrationScheduled,
    MigrationSettings,
    MigrationStarted,
    MigrationSucceeded,
    StopReason,
    TargetPrepared,
    TargetPreparing,
)
from events.envelope import ConcurrencyConflict, Stored
from events.meta import Actor, Aggregate, Kind, Meta
from projections.evolve import evolve_migration
from projections.views import MigrationView
from services.handler import migration_sim as sim
from services.handler.planner import Append, Observed, Send, service_name
from services.handler.state import NodeState, VMIRecord
from services.launcher.client import LauncherGone
from services.launcher.domain_state import DomainState
from services.launcher.domain_xml import DomainType
from services.launcher.protocol import (
    AbortMigration,
    MigrateTo,
    MigrationProgress,
    MigrationResult,
    Pause,
    Resume,
    Shutdown,
    Start,
)

if TYPE_CHECKING:
    from services.handler.service import Handler

TARGET_POD_DOWN = "Target pod is down"
ABORTED_BY_USER = "Migration aborted by user"
SOURCE_GONE = "Source virt-launcher exited during the migration"
# qemu mode: a target launcher that exits because the source aborted is not "down"; wait
# this long for the source's MigrationAborted before calling it so
TARGET_GONE_GRACE = 2.0


# ---------------------------------------------------------------- folded state
class TargetJob(msgspec.Struct, kw_only=True):
    """This node is the migration's target (MigrationScheduled routed here)."""

    migration: Aggregate
    vmi_key: str
    vmi_uid: str
    source_node: str
    target_pod_uid: str
    manifest: Manifest
    settings: MigrationSettings
    correlation_id: str = ""
    causation_id: str = ""
    preparing: bool = False  # TargetPreparing
    outcome: str = ""  # "" | "succeeded" | "failed" (routed here by the source/controller)
    # in memory only (their events are routed away; re-appending them is a duplicate)
    prepared_sent: bool = False
    failure_sent: bool = False
    gone_since: float | None = None


class SourceJob(msgspec.Struct, kw_only=True):
    """This node is the migration's source (TargetPrepared routed here)."""

    migration: Aggregate
    target_node: str
    target_address: str
    target_pod_uid: str
    correlation_id: str = ""
    causation_id: str = ""
    started: bool = False  # MigrationStarted
    progress_events: int = 0
    abort_requested: bool = False
    failure: str = ""  # a MigrationFailed routed here while Running: its reason
    ended: bool = False  # in memory: the task finished with it


class MigrationState(msgspec.Struct, kw_only=True):
    targets: dict[str, TargetJob] = msgspec.field(default_factory=dict)  # by VMI key
    sources: dict[str, SourceJob] = msgspec.field(default_factory=dict)  # by migration key


def _key(agg: Aggregate) -> str:
    return f"{agg.namespace}/{agg.name}"


def fold(ms: MigrationState, records: NodeState, event: Event, node: str) -> str | None:
    """Fold one migration event into the state (mutates). Only events routed to `node`
    count. Returns the VMI key of a target job it touched, else None."""
    agg = event.meta.aggregate
    if agg.kind is not Kind.MIGRATION or event.meta.node != node:
        return None
    corr, caus = event.meta.correlation_id, event.meta.event_id
    mkey = _key(agg)
    match event:
        case MigrationScheduled():
            vkey = f"{agg.namespace}/{event.vmi_name}"
            old = ms.targets.get(vkey)
            if old is not None and old.migration.uid == agg.uid and agg.uid:
                return vkey  # redelivered
            ms.targets[vkey] = TargetJob(
                migration=agg,
                vmi_key=vkey,
                vmi_uid=event.vmi_uid,
                source_node=event.source_node,
                target_pod_uid=event.target_pod_uid,
                manifest=event.manifest,
                settings=event.settings,
                correlation_id=corr,
                causation_id=caus,
            )
            return vkey
        case TargetPrepared():
            src = ms.sources.get(mkey)
            if src is None or src.migration.uid != agg.uid:
                ms.sources[mkey] = SourceJob(
                    migration=agg,
                    target_node=event.target_node,
                    target_address=event.target_address,
                    target_pod_uid=event.target_pod_uid,
                    correlation_id=corr,
                    causation_id=caus,
                )
            return None
    target = _target_of(ms, agg)
    if target is not None:
        match event:
            case TargetPreparing():
                target.preparing = True
            case MigrationSucceeded():
                if target.outcome != "succeeded":
                    target.outcome = "succeeded"
                    ns, name = target.vmi_key.split("/", 1)
                    records[target.vmi_key] = VMIRecord(
                        namespace=ns,
                        name=name,
                        uid=target.vmi_uid,
                        pod_uid=target.target_pod_uid,
                        manifest_json=msgspec.json.encode(target.manifest),
                        started=True,
                        migrated_in=True,
                        id_scope=target.target_pod_uid,
                        correlation_id=corr,
                        causation_id=caus,
                    )
            case MigrationFailed() | MigrationAborted():
                if target.outcome == "":
                    target.outcome = "failed"
        return target.vmi_key
    src = ms.sources.get(mkey)
    if src is not None and (not agg.uid or src.migration.uid in ("", agg.uid)):
        match event:
            case MigrationStarted():
                src.started = True
            case MigrationProgressed():
                src.progress_events += 1
            case MigrationAbortRequested():
                src.abort_requested = True
            case MigrationFailed(reason=reason, message=message):
                src.failure = message or reason
    return None


def _target_of(ms: MigrationState, agg: Aggregate) -> TargetJob | None:
    for job in ms.targets.values():
        m = job.migration
        if (
            m.namespace == agg.namespace
            and m.name == agg.name
            and (not agg.uid or not m.uid or m.uid == agg.uid)
        ):
            return job
    return None


def migration_meta(
    migration: Aggregate,
    node: str,
    what: str,
    route: str,
    now: float,
    correlation_id: str = "",
    causation_id: str = "",
    aggregate: Aggregate | None = None,
) -> Meta:
    """`virt-handler-<node>/<migration uid>/<what>`, routed to `route`."""
    name = service_name(node)
    return Meta(
        event_id=f"{name}/{migration.uid or _key(migration)}/{what}",
        aggregate=aggregate or migration,
        occurred_at=now,
        correlation_id=correlation_id or f"{name}/{migration.uid}",
        causation_id=causation_id,
        actor=Actor(service=name, node=node),
        node=route,
    )


# ---------------------------------------------------------------- target planning (pure)
class SpawnTarget(msgspec.Struct, frozen=True):
    key: str


class Forget(msgspec.Struct, frozen=True):
    """The job is over here: drop it (and the launcher's bookkeeping once it is gone)."""

    key: str


TargetAction = Append | Send | SpawnTarget | Forget


def plan_target(
    job: TargetJob,
    o: Observed | None,
    node: str,
    qemu: bool,
    address: str,
    now: float,
) -> list[TargetAction]:
    """The target side of one migration, level-triggered from the job and the launcher."""
    m = job.migration

    def meta(what: str, route: str) -> Meta:
        return migration_meta(m, node, what, route, now, job.correlation_id, job.causation_id)

    if o is not None and o.uid != job.vmi_uid:
        return []  # an older VMI's launcher of the same name: the planner's orphan, not ours
    if job.outcome == "failed":
        if o is None or o.gone:
            return [Forget(job.vmi_key)]
        if o.connected and o.shutdown_grace != 0 and o.final is None:
            return [Send(job.vmi_key, Shutdown(grace_period_seconds=0))]
        return []
    if job.outcome == "succeeded":
        if o is None or o.gone:
            return [Forget(job.vmi_key)]  # the planner reports the launcher gone
        s = o.status
        if s is not None and s.state is DomainState.PAUSED and o.connected and not o.in_flight:
            return [Send(job.vmi_key, Resume())] if not qemu else []
        if s is not None and s.state is DomainState.RUNNING:
            return [Forget(job.vmi_key)]  # ours now: the planner takes over
        return []
    out: list[TargetAction] = []
    if not job.preparing:
        out.append(Append(TargetPreparing(meta=meta("TargetPreparing", node), target_node=node)))
    if o is None:
        if job.preparing and not job.failure_sent:
            # spawned before (TargetPreparing is appended first) and gone while unobserved
            out.append(_target_down(job, node, now))
        elif not job.preparing:
            out.append(SpawnTarget(job.vmi_key))
        return out
    if o.spawning:
        return out
    if o.gone or o.final is not None:
        if not job.failure_sent and (not qemu or _grace_over(job, now)):
            out.append(_target_down(job, node, now))
        return out
    s = o.status
    ready = False
    if qemu:
        ready = o.connected
    elif s is not None:
        if s.state is DomainState.SHUTOFF and not o.start_sent and o.connected:
            out.append(Send(job.vmi_key, Start(paused=True)))
        ready = s.state is DomainState.PAUSED
    if ready and not job.prepared_sent:
        out.append(
            Append(
                TargetPrepared(
                    meta=meta("TargetPrepared", job.source_node),
                    target_node=node,
                    target_address=address,
                    target_pod_uid=job.target_pod_uid,
                )
            )
        )
    return out


def _grace_over(job: TargetJob, now: float) -> bool:
    if job.gone_since is None:
        job.gone_since = now
    return now - job.gone_since >= TARGET_GONE_GRACE


def _target_down(job: TargetJob, node: str, now: float) -> Append:
    meta = migration_meta(
        job.migration, node, "TargetPodDown", job.source_node, now, job.correlation_id
    )
    return Append(MigrationFailed(meta=meta, reason="TargetPodDown", message=TARGET_POD_DOWN))


# ---------------------------------------------------------------- the shell's part
class MigrationDriver:
    """Runs the jobs for one Handler: target planning on events/reports/ticks, one task per
    source job (the transfer or the relay of the launcher's)."""

    def __init__(self, handler: Handler) -> None:
        self.h = handler
        self.state = MigrationState()
        self.owned: dict[str, str] = {}  # VMI key → migration key of the running source job
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._wake: dict[str, asyncio.Event] = {}
        self.started = False  # source jobs run once the launchers are re-attached

    @property
    def qemu(self) -> bool:
        return self.h.cfg.launch.domain_type is not DomainType.TEST

    # -------------------------------------------------------------- hooks
    def fold(self, event: Event) -> None:
        vkey = fold(self.state, self.h.records, event, self.h.node)
        if vkey is not None:
            self.h._kick(vkey)
        agg = event.meta.aggregate
        if agg.kind is Kind.MIGRATION and event.meta.node == self.h.node:
            mkey = _key(agg)
            if mkey in self.state.sources:
                if isinstance(event, TargetPrepared) and self.started:
                    self._ensure_source_task(mkey)
                elif (wake := self._wake.get(mkey)) is not None:
                    wake.set()

    def owns(self, key: str) -> bool:
        return key in self.owned or key in self.state.targets

    async def reconcile(self, key: str) -> bool:
        """Called by the handler before planning `key`: True when a migration owns it."""
        if key in self.owned:
            return True
        job = self.state.targets.get(key)
        if job is None:
            return False
        for _ in range(8):
            o = self.h.observed.get(key)
            actions = plan_target(job, o, self.h.node, self.qemu, self._address(key), time.time())
            if not actions:
                break
            for action in actions:
                match action:
                    case Append(event=event):
                        await self.h._append(event)
                        if isinstance(event, TargetPrepared):
                            job.prepared_sent = True
                        elif isinstance(event, MigrationFailed):
                            job.failure_sent = True
                    case Send(key=k, command=command):
                        await self.h._send(k, command)
                    case SpawnTarget(key=k):
                        await self._spawn_target(job)
                    case Forget(key=k):
                        del self.state.targets[k]
                        return False  # the planner decides from here on
        return True

    async def start(self) -> None:
        """After the catch-up and re-attach: the target jobs' first plans, and resume the
        source jobs a previous incarnation left."""
        self.started = True
        async with self.h._lock:
            for key in list(self.state.targets):
                await self.h._reconcile(key)
        for mkey, job in list(self.state.sources.items()):
            if not job.ended:
                self._ensure_source_task(mkey)

    async def tick(self) -> None:
        for key in list(self.state.targets):
            await self.h._reconcile(key)

    # -------------------------------------------------------------- target
    def _address(self, key: str) -> str:
        if self.qemu:
            client = self.h.clients.get(key)
            if client is not None and client.hello.hypervisor_uri:
                return client.hello.hypervisor_uri
            return self.h.cfg.launch.hypervisor_uri
        return self.h.cfg.node.address

    async def _spawn_target(self, job: TargetJob) -> None:
        from services.launcher.client import LauncherClient
        from services.launcher.zygote import spawn_launcher

        key = job.vmi_key
        self.h.observed[key] = Observed(uid=job.vmi_uid, spawning=True)
        manifest = dict(job.manifest)
        md = dict(manifest.get("metadata") or {})
        ns, name = key.split("/", 1)
        md.setdefault("namespace", ns)
        md.setdefault("name", name)
        md["uid"] = job.vmi_uid
        manifest["metadata"] = md
        sock = self.h._socket_path(key)
        try:
            pid = await asyncio.to_thread(
                spawn_launcher,
                self.h.zygote_socket,
                msgspec.json.encode(manifest),
                sock,
                migration_target=self.qemu,
                **self.h.cfg.launch.spawn_kwargs(),  # type: ignore[arg-type]
            )
            client = await LauncherClient.connect(sock, timeout=10.0)
        except Exception as e:
            self.h.log.error("target launcher spawn failed", key=key, error=repr(e))
            o = self.h.observed[key]
            o.spawning, o.gone = False, True
            return
        self.h.log.info("target launcher spawned", key=key, pid=pid)
        self.h._attach(key, client)

    # -------------------------------------------------------------- source
    def _ensure_source_task(self, mkey: str) -> None:
        task = self._tasks.get(mkey)
        if task is not None and not task.done():
            return
        self._wake.setdefault(mkey, asyncio.Event())
        t = asyncio.get_running_loop().create_task(self._guard(mkey, self._run_source(mkey)))
        self._tasks[mkey] = t

    async def _guard(self, mkey: str, coro: Coroutine[Any, Any, None]) -> None:
        try:
            await coro
        except asyncio.CancelledError:
            raise
        except Exception as e:  # logged; the next TargetPrepared/restart resumes the job
            self.h.log.error("source migration job failed", migration=mkey, error=repr(e))
        finally:
            vkeys = [k for k, m in self.owned.items() if m == mkey]
            for k in vkeys:
                del self.owned[k]
                self.h._kick(k)

    async def _load(self, agg: Aggregate) -> tuple[MigrationView | None, MigrationScheduled | None]:
        assert self.h.store is not None
        view: MigrationView | None = None
        scheduled: MigrationScheduled | None = None
        for s in await self.h.store.load(Aggregate(Kind.MIGRATION, agg.namespace, agg.name)):
            view = evolve_migration(view, s)
            if isinstance(s.event, MigrationScheduled):
                scheduled = s.event
        if view is not None and agg.uid and view.uid and view.uid != agg.uid:
            return None, None  # a newer migration of the same name
        return view, scheduled

    def _meta(self, job: SourceJob, what: str, route: str) -> Meta:
        return migration_meta(
            job.migration,
            self.h.node,
            what,
            route,
            time.time(),
            job.correlation_id,
            job.causation_id,
        )

    async def _run_source(self, mkey: str) -> None:
        job = self.state.sources[mkey]
        node = self.h.node
        while True:
            view, scheduled = await self._load(job.migration)
            if view is None or scheduled is None or view.final or view.source_node != node:
                job.ended = True
                if view is not None and view.final:
                    await self._resume_if_paused(f"{view.namespace}/{view.vmi_name}")
                return
            vkey = f"{view.namespace}/{view.vmi_name}"
            r = self.h.records.get(vkey)
            o = self.h.observed.get(vkey)
            if r is None or r.uid != view.vmi_uid or r.stopped or o is None or o.gone:
                self.h.log.warning("migration source has no running VMI", migration=mkey)
                if view.phase == "Running":
                    await self._aborted(job, SOURCE_GONE)
                job.ended = True
                return
            if view.phase == "TargetReady":
                if view.abort_requested:
                    job.ended = True
                    return  # the controller fails it (routed to the target)
                started = MigrationStarted(meta=self._meta(job, "MigrationStarted", node))
                try:
                    await self._append_occ(started, view.version)
                except ConcurrencyConflict:
                    continue  # the controller got there first: decide again
                continue
            if view.phase != "Running":
                job.ended = True
                return
            self.owned[vkey] = mkey
            if self.qemu:
                await self._relay(job, view, scheduled, vkey)
            else:
                await self._simulate(job, view, scheduled, vkey)
            job.ended = True
            return

    async def _append_occ(self, event: Event, expected: int) -> None:
        assert self.h.store is not None
        ack = await self.h.store.append(event, expected=expected)
        self.h._fold(Stored(seq=ack.seq, subject="", time=event.meta.occurred_at, event=event))

    def _stop_reason(self, job: SourceJob) -> str | None:
        if job.failure:
            return job.failure
        if job.abort_requested:
            return ABORTED_BY_USER
        return None

    async def _simulate(
        self, job: SourceJob, view: MigrationView, scheduled: MigrationScheduled, vkey: str
    ) -> None:
        """Test mode: a SIMULATED transfer (no memory moves; the numbers are synthetic)."""
        wake = self._wake[_key(job.migration)]
        t = sim.begin(
            view.uid, scheduled.manifest, scheduled.settings, view.start_timestamp or time.time()
        )
        while True:
            reason = self._stop_reason(job)
            o = self.h.observed.get(vkey)
            if reason is None and (o is None or o.gone or o.final is not None):
                reason = SOURCE_GONE
            if reason is not None:
                await self._aborted(job, reason)
                return
            step = sim.step(t, time.time())
            match step:
                case sim.Done():
                    await self._progressed(job, t.total, 0, t.total)  # the last of it
                    await self._handoff(job, vkey)
                    return
                case sim.TimedOut(reason=why):
                    await self._aborted(job, why)
                    return
                case sim.Progress():
                    await self._progressed(job, step.processed, step.remaining, step.total)
            wake.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(wake.wait(), max(0.01, sim.next_wakeup(t, time.time())))

    async def _progressed(self, job: SourceJob, processed: int, remaining: int, total: int) -> None:
        n = job.progress_events + 1
        await self.h._append(
            MigrationProgressed(
                meta=self._meta(job, f"MigrationProgressed/{n}", self.h.node),
                data_processed_bytes=processed,
                data_remaining_bytes=remaining,
                data_total_bytes=total,
            )
        )

    async def _aborted(self, job: SourceJob, reason: str) -> None:
        """The VM stays here: tell the target to clean up, resume if the handoff paused."""
        await self.h._append(
            MigrationAborted(
                meta=self._meta(job, "MigrationAborted", job.target_node), reason=reason
            )
        )
        view, _ = await self._load(job.migration)
        if view is not None:
            await self._resume_if_paused(f"{view.namespace}/{view.vmi_name}")

    async def _resume_if_paused(self, vkey: str) -> None:
        r, o = self.h.records.get(vkey), self.h.observed.get(vkey)
        if r is None or o is None or not o.connected or r.stopped or o.status is None:
            return
        if o.status.state is DomainState.PAUSED and not r.paused and r.want_paused is not True:
            await self.h._send(vkey, Resume())

    async def _handoff(self, job: SourceJob, vkey: str) -> None:
        """Test mode: pause here, the target takes over, destroy here."""
        async with self.h._lock:
            if self._stop_reason(job) is not None:
                await self._aborted(job, self._stop_reason(job) or "")
                return
            await self.h._send(vkey, Pause())
            await self._succeeded(job)
            await self._source_stopped(job, vkey)
            await self.h._send(vkey, Shutdown(grace_period_seconds=0))
        await self._source_exited(job, vkey)

    async def _succeeded(self, job: SourceJob) -> None:
        await self.h._append(
            MigrationSucceeded(
                meta=self._meta(job, "MigrationSucceeded", job.target_node),
                target_node=job.target_node,
                target_pod_uid=job.target_pod_uid,
            )
        )

    async def _source_stopped(self, job: SourceJob, vkey: str) -> None:
        r = self.h.records[vkey]
        vmi = Aggregate(Kind.VMI, r.namespace, r.name, r.uid)
        meta = migration_meta(
            job.migration,
            self.h.node,
            "DomainStopped",
            self.h.node,
            time.time(),
            job.correlation_id,
            job.causation_id,
            aggregate=vmi,
        )
        await self.h._append(
            DomainStopped(meta=meta, reason=StopReason.MIGRATED, message="migrated away")
        )

    async def _source_exited(self, job: SourceJob, vkey: str) -> None:
        """Wait for the source launcher to go, then LauncherExited(source pod)."""
        deadline = time.monotonic() + 15.0
        while time.monotonic() < deadline:
            o = self.h.observed.get(vkey)
            if o is None or o.gone:
                break
            await asyncio.sleep(0.02)
        r = self.h.records[vkey]
        vmi = Aggregate(Kind.VMI, r.namespace, r.name, r.uid)
        meta = migration_meta(
            job.migration,
            self.h.node,
            "LauncherExited",
            self.h.node,
            time.time(),
            job.correlation_id,
            job.causation_id,
            aggregate=vmi,
        )
        async with self.h._lock:
            await self.h._append(LauncherExited(meta=meta, node=self.h.node, pod_uid=r.pod_uid))

    async def _relay(
        self, job: SourceJob, view: MigrationView, scheduled: MigrationScheduled, vkey: str
    ) -> None:
        """qemu mode: the launcher migrates; relay its reports."""
        client = self.h.clients.get(vkey)
        if client is None:
            await self._aborted(job, SOURCE_GONE)
            return
        s = scheduled.settings
        result = await client.call(
            MigrateTo(
                migration_uid=view.uid,
                target_uri=job.target_address or view.target_address,
                bandwidth_bytes_per_second=s.bandwidth_bytes_per_second,
                allow_auto_converge=s.allow_auto_converge,
                allow_post_copy=s.allow_post_copy,
                completion_timeout_per_gib=s.completion_timeout_per_gib,
                progress_timeout_seconds=s.progress_timeout,
            ),
            timeout=10.0,
        )
        if not result.ok and result.error != "a migration is already running":
            await self._aborted(job, f"Live migration failed: {result.error}")
            return
        wake = self._wake[_key(job.migration)]
        abort_sent = False
        last_report = 0.0
        while True:
            if not abort_sent and self._stop_reason(job) is not None:
                abort_sent = True
                with contextlib.suppress(LauncherGone, TimeoutError, ConnectionError):
                    await client.call(AbortMigration(), timeout=10.0)
            report_task = asyncio.ensure_future(client.next_migration_report())
            wake_task = asyncio.ensure_future(wake.wait())
            try:
                await asyncio.wait(
                    {report_task, wake_task}, return_when=asyncio.FIRST_COMPLETED, timeout=5.0
                )
            finally:
                wake_task.cancel()
                wake.clear()
            if not report_task.done():
                report_task.cancel()
                continue
            try:
                report = report_task.result()
            except LauncherGone:
                await self._aborted(job, self._stop_reason(job) or SOURCE_GONE)
                return
            match report:
                case MigrationProgress() if report.migration_uid in ("", view.uid):
                    now = time.monotonic()
                    if now - last_report >= 1 / sim.REPORTS_PER_SECOND:
                        last_report = now
                        await self._progressed(
                            job, report.processed, report.remaining, report.total
                        )
                case MigrationResult(ok=True):
                    await self._succeeded(job)
                    await self._qemu_source_done(job, vkey)
                    return
                case MigrationResult(error=error):
                    await self._aborted(
                        job, self._stop_reason(job) or _kubevirt_wording(error or "")
                    )
                    return

    async def _qemu_source_done(self, job: SourceJob, vkey: str) -> None:
        """The launcher's final Shutoff/Migrated follows the result; then it exits."""
        deadline = time.monotonic() + 15.0
        while time.monotonic() < deadline:
            o = self.h.observed.get(vkey)
            if o is None or o.final is not None or o.gone:
                break
            await asyncio.sleep(0.02)
        async with self.h._lock:
            await self._source_stopped(job, vkey)
        await self._source_exited(job, vkey)


def _kubevirt_wording(error: str) -> str:
    """The launcher's abort reasons in KubeVirt's words."""
    if "progressTimeout" in error:
        n = error.split("for ", 1)[-1].split("s", 1)[0]
        return f"Live migration stuck for {n} sec and has been aborted"
    if "completionTimeoutPerGiB" in error:
        return f"Live migration is not completed in time and has been aborted ({error})"
    return f"Live migration failed: {error}" if error else "Live migration failed"
