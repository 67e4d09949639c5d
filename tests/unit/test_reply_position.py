"""A JetStream message's place read from its reply subject, in both of its forms."""

from __future__ import annotations

import pytest
from nats.aio.msg import Msg
from nats.errors import NotJSMessageError

from eventstore.reply import Position, position


def _msg(reply: str) -> Msg:
    return Msg(_client=None, subject="virt.vm.x", reply=reply)  # type: ignore[arg-type]


def test_the_short_and_the_long_form() -> None:
    short = "$JS.ACK.VIRT.c1.1.42.7.1700000000123456789.3"
    assert position(_msg(short)) == Position(42, 3, 1700000000.123457)
    long = "$JS.ACK.hub.ACCHASH.VIRT.c1.1.42.7.1700000000123456789.3.rand"
    assert position(_msg(long)) == Position(42, 3, 1700000000.123457)
    assert position(_msg(long.rsplit(".", 1)[0])) == Position(42, 3, 1700000000.123457)


@pytest.mark.parametrize(
    "reply", ["", "_INBOX.abc", "$JS.ACK.VIRT.c1.1.42", "$JS.ACK.a.b.c.d.e.f.g.h"]
)
def test_a_reply_that_is_not_jetstreams(reply: str) -> None:
    with pytest.raises(NotJSMessageError):
        position(_msg(reply))
