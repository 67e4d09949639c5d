"""What the debugging index holds of each event, as subjects and bodies (pure): an entry
under its correlation id, and for a migration request one under the VMI it names. The
JetStream index (`eventstore/index.py`) writes them to a stream of its own; the in-memory
log keeps them in a dict."""

from __future__ import annotations

import msgspec

from events import subjects
from events.meta import Kind

PREFIX = "vidx"


def id_subject(event_id: str) -> str:
    """Where an index written by earlier code holds an event id's sequence (none are
    written now)."""
    return f"{PREFIX}.id.{subjects.token(event_id)}"


CORRELATION_PREFIX = f"{PREFIX}.corr."


def correlation_subject(correlation_id: str) -> str:
    return f"{CORRELATION_PREFIX}{subjects.token(correlation_id)}"


def grouped_body(seqs: list[int]) -> bytes:
    """The body of one correlation entry for several events: their sequences."""
    return ",".join(map(str, seqs)).encode()


def entry_seqs(seq_header: str, body: bytes) -> list[int]:
    """The event sequences a correlation entry names: its body's (one entry for a batch's
    events of one request), else its `Virt-Seq` (an entry per event, as earlier code
    wrote them)."""
    if body:
        return [int(s) for s in body.split(b",") if s.isdigit()]
    return [int(seq_header)] if seq_header.isdigit() else []


def migrations_subject(namespace: str, vmi: str) -> str:
    return f"{PREFIX}.mig.{subjects.token(namespace)}.{subjects.token(vmi)}"


class _Meta(msgspec.Struct, rename="camel"):
    correlation_id: str


class _Spec(msgspec.Struct, frozen=True, rename="camel"):
    vmi_name: str = ""


class _Manifest(msgspec.Struct):
    spec: _Spec = _Spec()


class _Head(msgspec.Struct):
    """What the index reads of an event (msgspec skips the rest unparsed)."""

    meta: _Meta
    manifest: _Manifest | None = None


_head = msgspec.json.Decoder(_Head)


def entries(subject: str, data: bytes) -> list[tuple[str, bytes]]:
    """An event's index entries (subject, body); none for an undecodable one. Pure."""
    try:
        head = _head.decode(data)
    except (msgspec.DecodeError, msgspec.ValidationError):
        return []
    out = [(correlation_subject(head.meta.correlation_id), b"")]
    kind, ns, name, etype, _ = subjects.parse(subject)
    if kind == Kind.MIGRATION and etype == "MigrationRequested" and head.manifest is not None:
        vmi = head.manifest.spec.vmi_name
        if vmi:
            out.append((migrations_subject(ns, vmi), name.encode()))
    return out
