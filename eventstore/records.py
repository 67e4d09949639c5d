"""A stored message's bytes decoded into the event a replay gives: for a reader that reads
the log in one process and folds it in another (`services/whatif/replay.py`)."""

from __future__ import annotations

import msgspec

from events.codec import decode
from events.envelope import Stored
from eventstore import archive
from eventstore.port import Record, Undecodable


def stored(record: Record) -> Stored:
    """The record's event, with its own subject (an archived one's computed from the
    event); `Undecodable` when the bytes are not an event of this version's catalog."""
    try:
        event = decode(record.data)
    except (msgspec.DecodeError, msgspec.ValidationError) as e:
        raise Undecodable(str(e)) from e
    return Stored(
        seq=record.seq,
        subject=archive.original_subject(record.subject, event),
        time=record.time,
        event=event,
        redelivery_of=record.redelivery_of,
    )
