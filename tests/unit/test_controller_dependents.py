"""The controller's dependents index (services/controller/dependents.py) against the full
pass: over generated clusters of VMs, replica sets, pools, snapshots, restores, clones,
exports and Secrets, every event's reconciliation through the index decides exactly what a
pass over every object decides."""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from events.catalog import Event, ResourceCreated, ResourceDeleted, VMCreated, VMDeleted
from events.meta import Kind, ResourceKind
from services.controller.dependents import Dependents, references
from tests.factories import vm_manifest
from tests.unit.test_clones import clone_manifest
from tests.unit.test_controller_world import World
from tests.unit.test_replicas import pool_manifest, rs_manifest
from tests.unit.test_snapshots import restore_manifest, snap_manifest

VMS = ("vm1", "vm2", "vm3")
KEY = b"k" * 32  # export tokens


def export_manifest(name: str, source: str, kind: str = "VirtualMachine") -> dict[str, Any]:
    group = "kubevirt.io" if kind == "VirtualMachine" else "snapshot.kubevirt.io"
    return {
        "apiVersion": "export.kubevirt.io/v1beta1",
        "kind": "VirtualMachineExport",
        "metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}"},
        "spec": {"source": {"apiGroup": group, "kind": kind, "name": source}},
    }


def secret_manifest(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}"},
        "data": {"token": "eA=="},
    }


vm_name = st.sampled_from(VMS)
steps = st.one_of(
    st.tuples(st.just("handlers")),  # every scheduled VMI starts; a running one's guest stops
    st.tuples(st.just("vm"), vm_name, st.sampled_from(["Always", "Halted"])),
    st.tuples(st.just("delete-vm"), vm_name),
    st.tuples(st.just("snapshot"), st.sampled_from(["snap1", "snap2"]), vm_name),
    st.tuples(st.just("restore"), st.sampled_from(["r1", "r2"]), vm_name),
    st.tuples(st.just("clone"), st.sampled_from(["c1", "c2"]), vm_name),
    st.tuples(st.just("export"), st.sampled_from(["e1", "e2"]), vm_name),
    st.tuples(st.just("secret"), st.sampled_from(["export-token-e1", "s1"])),
    st.tuples(st.just("rs"), st.integers(0, 2)),
    st.tuples(st.just("pool"), st.integers(0, 2)),
    st.tuples(
        st.just("delete"),
        st.sampled_from(
            [
                (ResourceKind.SNAPSHOT, "snap1"),
                (ResourceKind.RESTORE, "r1"),
                (ResourceKind.CLONE, "c1"),
                (ResourceKind.EXPORT, "e1"),
                (ResourceKind.VMIRS, "web"),
                (ResourceKind.SECRET, "export-token-e1"),
            ]
        ),
    ),
)


def handlers(w: World, stop: int) -> None:
    """The nodes' side: each scheduled VMI's launcher starts and its domain runs; the
    `stop`th running one's guest stops (its launcher exits)."""
    running = []
    for k, vmi in sorted(w.state.cluster.vmis.items()):
        name = k.partition("/")[2]
        if vmi.node and vmi.phase in ("Scheduling", "Scheduled"):
            w.start_running(name)
        elif vmi.phase == "Running":
            running.append(name)
    if running:
        w.stop_guest(running[stop % len(running)])


def event_of(w: World, step: tuple[Any, ...]) -> Event | None:
    match step:
        case ("handlers",):
            handlers(w, len(w.log))
            return None
        case ("vm", name, strategy):
            if f"default/{name}" in w.state.cluster.vms:
                return None
            return VMCreated(meta=w.m(Kind.VM, name), manifest=vm_manifest(name, strategy))
        case ("delete-vm", name):
            if f"default/{name}" not in w.state.cluster.vms:
                return None
            return VMDeleted(meta=w.m(Kind.VM, name))
        case ("delete", (kind, name)):
            if f"default/{name}" not in w.state.cluster.resources[kind]:
                return None
            return ResourceDeleted(meta=w.m(kind, name))
    kind, manifest = _resource(step)
    name = manifest["metadata"]["name"]
    if f"default/{name}" in w.state.cluster.resources[kind]:
        return None
    return ResourceCreated(meta=w.m(kind, name), manifest=manifest)


def _resource(step: tuple[Any, ...]) -> tuple[str, dict[str, Any]]:
    match step:
        case ("snapshot", name, vm):
            return ResourceKind.SNAPSHOT, snap_manifest(name, vm)
        case ("restore", name, vm):
            return ResourceKind.RESTORE, restore_manifest(name, vm)
        case ("clone", name, vm):
            return ResourceKind.CLONE, clone_manifest(name, vm)
        case ("export", name, vm):
            return ResourceKind.EXPORT, export_manifest(name, vm)
        case ("secret", name):
            return ResourceKind.SECRET, secret_manifest(name)
        case ("rs", n):
            return ResourceKind.VMIRS, rs_manifest(n)
        case ("pool", n):
            return ResourceKind.VMPOOL, pool_manifest(n)
    raise AssertionError(step)


def outcome(w: World) -> dict[str, Any]:
    """What the decisions made of the cluster: every object and its status, every VM and
    VMI with its phase (not the sequences: the two passes append in another order)."""
    c = w.state.cluster
    return {
        "resources": {
            kind: {k: (v.spec, v.status) for k, v in table.items()}
            for kind, table in c.resources.items()
            if table  # (a kind's empty table is there once a pass looked it up)
        },
        "vms": {k: (v.uid, v.run_strategy, v.deleted_at) for k, v in c.vms.items()},
        "vmis": {k: (v.uid, v.phase) for k, v in c.vmis.items()},
    }


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
@given(st.lists(steps, min_size=1, max_size=14))
def test_an_events_reconciliation_through_the_index_is_the_full_passes(
    program: list[tuple[Any, ...]],
) -> None:
    """Two controllers run the same program, one through the index and one over every
    object; after each step has settled, the cluster is the same. (A reaction may come one
    delivery later through the index: an object created by a decision is reconciled on
    its own event, not on its creator's, which the full pass meets first.)"""
    worlds = [World(export_key=KEY), World(export_key=KEY, indexed=False)]
    for w in worlds:
        w.given(w.node_joined("node-1"), w.node_joined("node-2"))
    for step in program:
        for w in worlds:
            ev = event_of(w, step)
            if ev is not None:
                w.run(ev)
        assert outcome(worlds[0]) == outcome(worlds[1]), step
    # the index rebuilt from the views (a checkpoint's load) is the one folded event by event
    rebuilt = Dependents()
    rebuilt.rebuild(worlds[0].state.cluster)
    assert vars(rebuilt) == vars(worlds[0].state.dependents)


def test_the_names_an_object_depends_on() -> None:
    w = World()
    w.given(
        ResourceCreated(meta=w.m(ResourceKind.RESTORE, "r1"), manifest=restore_manifest("r1")),
        ResourceCreated(meta=w.m(ResourceKind.SNAPSHOT, "s"), manifest=snap_manifest("s", "vm2")),
    )
    res = w.state.cluster.resources
    assert references(ResourceKind.RESTORE, res[ResourceKind.RESTORE]["default/r1"]) >= {
        "default/vm1",
        "default/snap1",
    }
    snap = res[ResourceKind.SNAPSHOT]["default/s"]
    assert references(ResourceKind.SNAPSHOT, snap) >= {
        "default/vm2",
        f"default/vmsnapshot-content-{snap.uid}",
    }
