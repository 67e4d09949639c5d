"""What the index writes for an event (eventstore/index.py: entries), pure."""

from __future__ import annotations

from events import subjects
from events.catalog import MigrationRequested, VMStartRequested
from events.codec import encode, event_type
from events.meta import Kind
from eventstore.index import correlation_subject, entries, id_subject, migrations_subject
from tests.factories import meta


def subject_of(ev: object) -> str:
    m = ev.meta  # type: ignore[attr-defined]
    return subjects.event_subject(m.aggregate, event_type(ev), m.node)  # type: ignore[arg-type]


def test_every_event_gets_its_correlation_and_an_id_without_a_cause_sequence_its_id() -> None:
    ev = VMStartRequested(meta=meta(name="vm-1", event_id="api/abc"))
    got = entries(subject_of(ev), encode(ev))
    assert got == [
        (id_subject(ev.meta.event_id), b""),
        (correlation_subject(ev.meta.correlation_id), b""),
    ]
    hinted = VMStartRequested(meta=meta(name="vm-1", event_id="virt-controller/17/0"))
    assert entries(subject_of(hinted), encode(hinted)) == [
        (correlation_subject(hinted.meta.correlation_id), b"")
    ]


def test_a_migration_request_is_filed_under_the_vmi_it_names() -> None:
    manifest = {"metadata": {"name": "m.1", "namespace": "default"}, "spec": {"vmiName": "vm 1"}}
    ev = MigrationRequested(meta=meta(name="m.1", kind=Kind.MIGRATION), manifest=manifest)
    got = entries(subject_of(ev), encode(ev))
    assert got[-1] == (migrations_subject("default", "vm 1"), b"m.1")
    # ids become one plain subject token each: no wildcard, no extra token
    assert id_subject("svc/1/0 *>").count(".") == 2


def test_poison_has_no_entries() -> None:
    assert entries("virt.vm.default.x.VMCreated._", b"{not json") == []
