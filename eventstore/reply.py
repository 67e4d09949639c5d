"""A JetStream message's place in its stream, read from its reply subject.

nats-py's `msg.metadata` builds a dataclass and two sequence pairs beside the time for
every message (with the time, about a tenth of a rebuild's CPU); a reader of the log needs
three numbers of it. The reply subject is `$JS.ACK.<stream>.<consumer>.<delivered>.<stream
seq>.<consumer seq>.<time ns>.<pending>` (nine tokens), or with a domain and an account
hash after `$JS.ACK` (eleven or twelve). A message with its metadata already made (a
direct get's, or one read before) is read from that."""

from __future__ import annotations

import datetime as dt
from typing import NamedTuple

from nats.aio.msg import Msg
from nats.errors import NotJSMessageError

_V1 = 9  # tokens of the short form; the long form has two more (and maybe a random one)


class Position(NamedTuple):
    seq: int  # the stream's sequence
    pending: int  # the consumer's messages left after this one
    time: float  # when the stream stored it, epoch seconds


def position(msg: Msg) -> Position:
    """Raises nats' `NotJSMessageError` for a message without a JetStream reply (or the
    metadata a direct get's answer is given: `direct._lifted`)."""
    md = msg._metadata
    if md is not None:
        return Position(md.sequence.stream, md.num_pending, md.timestamp.timestamp())
    tokens = (msg.reply or "").split(".")
    if len(tokens) < _V1 or tokens[0] != "$JS" or tokens[1] != "ACK":
        raise NotJSMessageError
    at = 0 if len(tokens) == _V1 else 2  # the long form's domain and account hash
    if at and len(tokens) < _V1 + 2:
        raise NotJSMessageError
    return Position(int(tokens[5 + at]), int(tokens[8 + at]), _seconds(int(tokens[7 + at])))


def _seconds(nanos: int) -> float:
    """As nats-py's metadata has it (a datetime: whole microseconds), so a time read here
    is the one every other reader, and every earlier version, read for the message."""
    return dt.datetime.fromtimestamp(nanos / 1e9, dt.UTC).timestamp()
