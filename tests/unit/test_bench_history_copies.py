"""The history benchmark's copies of a recorded lifecycle (bench/bench_history.py): every
copied effect names its cause by id and by sequence, each the copy's own (or, for a cause
outside the template, the same event), so `why` walks a copy by direct gets as it walks
the original."""

from __future__ import annotations

from bench.bench_history import WAVE, Template, copies
from events.catalog import VMStopRequested
from events.envelope import Stored
from events.meta import Kind
from tests.debug_scenario import lifecycle


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
