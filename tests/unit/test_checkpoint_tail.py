"""Checkpoint + tail equals a full rebuild, for every service's state: the controller's, a
handler's (its node's events), the api's views and the metrics read off them. Over
generated histories (hypothesis picks the history's length and where the checkpoint is
taken); the checkpoint goes through its codec's bytes, as it goes through the bucket."""

from __future__ import annotations

import functools

from hypothesis import given, settings
from hypothesis import strategies as st

from bench.bench_replay import generate
from events import subjects
from events.codec import event_type
from events.envelope import Stored
from projections.cluster import Cluster
from projections.views_codec import decode_views, encode_views
from readside.metrics import PhaseHistograms, ProjectionMetrics
from services.controller.checkpoint import ControllerCodec
from services.controller.reactor import ControllerReactor
from services.controller.state import ControllerState
from services.handler.checkpoint import HandlerCodec
from services.handler.reactor import HandlerState
from tests.unit.handler_support import decider


@functools.cache
def history(n: int) -> tuple[Stored, ...]:
    out = []
    for seq, ev in enumerate(generate(n), 1):
        subject = subjects.event_subject(ev.meta.aggregate, event_type(ev), ev.meta.node)
        out.append(Stored(seq=seq, subject=subject, time=float(seq), event=ev))
    return tuple(out)


sizes = st.integers(min_value=20, max_value=2500)
splits = st.floats(min_value=0.0, max_value=1.0)


@settings(max_examples=25, deadline=None)
@given(sizes, splits)
def test_controller_checkpoint_plus_tail_equals_a_full_rebuild(n: int, at: float) -> None:
    events = history(n)
    k = int(len(events) * at)
    controller, codec = ControllerReactor(), ControllerCodec()
    full = ControllerState()
    for s in events:
        full = controller.evolve(full, s)
    head = ControllerState()
    for s in events[:k]:
        head = controller.evolve(head, s)
    resumed = codec.decode(codec.encode(head))
    for s in events[k:]:
        resumed = controller.evolve(resumed, s)
    assert codec.encode(resumed) == codec.encode(full)
    # the derived index is what a full fold kept in step
    assert resumed.index._counted == full.index._counted
    assert resumed.index._used == full.index._used
    assert resumed.index.unplaced == full.index.unplaced
    assert resumed.index.active_migrations == full.index.active_migrations


@settings(max_examples=25, deadline=None)
@given(sizes, splits, st.integers(min_value=0, max_value=7))
def test_handler_checkpoint_plus_tail_equals_a_full_rebuild(n: int, at: float, i: int) -> None:
    d = decider(f"node-{i}")
    mine = [s for s in history(n) if any(subjects.matches(f, s.subject) for f in d.filters())]
    k = int(len(mine) * at)
    codec = HandlerCodec()
    full = HandlerState()
    for s in mine:
        full = d.evolve(full, s)
    head = HandlerState()
    for s in mine[:k]:
        head = d.evolve(head, s)
    resumed = codec.decode(codec.encode(head))
    for s in mine[k:]:
        resumed = d.evolve(resumed, s)
    assert codec.encode(resumed) == codec.encode(full)
    assert resumed.records == full.records


@settings(max_examples=25, deadline=None)
@given(sizes, splits)
def test_api_views_and_metrics_checkpoint_plus_tail_equal_a_full_rebuild(n: int, at: float) -> None:
    events = history(n)
    k = int(len(events) * at)
    hist = PhaseHistograms(registry=None)
    full = Cluster()
    full_metrics = ProjectionMetrics(full, histograms=hist)
    for s in events:
        full_metrics.observe(s, full.apply(s), replaying=True)
    head = Cluster()
    for s in events[:k]:
        head.apply(s)
    resumed = decode_views(encode_views(head))
    metrics = ProjectionMetrics(resumed, histograms=hist)  # as the runner builds it on load
    for s in events[k:]:
        metrics.observe(s, resumed.apply(s), replaying=True)
    assert encode_views(resumed) == encode_views(full)
    assert resumed.vmis_by_node == {n: ks for n, ks in full.vmis_by_node.items() if ks}
    assert metrics._vmi_seen == full_metrics._vmi_seen
    assert metrics._mig_seen == full_metrics._mig_seen
