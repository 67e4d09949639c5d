"""Reading and retrying the dead-letter stream (`VIRT_DLQ`, subjects `dlq.<service>`).

`JetStreamStore.dead_letter` parks a message a service could not handle with its original
bytes and the headers `Virt-Error`, `Virt-Service`, `Virt-Original-Subject`,
`Virt-Original-Sequence`. A retry appends the original bytes to the original subject
again (after a fix the service handles it like any new event; every other consumer sees a
redelivery, which level-triggered deciders ignore) and then deletes the dead letter. The
retry's `Nats-Msg-Id` is derived from the dead letter, so a retry that is repeated after a
crash between the append and the delete is dropped as a duplicate."""

from __future__ import annotations

import contextlib

import msgspec
from nats.js.errors import NotFoundError

from events.catalog import Event
from events.codec import decode
from eventstore.jetstream import REDELIVERY_HEADER, JetStreamStore
from eventstore.nats_errors import translated

RETRY_HEADER = "Virt-Retry-Of"  # "<dlq stream>/<dlq seq>" on the re-appended event


class DeadLetter(msgspec.Struct, frozen=True):
    seq: int  # in the dead-letter stream
    time: float
    service: str
    error: str
    original_subject: str
    original_seq: int | None
    data: bytes
    event: Event | None  # None when the bytes do not decode (the reason it died, maybe)


async def list_dead_letters(store: JetStreamStore) -> list[DeadLetter]:
    with translated():
        return await _list(store)


async def _list(store: JetStreamStore) -> list[DeadLetter]:
    out: list[DeadLetter] = []
    js = store.js
    dlq = store.settings.dlq_name
    try:
        info = await js.stream_info(dlq)
    except NotFoundError:
        return out
    last = int(info.state.last_seq)
    if info.state.messages == 0:
        return out
    sub = await js.subscribe("dlq.>", stream=dlq, ordered_consumer=True)
    try:
        while True:
            msg = await sub.next_msg(timeout=5.0)
            h = msg.headers or {}
            md = msg.metadata
            event: Event | None
            try:
                event = decode(msg.data)
            except (msgspec.DecodeError, msgspec.ValidationError):
                event = None
            orig = h.get("Virt-Original-Sequence", "")
            out.append(
                DeadLetter(
                    seq=md.sequence.stream,
                    time=md.timestamp.timestamp() if md.timestamp else 0.0,
                    service=h.get("Virt-Service", msg.subject.removeprefix("dlq.")),
                    error=h.get("Virt-Error", ""),
                    original_subject=h.get("Virt-Original-Subject", ""),
                    original_seq=int(orig) if orig.isdigit() else None,
                    data=msg.data,
                    event=event,
                )
            )
            if md.num_pending == 0 or md.sequence.stream >= last:
                break
    finally:
        await sub.unsubscribe()
    return out


class Retried(msgspec.Struct, frozen=True):
    dead_letter_seq: int
    subject: str
    new_seq: int
    duplicate: bool


async def retry(store: JetStreamStore, dl: DeadLetter) -> Retried:
    """Append the dead letter's original bytes to its original subject, then delete it."""
    if not dl.original_subject:
        raise ValueError(f"dead letter {dl.seq} has no original subject to retry to")
    with translated():
        return await _retry(store, dl)


async def _retry(store: JetStreamStore, dl: DeadLetter) -> Retried:
    dlq = store.settings.dlq_name
    headers = {
        "Nats-Msg-Id": f"retry/{dlq}/{dl.seq}",
        RETRY_HEADER: f"{dlq}/{dl.seq}",
    }
    if dl.original_seq:
        headers[REDELIVERY_HEADER] = str(dl.original_seq)
    ack = await store.js.publish(dl.original_subject, dl.data, stream=store.stream, headers=headers)
    with contextlib.suppress(NotFoundError):
        await store.js.delete_msg(dlq, dl.seq)
    return Retried(dl.seq, dl.original_subject, int(ack.seq), bool(ack.duplicate))
