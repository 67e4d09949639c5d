"""The history benchmark's copies of a recorded lifecycle (bench/bench_history.py): every
copied effect names its cause by id and by sequence, each the copy's own (or, for a cause
outside the template, the same event), so `why` walks a copy by direct gets as it walks
the original."""

from __future__ import annotations

from bench.bench_history import TEMPLATE, WAVE, Template, copies
from events.catalog import VMDeleted, VMRunStrategyChanged, VMStartRequested, VMStopRequested
from events.codec import event_type
from events.envelope import Stored
from events.meta import Kind
from events.subjects import event_subject
from services.controller.reactor import ControllerReactor
from services.controller.whatif import WhatIf
from tests.debug_scenario import lifecycle
from tests.unit.test_controller_world import World


def test_a_copys_effects_name_the_copys_causes_by_id_and_by_sequence() -> None:
    s = lifecycle()
    # a keyed effect (its id names no sequence) of a cause outside the template (a node's)
    s.emit(VMStopRequested, Kind.VM, "vm1", by="ctl", cause=1, event_id="ctl/k", vmi_uid="x")
    log = s.stored()
    template = Template([st for st in log if st.event.meta.aggregate.kind != Kind.NODE])
    first = len(log) + 1
    written = [
        Stored(seq=seq, subject="", time=0.0, event=ev)
        for seq, (_, ev) in enumerate(copies(template, first, WAVE * len(template), 0.0), first)
    ]
    by_seq = {st.seq: st for st in [*log, *written]}
    effects = [st for st in written if st.event.meta.causation_id]
    assert effects and all(st.event.meta.causation_seq for st in effects)
    for st in effects:
        m = st.event.meta
        assert 0 < m.causation_seq < st.seq
        assert by_seq[m.causation_seq].event.meta.event_id == m.causation_id, st
    outside = [st for st in written if st.event.meta.causation_seq == 1]
    assert outside and all(
        st.event.meta.causation_id == log[0].event.meta.event_id for st in outside
    )


def recorded_life() -> World:
    """A VM's life as the controller writes it (the benchmark's template, in small): two
    nodes; created, run, stopped, started and run again, stopped, deleted."""
    w = World()
    for n in ("node1", "node2"):
        w.run(w.node_joined(n))
    w.run(w.vm_created(TEMPLATE))
    w.start_running(TEMPLATE)
    for again in (True, False):
        w.now += 1.0
        uid = w.vmi(TEMPLATE).uid  # type: ignore[union-attr]
        w.run(VMRunStrategyChanged(meta=w.m(Kind.VM, TEMPLATE), run_strategy="Halted"))
        w.run(VMStopRequested(meta=w.m(Kind.VM, TEMPLATE), vmi_uid=uid))
        w.stop_guest(TEMPLATE)
        if again:
            w.run(VMRunStrategyChanged(meta=w.m(Kind.VM, TEMPLATE), run_strategy="Always"))
            w.run(VMStartRequested(meta=w.m(Kind.VM, TEMPLATE)))
            w.start_running(TEMPLATE)
    w.run(VMDeleted(meta=w.m(Kind.VM, TEMPLATE)))
    return w


def year(w: World, width: int) -> list[Stored]:
    template = Template([s for s in w.log if s.event.meta.aggregate.kind in (Kind.VM, Kind.VMI)])
    first = len(w.log) + 1
    written = copies(template, first, 30 * len(template), 0.0, width)
    return [
        *w.log,
        *(Stored(seq, event_subject(ev.meta.aggregate, event_type(ev), ev.meta.node), w.now, ev)
          for seq, (_, ev) in enumerate(written, first)),
    ]  # fmt: skip


def test_a_year_of_copies_one_after_another_is_a_history_the_controller_would_write() -> None:
    """The copies' controller decisions (their ids, the uids and pod names derived from
    them) are what today's controller decides on the copies: `whatif` finds no difference."""
    w = recorded_life()
    log = year(w, width=1)
    sandbox = WhatIf(ControllerReactor(node_timeout=1e9))
    for s in log:
        sandbox.feed(s)
    report = sandbox.report()
    assert report.differences == [], report.differences[0]
    live = sum(s.event.meta.actor.service == "virt-controller" for s in w.log)
    assert report.summary.reproduced == report.summary.live_decisions > 30 * live / 2


def test_interleaved_copies_are_placed_where_the_template_was() -> None:
    """Why `--whatif` writes the copies one at a time: interleaved, every copy's VMI is on
    the template's node at once, where today's scheduler would have spread them."""
    sandbox = WhatIf(ControllerReactor(node_timeout=1e9))
    for s in year(recorded_life(), width=WAVE):
        sandbox.feed(s)
    diffs = sandbox.report().differences
    placed = {side.type for d in diffs for side in (d.live, d.whatif) if side is not None}
    assert "PodScheduled" in placed
