"""VirtualMachineInstanceMigration: its registry entry and its delete (an abort while the
migration runs)."""

from __future__ import annotations

from typing import Any

from core import admission
from core.context import Append, Outcome, RequestContext
from core.errors import not_found
from core.kind import CallArgs, SpecRefusal
from events.catalog import MigrationAbortRequested, MigrationRequested
from events.meta import Kind
from events.objects import VirtualMachineInstanceMigration
from kinds import versions, vmi
from kinds.spec import KindSpec, PrinterColumn
from projections.cluster import Cluster, key
from projections.evolve import evolve_migration
from projections.render import render_migration


def admit(cluster: Cluster, typed: Any, _: str) -> tuple[Any, list[Any]]:
    causes = admission.validate_migration(
        typed,
        lambda ns, n: vmi.typed_vmi(cluster, ns, n),
        lambda ns, n: m.name if (m := cluster.active_migration(ns, n)) else None,
    )
    return typed, causes


def delete(
    cluster: Cluster, namespace: str, name: str, grace: int | None, ctx: RequestContext
) -> Outcome:
    del grace  # an abort has no grace period
    k = key(namespace, name)
    mig = cluster.migrations.get(k)
    if mig is None or (mig.deleted and mig.final):
        raise not_found(SPEC.resource, name)
    if mig.deleted:
        return Outcome((), Kind.MIGRATION, k, 200)
    # routed to the handler that must act: the source while the transfer runs,
    # else the target (the controller relays too; this saves it a hop)
    node = mig.source_node if mig.phase == "Running" else mig.target_node
    meta = ctx.meta(Kind.MIGRATION, namespace, name, mig.uid, node=node)
    event = MigrationAbortRequested(meta=meta)
    return Outcome((Append(event, mig.version),), Kind.MIGRATION, k, 200)


def _delete(c: Cluster, ns: str, name: str, args: CallArgs, ctx: RequestContext) -> Outcome:
    return delete(c, ns, name, args.grace(), ctx)


SPEC = KindSpec(
    group="kubevirt.io",
    version="v1",
    versions=versions.CORE,
    kind="VirtualMachineInstanceMigration",
    plural="virtualmachineinstancemigrations",
    singular="virtualmachineinstancemigration",
    short_names=("vmim", "vmims"),
    aliases=("migration", "migrations"),
    categories=("all",),
    event_kind=Kind.MIGRATION,
    object_type=VirtualMachineInstanceMigration,
    printer_columns=(
        PrinterColumn(
            "Phase",
            "string",
            ".status.phase",
            description="The current phase of VM instance migration",
        ),
        PrinterColumn(
            "VMI",
            "string",
            ".spec.vmiName",
            description="The name of the VMI to perform the migration on",
        ),
    ),
    admit=admit,
    created=lambda meta, manifest: MigrationRequested(meta=meta, manifest=manifest),
    spec_refusal=SpecRefusal(
        "migration-update-validator.kubevirt.io",
        "update of Migration object's spec is restricted",
    ),
    delete=_delete,
    table=lambda c: c.migrations,
    render=lambda _c, v, _now: render_migration(v),
    evolve=evolve_migration,
)
