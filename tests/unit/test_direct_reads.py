"""What a batched direct get's answer becomes (`eventstore/direct.py`): the same message,
sequence and time a consumer's delivery of it carries."""

from __future__ import annotations

import datetime as dt
from typing import Any, cast

from nats.aio.msg import Msg

from eventstore import direct


def test_the_servers_time_reads_as_a_consumers_nanoseconds() -> None:
    # RFC 3339 with the trailing zeros of the nanoseconds trimmed, as Go formats it
    assert direct._nanos("2026-11-26T08:16:04.415915123Z") == 1795680964_415915123
    assert direct._nanos("2026-11-26T08:16:04.41Z") == 1795680964_410000000
    assert direct._nanos("2026-11-26T08:16:04Z") == 1795680964_000000000


def test_an_answer_is_lifted_to_the_stored_message_with_its_own_headers() -> None:
    headers = {
        "Nats-Stream": "VIRT_ARCHIVE",
        "Nats-Subject": "virt.vm.default.a.VMCreated._",
        "Nats-Sequence": "48",
        "Nats-Time-Stamp": "2026-11-26T08:16:04.415915123Z",
        "Nats-Num-Pending": "9",
        "Nats-Last-Sequence": "0",
        "Nats-Msg-Id": "api/1",
    }
    reply = Msg(_client=cast(Any, None), subject="_INBOX.x", data=b"{}", headers=headers)
    msg = direct._lifted(reply, headers, "VIRT_ARCHIVE")
    assert (msg.subject, msg.data, msg.headers) == (
        "virt.vm.default.a.VMCreated._",
        b"{}",
        {"Nats-Msg-Id": "api/1"},
    )
    md = msg.metadata
    assert (md.sequence.stream, md.num_pending, md.stream) == (48, 9, "VIRT_ARCHIVE")
    # as nats-py reads a delivery's time: nanoseconds / 1e9, in UTC
    assert md.timestamp == dt.datetime.fromtimestamp(1795680964_415915123 / 1e9, dt.UTC)
