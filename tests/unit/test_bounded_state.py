"""What the services keep grows with what exists, not with the log's age: once every VM of
a history has ended (its migrations deleted, its VMI removed, the VM deleted), the api's
views, the controller's bookkeeping and the shell's per-aggregate versions hold none of
them; and a fold that forgot an ended aggregate's version still never folds one of its
events twice."""

from __future__ import annotations

import functools

import msgspec
import structlog
from hypothesis import given, settings
from hypothesis import strategies as st

from bench.bench_replay import generate
from events import subjects
from events.catalog import (
    DomainStopped,
    Event,
    MigrationAborted,
    MigrationAbortRequested,
    StopReason,
    VMDeleted,
    VMIRemoved,
)
from events.codec import event_type
from events.envelope import Stored
from events.meta import Actor, Aggregate, Kind, Meta
from projections.cluster import Cluster, key
from services.controller.checkpoint import ControllerCodec
from services.controller.reactor import ControllerReactor
from services.controller.state import ControllerState
from services.handler.reactor import HandlerState
from services.runtime.folding import Folding
from tests.unit.handler_support import decider


def _meta(agg: Aggregate, n: int, node: str = "") -> Meta:
    return Meta(
        event_id=f"end/{n}",
        aggregate=agg,
        occurred_at=1e9 + n,
        correlation_id=f"end/{n}",
        actor=Actor(service="test", node=node),
        node=node,
    )


def _ends(events: list[Event]) -> list[Event]:
    """Every object of `events` ended the way a user ends them: migrations deleted, VMs
    deleted, their VMIs stopped and removed (a migration under way aborted)."""
    cluster = Cluster()
    for seq, ev in enumerate(events, 1):
        cluster.apply(_stored(seq, ev))
    out: list[Event] = []
    for mig in cluster.migrations.values():
        agg = Aggregate(kind=Kind.MIGRATION, namespace=mig.namespace, name=mig.name)
        out.append(MigrationAbortRequested(meta=_meta(agg, len(out))))
        if not mig.final:  # the source aborts the transfer it was running
            out.append(MigrationAborted(meta=_meta(agg, len(out), mig.source_node)))
    for vm in cluster.vms.values():
        agg = Aggregate(kind=Kind.VM, namespace=vm.namespace, name=vm.name)
        out.append(VMDeleted(meta=_meta(agg, len(out))))
    for vmi in cluster.vmis.values():
        agg = Aggregate(kind=Kind.VMI, namespace=vmi.namespace, name=vmi.name, uid=vmi.uid)
        stopped = DomainStopped(meta=_meta(agg, len(out), vmi.node), reason=StopReason.DESTROYED)
        # routed to its node, as the controller routes it: its handler forgets the VMI
        out += [stopped, VMIRemoved(meta=_meta(agg, len(out) + 1, vmi.node))]
    return out


def _stored(seq: int, ev: Event) -> Stored:
    subject = subjects.event_subject(ev.meta.aggregate, event_type(ev), ev.meta.node)
    return Stored(seq=seq, subject=subject, time=float(seq), event=ev)


def _routed(events: list[Event]) -> list[Event]:
    """The generated VMI removals as the controller emits them: routed to the VMI's node,
    naming its uid."""
    cluster = Cluster()
    out: list[Event] = []
    for seq, ev in enumerate(events, 1):
        if isinstance(ev, VMIRemoved) and not ev.meta.node:
            agg = ev.meta.aggregate
            vmi = cluster.vmis.get(key(agg.namespace, agg.name))
            if vmi is not None and vmi.node:
                agg = msgspec.structs.replace(agg, uid=vmi.uid)
                ev = VMIRemoved(meta=msgspec.structs.replace(ev.meta, aggregate=agg, node=vmi.node))
        cluster.apply(_stored(seq, ev))
        out.append(ev)
    return out


@functools.cache
def ended_history(n: int) -> tuple[Stored, ...]:
    lives = _routed(list(generate(n)))
    return tuple(_stored(seq, ev) for seq, ev in enumerate([*lives, *_ends(lives)], 1))


def test_the_views_hold_no_ended_object() -> None:
    views = Cluster(kube_events=True)
    for s in ended_history(3000):
        views.apply(s)
    assert any(s.event.meta.aggregate.kind == Kind.MIGRATION for s in ended_history(3000))
    assert (views.vms, views.vmis, views.migrations) == ({}, {}, {})


def test_the_controller_forgets_what_ended() -> None:
    controller = ControllerReactor()
    state = ControllerState()
    for s in ended_history(3000):
        state = controller.evolve(state, s)
    assert state.cluster.migrations == {} and state.cluster.vms == {}
    assert state.last_outcome == {}
    assert state.abort_routed == {}
    assert state.phase_at_delete == {}
    assert not state.eviction_blocked


def test_a_migration_a_live_vmi_shows_stays_until_the_vmi_moves_on() -> None:
    """A finished migration deleted while its VMI lives is still the VMI's
    status.migrationState; it leaves the views with the VMI."""
    stop = ("VMStopRequested", "DomainStopped", "VMIRemoved")
    lives = [  # vm-0 migrates and keeps running
        ev
        for ev in generate(1500)
        if not (ev.meta.aggregate.name == "vm-0" and type(ev).__name__ in stop)
    ]
    cluster = Cluster()
    for seq, ev in enumerate(lives, 1):
        cluster.apply(_stored(seq, ev))
    mig = next(m for m in cluster.migrations.values() if m.vmi_name == "vm-0")
    assert mig.final
    vmi_key = key(mig.namespace, mig.vmi_name)
    assert cluster.vmis[vmi_key].migration == mig.name
    seq = len(lives)
    agg = Aggregate(kind=Kind.MIGRATION, namespace=mig.namespace, name=mig.name)
    seq += 1
    cluster.apply(_stored(seq, MigrationAbortRequested(meta=_meta(agg, seq))))
    assert cluster.migrations[key(mig.namespace, mig.name)].gone  # shown, gone for readers
    vmi = cluster.vmis[vmi_key]
    vagg = Aggregate(kind=Kind.VMI, namespace=vmi.namespace, name=vmi.name)
    seq += 1
    stopped = DomainStopped(meta=_meta(vagg, seq, vmi.node), reason=StopReason.DESTROYED)
    cluster.apply(_stored(seq, stopped))
    seq += 1
    cluster.apply(_stored(seq, VMIRemoved(meta=_meta(vagg, seq))))
    assert key(mig.namespace, mig.name) not in cluster.migrations


def _folding(controller: ControllerReactor) -> Folding[ControllerState]:
    return Folding(controller.evolve, ControllerState(), structlog.get_logger())


@settings(max_examples=20, deadline=None)
@given(st.integers(min_value=40, max_value=2500), st.floats(min_value=0.0, max_value=1.0))
def test_a_checkpoint_that_forgot_ended_versions_plus_tail_equals_a_full_rebuild(
    n: int, at: float
) -> None:
    """The shell forgets the versions of aggregates the state no longer holds when it
    checkpoints; resumed from that checkpoint, redeliveries from before it are not folded
    again and the tail makes what a full fold makes."""
    events = ended_history(n)
    k = int(len(events) * at)
    controller, codec = ControllerReactor(), ControllerCodec()
    full = _folding(controller)
    for s in events:
        full.fold(s)
    head = _folding(controller)
    for s in events[:k]:
        head.fold(s)
    head.forget(k, lambda agg: controller.holds(head.state, agg))
    assert all(v > k or controller.holds(head.state, a) for a, v in head.versions.items())
    resumed = _folding(controller)
    resumed.start_from(codec.decode(codec.encode(head.state)), k, head.versions, covered=k)
    for s in events[max(0, k - 200) : k]:  # redelivered: folded already
        assert not resumed.fold(s)
    for s in events[k:]:
        resumed.fold(s)
    assert codec.encode(resumed.state) == codec.encode(full.state)
    full.forget(len(events), lambda agg: controller.holds(full.state, agg))
    # at the end of the history nothing but the nodes is held
    assert {subjects.parse_key(a)[0] for a in full.versions} <= {str(Kind.NODE)}


def test_a_handler_forgets_the_versions_of_what_ended_on_its_node() -> None:
    d = decider("node-1")
    history = ended_history(3000)
    mine = [s for s in history if any(subjects.matches(f, s.subject) for f in d.filters())]
    folding = Folding(d.evolve, HandlerState(), structlog.get_logger())
    for s in mine:
        folding.fold(s)
    named = len(folding.versions)
    folding.forget(mine[-1].seq, lambda agg: d.holds(folding.state, agg))
    # what it keeps is what its state holds: its node, and the migration targets whose
    # outcome the generated history never routed here
    held = set(folding.versions)
    targets = {f"vmi/{k}" for k in folding.state.migrations.targets}
    assert held - targets <= {"node/_/node-1"}
    assert len(held) < named / 4


def test_a_forgotten_aggregate_learns_its_version_again_from_its_events() -> None:
    """An append to an aggregate whose version was forgotten expects it new and conflicts
    while the hot log still holds its events; the conflict's catch-up reads them: they are
    not folded again, and the version they carry is what the next append expects."""
    controller = ControllerReactor()
    events = ended_history(600)
    folding = _folding(controller)
    for s in events:
        folding.fold(s)
    folding.forget(len(events), lambda agg: controller.holds(folding.state, agg))
    vmi = next(s for s in events if s.event.meta.aggregate.kind == Kind.VMI)
    key = subjects.aggregate_key(vmi.subject)
    assert folding.version_of(vmi.subject) == 0
    mine = [s for s in events if subjects.aggregate_key(s.subject) == key]
    assert not any(folding.fold(s) for s in mine)
    assert folding.version_of(vmi.subject) == mine[-1].seq
