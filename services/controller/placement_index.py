"""Incremental indexes over the controller's cluster fold, so a decision pass costs what the
event touched instead of a scan of every VMI.

Kept in step by `ControllerState.evolve`: after each fold, every touched VMI or migration
key is re-read from the cluster and its contribution replaced (no old view needed, so an
index can never drift from the views it summarises). What they answer equals a full scan:
- per node, the CPU/memory held by non-final VMIs placed there (allocation.node_allocated
  without the walk; migration targets are added at query time from the few active ones);
- the non-final VMIs without a node (the scheduler's candidates);
- the non-final placed VMIs with required pod anti-affinity (the only peers a new pod
  without affinity terms of its own must be checked against);
- the non-final migrations;
- the addresses held by non-final VMIs: on the pod network, and per secondary network's
  definition (what the scheduler must not hand out again)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from events.meta import Kind
from projections.allocation import vmi_requests
from projections.cluster import Cluster, Touched, key
from projections.views import MigrationView, VMIView

JSON = dict[str, Any]


def has_required_anti_affinity(manifest: JSON) -> bool:
    aff = ((manifest.get("spec") or {}).get("affinity") or {}).get("podAntiAffinity") or {}
    return bool(aff.get("requiredDuringSchedulingIgnoredDuringExecution"))


class PlacementIndex:
    def __init__(self) -> None:
        # vmi key → (node, cpu millis, memory bytes, required anti-affinity, the packed
        # manifest they were derived from: reused while the view keeps that same object,
        # so a fold does not decode the manifest again)
        self._counted: dict[str, tuple[str, int, int, bool, bytes]] = {}
        self._used: dict[str, list[int]] = {}  # node → [cpu millis, memory bytes, count]
        self.unplaced: set[str] = set()
        self.anti_affine: set[str] = set()
        self.active_migrations: set[str] = set()
        self._addresses: dict[str, tuple[tuple[str, str], ...]] = {}  # vmi key → held
        self.held: dict[str, set[str]] = {}  # "" (the pod network) or a definition → held

    # ------------------------------------------------------------------ upkeep
    def touched(self, cluster: Cluster, touched: Iterable[Touched]) -> None:
        for kind, k in touched:
            if kind == Kind.VMI:
                self._vmi(k, cluster.vmis.get(k))
            elif kind == Kind.MIGRATION:
                self._migration(k, cluster.migrations.get(k))

    def rebuild(self, cluster: Cluster) -> None:
        self.__init__()  # type: ignore[misc]
        for k, vmi in cluster.vmis.items():
            self._vmi(k, vmi)
        for k, mig in cluster.migrations.items():
            self._migration(k, mig)

    def _vmi(self, k: str, vmi: VMIView | None) -> None:
        old = self._counted.get(k)
        live = vmi is not None and not vmi.final
        if (
            old is not None
            and live
            and vmi is not None
            and old[0] == vmi.node
            and old[4] is vmi.manifest_json
        ):
            self._hold(k, vmi)  # on the same node with the same manifest: counted already
            return
        self._counted.pop(k, None)
        if old is not None:
            used = self._used[old[0]]
            used[0] -= old[1]
            used[1] -= old[2]
            used[2] -= 1
        anti = False
        if live and vmi is not None and vmi.node:
            packed = vmi.manifest_json
            if old is not None and old[4] is packed:
                cpu, mem, anti = old[1], old[2], old[3]
            else:
                manifest = vmi.manifest
                cpu, mem = vmi_requests(manifest)
                anti = has_required_anti_affinity(manifest)
            self._counted[k] = (vmi.node, cpu, mem, anti, packed)
            used = self._used.setdefault(vmi.node, [0, 0, 0])
            used[0] += cpu
            used[1] += mem
            used[2] += 1
        _flag(self.unplaced, k, live and vmi is not None and not vmi.node)
        _flag(self.anti_affine, k, anti)
        self._hold(k, vmi if live else None)

    def _hold(self, k: str, vmi: VMIView | None) -> None:
        held: tuple[tuple[str, str], ...] = ()
        if vmi is not None:
            pod = (("", vmi.pod_address),) if vmi.pod_address else ()
            held = pod + tuple((a.definition, a.address) for a in vmi.attachments if a.address)
        if held == self._addresses.get(k, ()):
            return
        for network, address in self._addresses.pop(k, ()):
            self.held[network].discard(address)
        for network, address in held:
            self.held.setdefault(network, set()).add(address)
        if held:
            self._addresses[k] = held

    def _migration(self, k: str, mig: MigrationView | None) -> None:
        _flag(self.active_migrations, k, mig is not None and not mig.final)

    # ----------------------------------------------------------------- queries
    def allocated(self, cluster: Cluster, node: str) -> tuple[int, int]:
        """(cpu millis, memory bytes) = allocation.node_allocated(cluster, node)[:2]."""
        used = self._used.get(node)
        cpu, mem = (used[0], used[1]) if used else (0, 0)
        for mig in self.migrations(cluster):
            if mig.target_node == node:
                moving = cluster.vmis.get(key(mig.namespace, mig.vmi_name))
                if moving is not None:
                    c, m = vmi_requests(moving.manifest)
                    cpu, mem = cpu + c, mem + m
        return cpu, mem

    def migrations(self, cluster: Cluster) -> Iterator[MigrationView]:
        for k in self.active_migrations:
            mig = cluster.migrations.get(k)
            if mig is not None:
                yield mig

    def pending(self, cluster: Cluster) -> Iterator[VMIView]:
        for k in self.unplaced:
            vmi = cluster.vmis.get(k)
            if vmi is not None:
                yield vmi

    def anti_affine_vmis(self, cluster: Cluster) -> Iterator[VMIView]:
        for k in self.anti_affine:
            vmi = cluster.vmis.get(k)
            if vmi is not None:
                yield vmi


def _flag(members: set[str], k: str, on: bool) -> None:
    if on:
        members.add(k)
    else:
        members.discard(k)
