"""What the index writes for an event (eventstore/index.py: entries), pure."""

from __future__ import annotations

from events import subjects
from events.catalog import MigrationRequested, VMStartRequested
from events.codec import encode, event_type
from events.meta import Kind
from eventstore.index import (
    MSG_ID,
    SEQ_HEADER,
    Batch,
    correlation_subject,
    entries,
    entry_seqs,
    id_subject,
    migrations_subject,
)
from tests.factories import meta


def subject_of(ev: object) -> str:
    m = ev.meta  # type: ignore[attr-defined]
    return subjects.event_subject(m.aggregate, event_type(ev), m.node)  # type: ignore[arg-type]


def test_every_event_gets_its_correlation_and_no_event_id_entry() -> None:
    # an id that names no cause sequence (a keyed service id, the api's): its effects carry
    # its sequence (`causationSeq`), so the index keeps no id → sequence entry for it
    for eid in ("api/abc", "virt-controller/create-vmi/u1/2", "virt-controller/17/0"):
        ev = VMStartRequested(meta=meta(name="vm-1", event_id=eid))
        got = entries(subject_of(ev), encode(ev))
        assert got == [(correlation_subject(ev.meta.correlation_id), b"")]
        assert not any(subject.startswith("vidx.id.") for subject, _ in got)


def test_a_migration_request_is_filed_under_the_vmi_it_names() -> None:
    manifest = {"metadata": {"name": "m.1", "namespace": "default"}, "spec": {"vmiName": "vm 1"}}
    ev = MigrationRequested(meta=meta(name="m.1", kind=Kind.MIGRATION), manifest=manifest)
    got = entries(subject_of(ev), encode(ev))
    assert got[-1] == (migrations_subject("default", "vm 1"), b"m.1")
    assert not any(subject.startswith("vidx.id.") for subject, _ in got)
    # ids (an older index's entries, still read) are one plain subject token each
    assert id_subject("svc/1/0 *>").count(".") == 2


def test_poison_has_no_entries() -> None:
    assert entries("virt.vm.default.x.VMCreated._", b"{not json") == []


def test_a_batch_writes_one_entry_per_request_in_the_order_of_its_last_event() -> None:
    """A request's events in one batch share one correlation entry naming them all; other
    entries stay one each; the last message names the batch's last event (where a restart
    resumes), and a reader takes an entry of either form."""
    batch = Batch()
    a, b = correlation_subject("req-a"), correlation_subject("req-b")
    batch.add(10, [(a, b"")])
    batch.add(11, [(b, b""), (migrations_subject("default", "vmi1"), b"mig1")])
    batch.add(12, [(a, b"")])
    batch.add(13, [(b, b"")])
    messages = batch.messages()
    assert [(subject, body) for subject, body, _ in messages] == [
        (migrations_subject("default", "vmi1"), b"mig1"),
        (a, b"10,12"),
        (b, b"11,13"),
    ]
    assert [h[SEQ_HEADER] for _, _, h in messages] == ["11", "12", "13"]
    assert len({h[MSG_ID] for _, _, h in messages}) == 3
    assert entry_seqs("13", b"11,13") == [11, 13]
    assert entry_seqs("7", b"") == [7]  # an entry per event, as earlier code wrote it
