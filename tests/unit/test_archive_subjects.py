"""The archive's one-subject-per-aggregate layout (eventstore/archive.py): the original
subject computed back from the event, and the filters a read asks of the archive."""

from __future__ import annotations

from events import subjects
from events.catalog import VMIPauseRequested, VMStartRequested
from events.codec import event_type
from events.meta import Kind
from eventstore import archive
from tests.factories import meta


def test_an_archived_subject_becomes_the_one_its_append_built() -> None:
    ev = VMIPauseRequested(meta=meta(Kind.VMI, "web.1", "prod", node="node-1"))
    full = subjects.event_subject(ev.meta.aggregate, event_type(ev), ev.meta.node)
    assert full == "virt.vmi.prod.web~1.VMIPauseRequested.node-1"
    assert archive.original_subject("virt.vmi.prod.web~1.events", ev) == full
    # a full subject (the hot log's, an archive made before the transform) stays
    assert archive.original_subject(full, ev) == full


def test_the_transform_keeps_the_aggregate_and_drops_type_and_node() -> None:
    assert archive.TRANSFORM.src == "virt.*.*.*.*.*"
    assert archive.TRANSFORM.dest == "virt.{{wildcard(1)}}.{{wildcard(2)}}.{{wildcard(3)}}.events"
    # an aggregate's filter selects its collapsed subject
    assert subjects.matches(
        subjects.aggregate_filter(Kind.VM, "default", "vm1"), "virt.vm.default.vm1.events"
    )


def test_whole_aggregate_filters_are_served_as_they_are() -> None:
    assert archive.served(None) == (None, False)
    assert archive.served([subjects.ALL]) == (None, False)
    agg = [subjects.aggregate_filter(Kind.VM, "ns", "a"), subjects.kind_filter(Kind.VMI)]
    assert archive.served(agg) == (agg, False)


def test_narrower_filters_read_their_aggregates_and_are_kept_by_subject() -> None:
    one = subjects.type_filter(Kind.VMI, "VMIStarted", "node-1")  # virt.vmi.*.*.VMIStarted...
    assert archive.served([one]) == (["virt.vmi.*.*.>"], True)
    assert archive.served(["virt.vm.ns.a.VMStartRequested._"]) == (["virt.vm.ns.a.>"], True)
    # several that widen to the same, or one covering another: one filter, no overlap
    reactor = [
        subjects.node_filter(Kind.VMI, "node-1"),
        subjects.type_filter(Kind.MIGRATION, "MigrationScheduled", "node-1"),
        subjects.type_filter(Kind.MIGRATION, "MigrationSucceeded"),
        "virt.migration.ns.m1.>",
    ]
    assert archive.served(reactor) == (["virt.vmi.*.*.>", "virt.migration.*.*.>"], True)
    # a type across every kind: the archive cannot narrow it at all
    assert archive.served(["virt.*.*.*.VMStartRequested.*"]) == (["virt.*.*.*.>"], True)
    # widened filters that overlap without one covering the other: everything
    assert archive.served(["virt.vm.ns.*.A.*", "virt.vm.*.a.B.*"]) == (None, True)


def test_a_widened_read_keeps_exactly_what_the_filter_matches() -> None:
    ev = VMStartRequested(meta=meta(Kind.VM, "a", "ns"))
    orig = archive.original_subject("virt.vm.ns.a.events", ev)
    assert subjects.matches("virt.vm.*.*.VMStartRequested.*", orig)
    assert not subjects.matches("virt.vm.*.*.VMStopRequested.*", orig)
