"""Replay, time travel and causality: the pure parts, on a scripted lifecycle."""

from __future__ import annotations

import pytest

from events.catalog import VMStartRequested
from events.codec import decode, encode
from events.envelope import Context, Stored, seq_hint
from events.meta import CLUSTER_SCOPE, Aggregate, Kind
from kinds.registry import REGISTRY
from projections import replay
from projections.cluster import Cluster
from projections.replay import FieldChange, Point, RefError
from readside import view_checkpoints
from readside.causality import Chain, Hop, with_latencies
from readside.verify import compare
from tests.debug_scenario import VM_STATUS_AFTER, lifecycle

VM1 = Aggregate(kind=Kind.VM, namespace="default", name="vm1")
VMI1 = Aggregate(kind=Kind.VMI, namespace="default", name="vm1")


def test_refs_and_points_parse() -> None:
    assert REGISTRY.parse_ref("vm/default/vm1") == VM1
    assert REGISTRY.parse_ref("vmis/default/vm1") == VMI1
    assert REGISTRY.parse_ref("node/node-1") == Aggregate(
        kind=Kind.NODE, namespace=CLUSTER_SCOPE, name="node-1"
    )
    for bad in ("vm/vm1", "node/a/b", "pod/x/y", "vm//x"):
        with pytest.raises(RefError):
            REGISTRY.parse_ref(bad)
    assert replay.parse_point("42", 0.0) == Point(seq=42)
    assert replay.parse_point("5m", now=1000.0) == Point(time=700.0)
    assert replay.parse_point("@1700000000.5", 0.0) == Point(time=1700000000.5)
    assert replay.parse_point("2027-01-15T08:00:00Z", 0.0).time == 1800000000.0
    assert replay.parse_point("2027-01-15T08:00:00", 0.0).time == 1800000000.0
    with pytest.raises(RefError):
        replay.parse_point("yesterday", 0.0)


def test_event_filters_put_the_type_in_the_subject() -> None:
    assert replay.event_filters() == ["virt.>"]
    assert replay.event_filters(None, "DomainStarted") == ["virt.*.*.*.DomainStarted.*"]
    assert replay.event_filters(VMI1) == ["virt.vmi.default.vm1.>"]
    assert replay.event_filters(VMI1, "DomainPaused") == ["virt.vmi.default.vm1.DomainPaused.*"]


def test_event_line_and_json_carry_ids_and_key_fields() -> None:
    st = lifecycle().stored()
    line = replay.summarize(st[8])  # DomainStarted
    assert (line.seq, line.type, line.actor, line.aggregate) == (
        9,
        "DomainStarted",
        "handler@node-1",
        "vmi/default/vm1",
    )
    assert "domain=default_vm1" in line.fields and "→node-1" in line.fields
    assert "manifest" not in replay.summarize(st[4]).fields  # VMICreated
    js = replay.event_json(st[8])
    assert js["correlationId"] == "req-2" and js["causationId"] == "handler/7/0"
    assert js["data"] == {"node": "node-1", "domain": "default_vm1"}
    assert js["subject"] == "virt.vmi.default.vm1.DomainStarted.node-1"


def test_diff_is_readable_and_keys_conditions_by_type() -> None:
    before = {
        "status": {"phase": "Scheduling", "conditions": [{"type": "Ready", "status": "False"}]}
    }
    after = {
        "status": {
            "phase": "Running",
            "nodeName": "n1",
            "conditions": [{"type": "Ready", "status": "True"}],
        },
        "metadata": {"resourceVersion": "9"},
    }
    changes = replay.diff_objects(before, after)
    assert [str(c) for c in changes] == [
        "  status.phase: Scheduling → Running",
        "+ status.nodeName: n1",
        "  status.conditions[type=Ready].status: False → True",
    ]
    assert str(FieldChange("a", 1, None)) == "- a: 1"


def test_a_diff_leaves_the_managed_fields_out() -> None:
    """Each write rewrites its manager's entry (time, fields): the change is the rest."""
    entry = {"manager": "kubectl", "operation": "Update", "time": "2026-01-01T00:00:00Z"}
    before = {"metadata": {"labels": {"a": "1"}, "managedFields": [entry]}}
    after = {
        "metadata": {
            "labels": {"a": "2"},
            "managedFields": [{**entry, "time": "2026-01-01T00:01:00Z"}, {"manager": "x"}],
        }
    }
    assert [str(c) for c in replay.diff_objects(before, after)] == ["  metadata.labels.a: 1 → 2"]
    assert replay.diff_objects(None, after) == [FieldChange("metadata.labels.a", None, "2")]
    assert before["metadata"]["managedFields"] == [entry]  # the renderings are not touched


def test_replay_shows_the_vm_status_after_each_event_including_its_vmis() -> None:
    steps = list(replay.replay_steps(lifecycle().stored(), VM1))
    status = {
        s.stored.seq: c.after
        for s in steps
        for c in s.changes
        if c.path == "status.printableStatus"
    }
    assert status == VM_STATUS_AFTER
    own = [s.stored.seq for s in steps if s.own]
    assert own == [3, 4, 6, 21, 23]
    assert not any(s.own for s in steps if s.stored.seq in (9, 15))  # via the VMI, migration


def test_replay_of_the_vmi_follows_phases_and_the_migration() -> None:
    steps = list(replay.replay_steps(lifecycle().stored(), VMI1))
    phases = [(s.stored.seq, c.after) for s in steps for c in s.changes if c.path == "status.phase"]
    assert phases == [
        (5, "Pending"),
        (7, "Scheduling"),
        (8, "Scheduled"),
        (9, "Running"),
        (24, "Succeeded"),
    ]
    node = [
        (s.stored.seq, c.after) for s in steps for c in s.changes if c.path == "status.nodeName"
    ]
    assert node == [(7, "node-1"), (20, "node-2")]
    assert steps[-1].stored.seq == 26 and not steps[-1].exists
    assert [str(c) for c in steps[-1].changes] == ["- (object): deleted"]
    created = [str(c) for c in steps[0].changes]
    assert created[:2] == ["+ (object): created", "+ status.phase: Pending"]
    assert not any("spec." in c or c.startswith("- ") for c in created)


def test_fold_until_a_sequence_is_time_travel() -> None:
    st = lifecycle().stored()
    at11 = replay.fold(st[:11])
    vmi = replay.render_object(at11, Kind.VMI, "default/vm1", now=0)
    assert vmi is not None and vmi["status"]["conditions"][1]["type"] == "Paused"
    at26 = replay.fold(st)
    assert replay.render_object(at26, Kind.VMI, "default/vm1", now=0) is None
    vm = replay.render_object(at26, Kind.VM, "default/vm1", now=0)
    assert vm is not None and vm["status"]["printableStatus"] == "Stopped"


def test_snapshot_encoding_round_trips_the_views() -> None:
    st = lifecycle().stored()
    cluster = replay.fold(st[:20])
    data = view_checkpoints.encode_views(cluster)
    back = view_checkpoints.decode_views(data)
    assert view_checkpoints.encode_views(back) == data
    assert back.last_seq == 20 and back.vmis_by_node == {"node-2": {"default/vm1"}}
    # folding the tail onto the decoded snapshot equals folding everything
    assert view_checkpoints.encode_views(
        replay.fold(st[20:], back)
    ) == view_checkpoints.encode_views(replay.fold(st))
    assert view_checkpoints.encode_views(Cluster()) != data


def test_seq_hint_reads_the_cause_sequence_from_service_ids() -> None:
    assert seq_hint("controller/123/0") == 123
    assert seq_hint("handler-node-1/7/2") == 7
    assert seq_hint("api/req-1/0") is None
    assert seq_hint("controller/unresponsive/node-3/180") is None


def test_context_meta_names_its_cause_by_id_and_by_stream_sequence() -> None:
    request = lifecycle().stored()[3]  # VMStartRequested, the api's (a random id)
    assert isinstance(request.event, VMStartRequested) and request.seq == 4
    keyed = Context("virt-controller", "", 5.0, request).meta(VMI1, key="create-vmi/u/1")
    assert keyed.event_id == "virt-controller/create-vmi/u/1"  # names no sequence
    assert (keyed.causation_id, keyed.causation_seq) == (request.event.meta.event_id, 4)
    wire = encode(VMStartRequested(meta=keyed))
    assert b'"causationSeq":4' in wire and decode(wire).meta.causation_seq == 4
    # a decision no event caused (a timer's): neither, and nothing on the wire
    timer = Context("virt-controller", "", 5.0, None).meta(VMI1, key="unresponsive/n/1")
    assert (timer.causation_id, timer.causation_seq) == ("", 0)
    assert b"causationSeq" not in encode(VMStartRequested(meta=timer))
    unset = Stored(seq=9, subject="", time=0.0, event=VMStartRequested(meta=timer))
    assert Context("c", "", 6.0, unset).meta(VMI1).causation_seq == 9


def test_latencies_and_slowest_hop() -> None:
    def hop(at: float, t: str) -> Hop:
        return Hop(seq=1, at=at, type=t, actor="x", aggregate="a", detail="", link="causation")

    hops = with_latencies([hop(10.0, "A"), hop(10.1, "B"), hop(13.1, "C"), hop(13.2, "D")])
    chain = Chain(target="vm/x/y", hops=hops, complete=True)
    assert hops[0].latency is None and hops[2].latency == pytest.approx(3.0)
    assert chain.slowest == 2 and round(chain.total, 3) == 3.2


def test_verify_compare_reports_missing_extra_and_changed() -> None:
    a = {"ns/a": {"status": {"phase": "Running"}}, "ns/b": {}}
    b = {
        "ns/a": {"status": {"phase": "Failed", "heartbeatAgeSeconds": 3}},
        "ns/c": {},
    }
    diffs = compare(Kind.VMI, a, b)
    assert [(d.key, d.problem) for d in diffs] == [
        ("ns/a", "differs"),
        ("ns/b", "missing-live"),
        ("ns/c", "extra-live"),
    ]
    assert [str(c) for c in diffs[0].changes] == ["  status.phase: Running → Failed"]
