"""Deletion as Kubernetes does it, on plain data: the controller's garbage collector
deletes the objects whose owners are gone (a replica set's VMIs, a pool's VMs), each as
its kind is deleted, once; `propagationPolicy: Orphan` leaves them, without their
reference to the owner, decided with the owner's delete."""

from __future__ import annotations

import itertools
import json

import msgspec

from bench.bench_replay import generate
from core import commands
from core.commands import Request, Verb
from core.context import RequestContext
from events import subjects
from events.catalog import (
    Event,
    MetadataChanged,
    MigrationAbortRequested,
    ResourceCreated,
    ResourceDeleted,
    VMDeleted,
    VMIDeleteRequested,
    VMIRemoved,
)
from events.codec import event_type
from events.envelope import Context, Stored
from events.meta import Kind, ResourceKind
from kinds.registry import REGISTRY
from projections.cluster import Cluster
from services.controller import gc
from services.controller.ownership import Ownership
from tests.factories import meta
from tests.unit.test_controller_world import World
from tests.unit.test_replicas import pool_manifest, rs_manifest, rs_vmis, world

_ids = itertools.count(1)


def deleted(w: World, owner: str, kind: str = ResourceKind.VMIRS) -> list[Event]:
    return w.run(ResourceDeleted(meta=meta(kind, owner)))


def test_a_deleted_replica_sets_vmis_are_deleted_once() -> None:
    w = world()
    w.run(ResourceCreated(meta=meta(ResourceKind.VMIRS, "web"), manifest=rs_manifest(3)))
    names = rs_vmis(w)
    appended = deleted(w, "web")
    gone = sorted(e.meta.aggregate.name for e in appended if isinstance(e, VMIDeleteRequested))
    assert gone == names
    # the collector decides nothing more for them (nor does a tick)
    assert not [e for e in w.tick() if isinstance(e, VMIDeleteRequested)]


def test_a_deleted_pools_vms_are_deleted() -> None:
    w = world()
    w.run(ResourceCreated(meta=meta(ResourceKind.VMPOOL, "pool"), manifest=pool_manifest(2)))
    appended = deleted(w, "pool", ResourceKind.VMPOOL)
    vms = sorted(e.meta.aggregate.name for e in appended if isinstance(e, VMDeleted))
    assert vms == ["pool-0", "pool-1"]
    # their VMIs are torn down by their VMs' deletion (not collected twice)
    vmis = [e for e in appended if isinstance(e, VMIDeleteRequested)]
    assert len(vmis) == 2 and len({e.meta.event_id for e in vmis}) == 2


def ctx(w: World) -> Context:
    return Context("virt-controller", "", w.now, None)


def test_an_object_with_a_live_owner_or_no_owner_uid_stays() -> None:
    w = world()
    w.run(ResourceCreated(meta=meta(ResourceKind.VMIRS, "web"), manifest=rs_manifest(1)))
    c = w.state.cluster
    (vmi,) = c.vmis.values()
    own = w.state.ownership
    assert vmi.owners == ["rs-uid"] and own.live("rs-uid")
    assert gc.collect(c, own, ctx(w)) == []
    # a reference without a uid names no owner
    refs = [{"apiVersion": "v1", "kind": "Thing", "name": "x"}]
    w.given(MetadataChanged(meta=meta(Kind.VMI, vmi.name), metadata={"ownerReferences": refs}))
    assert gc.collect(c, own, ctx(w)) == []


def _delete(w: World, kind: str, name: str, policy: str = "Background") -> list[Event]:
    """The api's decision for a delete, appended, and what the controller does after it."""
    req = Request(
        verb=Verb.DELETE, spec=REGISTRY.resource(kind), namespace="default", name=name,
        body=json.dumps({"propagationPolicy": policy}).encode(),
    )  # fmt: skip
    rctx = RequestContext(
        now=w.now, correlation_id="req", new_id=lambda: f"{next(_ids):032x}",
        suffix=lambda: "abcde",
    )  # fmt: skip
    outcome = commands.decide(commands.decode(req), w.state.cluster, rctx, REGISTRY.updatable)
    return w.settle([a.event for a in outcome.appends])


def test_an_orphan_deletion_leaves_the_vmis_without_their_reference() -> None:
    w = world()
    w.run(ResourceCreated(meta=meta(ResourceKind.VMIRS, "web"), manifest=rs_manifest(2)))
    names = sorted(w.state.cluster.vmis)
    appended = _delete(w, "vmirs", "web", "Orphan")
    marking = appended[0]
    assert isinstance(marking, MetadataChanged) and marking.deletion
    assert marking.metadata["finalizers"] == ["orphan"]
    c = w.state.cluster
    assert "default/web" not in c.resources[ResourceKind.VMIRS]
    assert sorted(c.vmis) == names  # no replacement made while it was being deleted
    for vmi in c.vmis.values():
        assert vmi.deletion_requested_at is None and vmi.owners == []
    assert [e for e in w.tick() if isinstance(e, VMIDeleteRequested)] == []


def test_an_orphaned_vmi_outlives_its_deleted_vm() -> None:
    w = world()
    w.run(ResourceCreated(meta=meta(ResourceKind.VMPOOL, "pool"), manifest=pool_manifest(1)))
    c = w.state.cluster
    old = c.vms["default/pool-0"].uid
    assert c.vmis["default/pool-0"].owner_vm_uid == old
    _delete(w, "vm", "pool-0", "Orphan")
    # the VM went (its pool made a new one of the name, whose VMI's name is taken)
    assert c.vms["default/pool-0"].uid != old
    vmi = c.vmis["default/pool-0"]
    assert vmi.owner_vm_uid == "" and vmi.deletion_requested_at is None
    assert [e for e in w.tick() if isinstance(e, VMIDeleteRequested)] == []


def test_a_foreground_deletion_keeps_the_owner_until_its_dependents_are_gone() -> None:
    w = world()
    w.run(ResourceCreated(meta=meta(ResourceKind.VMIRS, "web"), manifest=rs_manifest(2)))
    c = w.state.cluster
    names = sorted(v.name for v in c.vmis.values())
    appended = _delete(w, "vmirs", "web", "Foreground")
    asked = sorted(e.meta.aggregate.name for e in appended if isinstance(e, VMIDeleteRequested))
    assert asked == names
    rs = c.resources[ResourceKind.VMIRS]["default/web"]  # still there, being deleted
    assert rs.marked and rs.finalizers == ["foregroundDeletion"]
    # the VMIs' guests stop; once the last is removed, the finalizer and the set go
    for name in names:
        w.run(VMIRemoved(meta=meta(Kind.VMI, name)))
    assert not c.vmis
    assert c.resources[ResourceKind.VMIRS]["default/web"].marked  # until the collector looks
    w.settle(w.tick())
    assert "default/web" not in c.resources[ResourceKind.VMIRS]


def test_a_finalizer_blocks_the_deletion_until_it_is_removed() -> None:
    w = world()
    w.run(ResourceCreated(meta=meta(ResourceKind.VMIRS, "web"), manifest=rs_manifest(0)))
    c = w.state.cluster
    w.given(MetadataChanged(meta=meta(ResourceKind.VMIRS, "web"),
                            metadata={"finalizers": ["example.com/keep"]}))  # fmt: skip
    assert _delete(w, "vmirs", "web")[0].meta.aggregate.name == "web"
    rs = c.resources[ResourceKind.VMIRS]["default/web"]
    assert rs.marked and rs.finalizers == ["example.com/keep"]
    assert "deletionTimestamp" in rs.manifest["metadata"]
    # deleting it again changes nothing; the finalizer removed, it goes
    assert _delete(w, "vmirs", "web") == []
    w.run(MetadataChanged(meta=meta(ResourceKind.VMIRS, "web"), metadata={}))
    assert "default/web" not in c.resources[ResourceKind.VMIRS]


def test_a_vmis_finalized_migrations_beyond_its_newest_five_are_deleted() -> None:
    """KubeVirt's buffer: a VMI keeps its newest five finalized migrations; older ones are
    deleted, oldest first; deleted or unfinished ones do not count."""
    cluster = Cluster()
    for seq, ev in enumerate(generate(1500), 1):
        subject = subjects.event_subject(ev.meta.aggregate, event_type(ev), ev.meta.node)
        cluster.apply(Stored(seq=seq, subject=subject, time=float(seq), event=ev))
    done = next(m for m in cluster.migrations.values() if m.final)
    cluster.migrations.clear()
    for i in range(8):
        mig = msgspec.structs.replace(
            done, name=f"m{i}", uid=f"u{i}", created_at=done.created_at + i, deleted=i == 7
        )
        cluster.migrations[f"{mig.namespace}/{mig.name}"] = mig
    running = msgspec.structs.replace(done, name="m8", uid="u8", phase="Running")
    cluster.migrations[f"{running.namespace}/m8"] = running
    own = Ownership()
    own.rebuild(cluster)
    assert [m.name for m in own.finalized_surplus(cluster)] == ["m0", "m1"]
    events = gc.collect(cluster, own, Context("virt-controller", "", 0.0, None))
    deletions = [e for e in events if isinstance(e, MigrationAbortRequested)]
    assert sorted(e.meta.aggregate.name for e in deletions) == ["m0", "m1"]
