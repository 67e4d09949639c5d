"""Live migrations, virt-controller's part: admit, queue, place the target, fail.

Level-triggered over every non-final migration, oldest first (FIFO by creation):

- Pending: the VMI must exist, be Running, not be deleted, be live-migratable, and have no
  other migration ahead of it ("VMI is not eligible for migration because another migration
  job is in progress."), else MigrationFailed. Then the parallel limits: at most
  `parallel_migrations_per_cluster` migrations past Pending, at most
  `parallel_outbound_migrations_per_node` leaving one node; the rest get MigrationPending
  with the reason once and wait. Admitted: MigrationScheduling (source node/pod).
- Scheduling: the target is placed like any launcher pod (scheduler.place) but never on the
  source node and with spec.addedNodeSelector; MigrationScheduled goes to the TARGET node
  (its handler prepares the target launcher) with the effective settings (policy.py). No
  target fits: retried on every pass, failed after `unschedulable_timeout`.
- Scheduled..TargetReady: an abort (the migration was deleted), a dead target node or a
  VMI that stopped/went away fail it, routed to the target (its handler removes the target
  launcher). Running: the same failures are routed to the source (its handler stops the
  transfer and tells the target with MigrationAborted); an abort request is relayed to the
  source unless the api already routed it there.

The source side enforces progressTimeout and completionTimeoutPerGiB itself (it has the
progress at hand; the qemu launcher's MigrateTo takes both): the controller does not time a
Running migration."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

from events.catalog import (
    Event,
    MigrationAbortRequested,
    MigrationFailed,
    MigrationPending,
    MigrationScheduled,
    MigrationScheduling,
)
from events.envelope import Context
from events.meta import Aggregate, Kind
from projections.cluster import Cluster, key
from projections.migratability import live_migratable
from projections.views import MigrationView, VMIView
from services.controller import emit, scheduler
from services.controller.policy import MigrationConfig, effective_settings
from services.controller.scheduler import NoFit, Placement, Reserved
from services.controller.state import ControllerState

IN_PROGRESS = "VMI is not eligible for migration because another migration job is in progress."
TARGET_POD_DOWN = "Target pod is down"
ABORTED = "Migration aborted: the migration object was deleted"

# phases in which only the target holds something (its launcher) to clean up
TARGET_PHASES = ("Scheduled", "PreparingTarget", "TargetReady")


def order(mig: MigrationView) -> tuple[float, str, str]:
    return (mig.created_at, mig.namespace, mig.name)


def migration_aggregate(mig: MigrationView) -> Aggregate:
    return Aggregate(kind=Kind.MIGRATION, namespace=mig.namespace, name=mig.name, uid=mig.uid)


def vmi_of(cluster: Cluster, mig: MigrationView) -> VMIView | None:
    vmi = cluster.vmis.get(key(mig.namespace, mig.vmi_name))
    if vmi is None or (mig.vmi_uid and vmi.uid != mig.vmi_uid):
        return None  # gone, or a newer VMI of the same name
    return vmi


def added_node_selector(mig: MigrationView) -> dict[str, str]:
    return dict((mig.manifest.get("spec") or {}).get("addedNodeSelector") or {})


def phase_since(mig: MigrationView, phase: str) -> float:
    for p, at in reversed(mig.transitions):
        if p == phase:
            return at
    return mig.created_at


class _Fail:
    def __init__(self, reason: str, message: str) -> None:
        self.reason, self.message = reason, message


def _route(mig: MigrationView, cluster: Cluster) -> str:
    """The node whose handler must act on the migration's end."""
    if mig.phase in TARGET_PHASES:
        return mig.target_node
    if mig.phase == "Running":
        src = cluster.nodes.get(mig.source_node)
        if src is not None and not src.unresponsive:
            return mig.source_node
        return mig.target_node  # the source is gone: the target still has to clean up
    return ""


def _vmi_problem(
    mig: MigrationView, vmi: VMIView | None, cluster: Cluster, *, pending: bool
) -> _Fail | None:
    if vmi is None:
        return _Fail("VMIDoesNotExist", f'the VMI "{mig.namespace}/{mig.vmi_name}" does not exist')
    if vmi.final:
        return _Fail("VMIFinalized", "Cannot migrate VMI in finalized state.")
    if vmi.deletion_requested_at is not None:
        return _Fail("VMIDeleted", f"VMI {vmi.name} is being deleted")
    if pending:
        if vmi.phase != "Running":
            return _Fail("VMINotRunning", f"Cannot migrate VMI {vmi.name}: VM is not running")
        ok, reason, message = live_migratable(vmi.manifest, cluster)
        if not ok:
            return _Fail(
                "NotLiveMigratable", f"Cannot migrate VMI, Reason: {reason}, Message: {message}"
            )
    return None


def _target_down(mig: MigrationView, cluster: Cluster) -> bool:
    if mig.phase not in (*TARGET_PHASES, "Running"):
        return False
    node = cluster.nodes.get(mig.target_node)
    return node is None or node.unresponsive


def _failure(
    mig: MigrationView, vmi: VMIView | None, cluster: Cluster, ahead: Iterable[MigrationView]
) -> _Fail | None:
    pending = mig.phase == "Pending"
    problem = _vmi_problem(mig, vmi, cluster, pending=pending)
    if problem is not None:
        return problem
    if pending and any(o.vmi_name == mig.vmi_name and o.namespace == mig.namespace for o in ahead):
        return _Fail("InProgress", IN_PROGRESS)
    if mig.abort_requested and mig.phase in ("Pending", "Scheduling", *TARGET_PHASES):
        return _Fail("Aborted", ABORTED)
    if _target_down(mig, cluster):
        return _Fail("TargetPodDown", TARGET_POD_DOWN)
    return None


def _failed(mig: MigrationView, fail: _Fail, cluster: Cluster, ctx: Context) -> MigrationFailed:
    return MigrationFailed(
        meta=emit.meta(
            ctx, migration_aggregate(mig), f"mig-failed/{mig.uid}", node=_route(mig, cluster)
        ),
        reason=fail.reason,
        message=fail.message,
    )


def reconcile(
    state: ControllerState, ctx: Context, config: MigrationConfig, reserved: Reserved
) -> list[Event]:
    c = state.cluster
    active = sorted((m for m in state.index.migrations(c) if not m.final), key=order)
    started = [m for m in active if m.phase != "Pending"]
    in_cluster = len(started)
    outbound: Counter[str] = Counter(m.source_node for m in started)
    out: list[Event] = []
    seen: list[MigrationView] = []  # active migrations ahead of the current one
    for mig in active:
        vmi = vmi_of(c, mig)
        # a migration past Pending is "ahead" of every Pending one, whatever its age
        ahead = [*seen, *(m for m in started if m is not mig)]
        seen.append(mig)
        fail = _failure(mig, vmi, c, ahead)
        if fail is not None:
            out.append(_failed(mig, fail, c, ctx))
            continue
        assert vmi is not None
        match mig.phase:
            case "Pending":
                waiting = _limit(mig, vmi, config, in_cluster, outbound)
                if waiting:
                    if waiting != mig.message:
                        k = f"mig-pending/{mig.uid}/{mig.version}"
                        agg = migration_aggregate(mig)
                        out.append(
                            MigrationPending(
                                meta=emit.meta(ctx, agg, k), vmi_name=vmi.name, message=waiting
                            )
                        )
                    continue
                in_cluster += 1
                outbound[vmi.node] += 1
                out.append(
                    MigrationScheduling(
                        meta=emit.meta(ctx, migration_aggregate(mig), f"mig-scheduling/{mig.uid}"),
                        vmi_uid=vmi.uid,
                        source_node=vmi.node,
                        source_pod=vmi.pod_name,
                    )
                )
                # place at once: one hop less, and the decision does not depend on the phase
                out += _schedule(state, mig, vmi, vmi.node, vmi.pod_name, ctx, config, reserved)
            case "Scheduling":
                out += _schedule(
                    state, mig, vmi, mig.source_node, mig.source_pod, ctx, config, reserved
                )
            case "Running":
                if mig.abort_requested and state.abort_routed.get(mig.uid) != mig.source_node:
                    k = f"mig-abort-relay/{mig.uid}"
                    out.append(
                        MigrationAbortRequested(
                            meta=emit.meta(ctx, migration_aggregate(mig), k, node=mig.source_node)
                        )
                    )
    return out


def _limit(
    mig: MigrationView,
    vmi: VMIView,
    config: MigrationConfig,
    in_cluster: int,
    outbound: Counter[str],
) -> str:
    """Why this migration must wait, or "" when it may go."""
    if in_cluster >= config.parallel_migrations_per_cluster:
        return (
            "Waiting: the cluster runs its maximum of "
            f"{config.parallel_migrations_per_cluster} parallel migrations "
            "(parallelMigrationsPerCluster)"
        )
    if outbound[vmi.node] >= config.parallel_outbound_migrations_per_node:
        return (
            f"Waiting: node {vmi.node} runs its maximum of "
            f"{config.parallel_outbound_migrations_per_node} outbound migrations "
            "(parallelOutboundMigrationsPerNode)"
        )
    return ""


def _schedule(
    state: ControllerState,
    mig: MigrationView,
    vmi: VMIView,
    source_node: str,
    source_pod: str,
    ctx: Context,
    config: MigrationConfig,
    reserved: Reserved,
) -> list[Event]:
    c = state.cluster
    result = scheduler.place(
        vmi.manifest,
        c,
        exclude={source_node},
        extra_selector=added_node_selector(mig),
        reserved=reserved,
        index=state.index,
    )
    agg = migration_aggregate(mig)
    if isinstance(result, NoFit):
        since = phase_since(mig, "Scheduling") if mig.phase == "Scheduling" else ctx.now
        if ctx.now - since < config.unschedulable_timeout:
            return []  # retried on the next pass (capacity and nodes change)
        return [
            MigrationFailed(
                meta=emit.meta(ctx, agg, f"mig-failed/{mig.uid}"),
                reason="Unschedulable",
                message=(
                    f"Migration target pod for VMI {vmi.namespace}/{vmi.name} could not be "
                    f"scheduled within {config.unschedulable_timeout:g}s: {result.message}"
                ),
            )
        ]
    assert isinstance(result, Placement)
    reserved.add(result.node, vmi.manifest)
    k = f"mig-scheduled/{mig.uid}"
    target_pod_uid = emit.new_uid(ctx, k)
    return [
        MigrationScheduled(
            meta=emit.meta(ctx, agg, k, node=result.node),
            vmi_name=vmi.name,
            vmi_uid=vmi.uid,
            source_node=source_node,
            source_pod=source_pod,
            target_node=result.node,
            target_pod=scheduler.pod_name(vmi.name, target_pod_uid),
            target_pod_uid=target_pod_uid,
            settings=effective_settings(vmi, c.policies.values(), config),
            manifest=vmi.manifest,
        )
    ]
