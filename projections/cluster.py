"""The cluster view: every aggregate's view, folded from the stream, with the joins between
them (a VMI's owner VM, a migration's VMI, the VMIs on a node).

`Cluster.apply` is the one place that mutates: it swaps in the views the pure evolve
functions return and reports which objects changed, so watchers know what to send."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator
from typing import Any, assert_never

from msgspec.structs import replace

from events import subjects
from events.catalog import (
    DomainStarted,
    LauncherStarted,
    MigrationAborted,
    MigrationFailed,
    MigrationScheduled,
    MigrationSucceeded,
    PodScheduled,
    VMICreated,
    VMIRemoved,
)
from events.envelope import Stored
from events.meta import Aggregate, Kind, KindToken, ResourceKind, own_kind
from projections.evolve import (
    evolve_migration,
    evolve_node,
    evolve_policy,
    evolve_resource,
    evolve_vm,
    evolve_vmi,
)
from projections.kube_events import KIND as KUBE_EVENTS
from projections.kube_events import KubeEvents
from projections.views import (
    MigrationView,
    NodeView,
    PolicyView,
    ResourceView,
    VMIView,
    VMView,
)

Touched = tuple[KindToken, str]  # (kind, "namespace/name" or node/policy name)


def key(namespace: str, name: str) -> str:
    return f"{namespace}/{name}"


def view_key(agg: Aggregate) -> str:
    """The Cluster table key of an aggregate ("ns/name", or the name when cluster-scoped)."""
    return agg.name if agg.cluster_scoped else key(agg.namespace, agg.name)


class Cluster:
    def __init__(self, *, kube_events: bool = False) -> None:
        self.vms: dict[str, VMView] = {}
        self.vmis: dict[str, VMIView] = {}
        self.migrations: dict[str, MigrationView] = {}
        self.nodes: dict[str, NodeView] = {}
        self.policies: dict[str, PolicyView] = {}
        # the generic kinds' views, per kind (instance types, replica sets, ...): any kind
        # without events of its own, each table begun by its first event (or lookup)
        self.resources: defaultdict[KindToken, dict[str, ResourceView]] = defaultdict(dict)
        self.vmis_by_node: dict[str, set[str]] = {}
        self._own_tables: dict[KindToken, dict[str, Any]] = {
            Kind.VM: self.vms,
            Kind.VMI: self.vmis,
            Kind.MIGRATION: self.migrations,
            Kind.NODE: self.nodes,
            Kind.POLICY: self.policies,
        }  # (`table`'s lookup, on every event; never reassigned: `views_codec` fills them)
        self.last_seq = 0
        # Kubernetes' Events derived from the log (projections/kube_events.py): folded by
        # the api's read side, not by the controller, whose decisions never read them
        self.kube_events: KubeEvents | None = KubeEvents() if kube_events else None

    # ------------------------------------------------------------------ queries
    def table(self, kind: KindToken) -> dict[str, Any]:
        """The views of one kind, by key."""
        own = self._own_tables.get(kind)
        if own is not None:
            return own
        if kind == KUBE_EVENTS:
            return self.kube_events.table if self.kube_events is not None else {}
        match own_kind(kind):
            case Kind.VM:
                return self.vms
            case Kind.VMI:
                return self.vmis
            case Kind.MIGRATION:
                return self.migrations
            case Kind.NODE:
                return self.nodes
            case Kind.POLICY:
                return self.policies
            case None:
                return self.resources[kind]
            case never:
                assert_never(never)

    def object_tables(self) -> list[tuple[KindToken, dict[str, Any]]]:
        """Every kind's table but the nodes' (the handlers' own, in no namespace and named
        by no owner reference)."""
        own = [(k, t) for k, t in self._own_tables.items() if k != Kind.NODE]
        return [*own, *self.resources.items()]

    def vmi_of_vm(self, vm: VMView) -> VMIView | None:
        vmi = self.vmis.get(key(vm.namespace, vm.name))
        return vmi if vmi and vmi.owner_vm_uid == vm.uid else None

    def vmis_on(self, node: str) -> Iterator[VMIView]:
        for k in self.vmis_by_node.get(node, ()):
            vmi = self.vmis.get(k)
            if vmi is not None:
                yield vmi

    def active_migration(self, namespace: str, vmi_name: str) -> MigrationView | None:
        for mig in self.migrations.values():
            if mig.namespace == namespace and mig.vmi_name == vmi_name and not mig.final:
                return mig
        return None

    # ----------------------------------------------------------------- folding
    def apply(self, s: Stored) -> list[Touched]:
        agg = s.event.meta.aggregate
        self.last_seq = max(self.last_seq, s.seq)
        if s.redelivery_of:
            self._advance_version(agg, s.seq)
            return []
        if self.kube_events is None:
            return self._apply_views(s, agg)
        recorded = self.kube_events.apply(s, self)  # reads the views before the event
        return self._apply_views(s, agg) + [(KUBE_EVENTS, k) for k in recorded]

    def _apply_views(self, s: Stored, agg: Aggregate) -> list[Touched]:
        match own_kind(agg.kind):
            case Kind.VM:
                return self._apply_vm(s, key(agg.namespace, agg.name))
            case Kind.VMI:
                return self._apply_vmi(s, key(agg.namespace, agg.name))
            case Kind.MIGRATION:
                return self._apply_migration(s, key(agg.namespace, agg.name))
            case Kind.NODE:
                return self._swap(
                    self.nodes, agg.name, evolve_node(self.nodes.get(agg.name), s), Kind.NODE
                )
            case Kind.POLICY:
                new = evolve_policy(self.policies.get(agg.name), s)
                return self._swap(self.policies, agg.name, new, Kind.POLICY)
            case None:
                table = self.resources[agg.kind]
                k = view_key(agg)
                old = table.get(k)
                touched = self._swap(table, k, evolve_resource(old, s), agg.kind)
                if agg.kind in (ResourceKind.SNAPSHOT, ResourceKind.RESTORE):
                    touched += self._touch_vm_of(old or table.get(k), s.seq)
                return touched
            case never:
                assert_never(never)

    def skip(self, seq: int, subject: str) -> None:
        """An event no fold can read (poison) at `seq`: every fold skips it the same way,
        moving the aggregate its subject names past it, so optimistic appends on that
        aggregate expect the stream's real last sequence and the aggregate stays operable."""
        self.last_seq = max(self.last_seq, seq)
        try:
            kind, namespace, name, _, _ = subjects.parse(subject)
        except ValueError:
            return  # not an aggregate's subject
        self._advance_version(Aggregate(kind, namespace, name), seq)

    def _advance_version(self, agg: Aggregate, seq: int) -> None:
        """A retried dead letter (a copy of an event folded at its original sequence) is
        not folded again, but it is the aggregate's last event: OCC appends expect it."""
        table = self.table(agg.kind)
        view = table.get(view_key(agg))
        if view is not None:
            table[view_key(agg)] = replace(view, version=seq)

    @staticmethod
    def _swap(table: dict[str, Any], k: str, new: object, kind: KindToken) -> list[Touched]:
        if new is None:
            if table.pop(k, None) is None:
                return []
        else:
            table[k] = new
        return [(kind, k)]

    def _touch_vm_of(self, res: ResourceView | None, seq: int) -> list[Touched]:
        """A snapshot's source or a restore's target VM: its status shows the snapshot or
        restore in progress (`status.snapshotInProgress`, `restoreInProgress`)."""
        if res is None:
            return []
        ref = res.spec.get("source") or res.spec.get("target") or {}
        k = key(res.namespace, str(ref.get("name") or ""))
        vm = self.vms.get(k)
        if vm is None:
            return []
        self.vms[k] = replace(vm, resource_version=seq)
        return [(Kind.VM, k)]

    def _apply_vm(self, s: Stored, k: str) -> list[Touched]:
        old = self.vms.get(k)
        new = evolve_vm(old, s)
        if new is not None and old is None:
            vmi = self.vmis.get(k)  # a VM created over an existing VMI of the same uid
            if vmi and vmi.owner_vm_uid == new.uid:
                new = replace(new, vmi_uid=vmi.uid)
        if (
            new is not None
            and new.deleted_at is not None
            and not new.vmi_uid
            and not new.finalizers
        ):
            new = None  # nothing left to tear down, nothing to wait for: the VM is gone
        return self._swap(self.vms, k, new, Kind.VM)

    def _apply_vmi(self, s: Stored, k: str) -> list[Touched]:
        old = self.vmis.get(k)
        new = evolve_vmi(old, s)
        touched = self._swap(self.vmis, k, new, Kind.VMI)
        self._index(k, old, new)
        if new is None and old is not None:
            self._release_migration(old)
        # the VM that owned it (an orphaned VMI's VM is no longer its owner)
        owner_uid = (old.owner_vm_uid if old else "") or (new.owner_vm_uid if new else "")
        vm = self.vms.get(k)
        if vm is not None and owner_uid and vm.uid == owner_uid:
            ev = s.event
            if isinstance(ev, VMICreated):
                vm = replace(vm, vmi_uid=new.uid if new else "")
            elif (isinstance(ev, VMIRemoved) and vm.vmi_uid == (old.uid if old else "")) or (
                new is not None and not new.owner_vm_uid and vm.vmi_uid == new.uid
            ):
                vm = replace(vm, vmi_uid="")
            vm = replace(vm, resource_version=s.seq)
            if vm.deleted_at is not None and not vm.vmi_uid and not vm.finalizers:
                self.vms.pop(k, None)
            else:
                self.vms[k] = vm
            touched.append((Kind.VM, k))
        return touched

    def _release_migration(self, vmi: VMIView) -> None:
        """The VMI no longer shows its migration: a gone one leaves the views."""
        mk = key(vmi.namespace, vmi.migration) if vmi.migration else ""
        mig = self.migrations.get(mk)
        if mig is not None and mig.gone:
            del self.migrations[mk]

    def _index(self, k: str, old: VMIView | None, new: VMIView | None) -> None:
        if old is not None and old.node and (new is None or new.node != old.node):
            self.vmis_by_node.get(old.node, set()).discard(k)
        if new is not None and new.node:
            self.vmis_by_node.setdefault(new.node, set()).add(k)

    def _apply_migration(self, s: Stored, k: str) -> list[Touched]:
        old = self.migrations.get(k)
        new = evolve_migration(old, s)
        vk = key(new.namespace, new.vmi_name) if new is not None else ""
        vmi = self.vmis.get(vk)
        if vmi is not None and new is not None and new.vmi_uid and vmi.uid != new.vmi_uid:
            vmi = None  # a newer VMI of the name: not this migration's
        # deleted and finished: gone, as Kubernetes deletes it; the view stays only while
        # its VMI lives and shows it (status.migrationState), so the views hold what
        # exists and not every migration ever run
        shown = vmi is not None and new is not None and vmi.migration == new.name
        kept = None if new is not None and new.gone and not shown else new
        touched = self._swap(self.migrations, k, kept, Kind.MIGRATION)
        if new is None or vmi is None:
            return touched
        if vmi.migration and vmi.migration != new.name:
            self._release_migration(vmi)  # the VMI shows this one from now on
        ev = s.event
        if isinstance(ev, MigrationScheduled):
            pods = (*vmi.active_pods, (ev.target_pod_uid, ev.target_node))
            updated = replace(vmi, migration=new.name, active_pods=pods)
        elif isinstance(ev, MigrationSucceeded):
            updated = replace(
                vmi,
                node=ev.target_node,
                pod_name=new.target_pod,
                pod_uid=ev.target_pod_uid,
                active_pods=((ev.target_pod_uid, ev.target_node),),
            )
        elif isinstance(ev, MigrationFailed | MigrationAborted) and vmi.node != new.target_node:
            # the target pod is going away; the VMI stays on its source
            pods = tuple(p for p in vmi.active_pods if p[0] != new.target_pod_uid)
            updated = replace(vmi, active_pods=pods)
        else:
            updated = vmi
        updated = replace(updated, migration=new.name, resource_version=s.seq)
        self.vmis[vk] = updated
        self._index(vk, vmi, updated)
        touched.append((Kind.VMI, vk))
        vm = self.vms.get(vk)
        if vm is not None and vm.uid == vmi.owner_vm_uid:
            self.vms[vk] = replace(vm, resource_version=s.seq)
            touched.append((Kind.VM, vk))
        return touched


# Events that change a VMI's node placement (the scheduler and handlers care).
PLACEMENT_EVENTS = (PodScheduled, LauncherStarted, DomainStarted, MigrationSucceeded)
