"""nats-py's errors become the port's at the adapter's edge; a timeout stays a
`TimeoutError`, so a caller bounding or retrying waits on timeouts (verify) keeps doing so."""

from __future__ import annotations

import nats.errors
import nats.js.errors
import pytest

from eventstore.nats_errors import translate, translated
from eventstore.port import ConcurrencyConflict, EventLogError, Refused, TimedOut, Unavailable


@pytest.mark.parametrize(
    ("error", "port"),
    [
        (nats.errors.TimeoutError(), TimedOut),
        (nats.js.errors.FetchTimeoutError(), TimedOut),
        (nats.errors.ConnectionClosedError(), Unavailable),
        (nats.errors.ConnectionReconnectingError(), Unavailable),
        (nats.errors.NoRespondersError(), Unavailable),
        (nats.js.errors.ServiceUnavailableError(), Unavailable),
        (ConnectionResetError("reset by peer"), Unavailable),
        (nats.js.errors.NotFoundError(), Refused),
        (nats.js.errors.APIError(code=400, description="bad request"), Refused),
        (nats.errors.MaxPayloadError(), Refused),
    ],
    ids=lambda v: type(v).__name__,
)
def test_the_clients_errors_become_the_ports(error: Exception, port: type) -> None:
    with pytest.raises(port) as raised, translated():
        raise error
    assert type(raised.value) is port and raised.value.__cause__ is error
    assert isinstance(raised.value, EventLogError)


def test_a_timeout_of_the_log_is_still_a_timeout() -> None:
    assert isinstance(translate(nats.errors.TimeoutError()), TimeoutError)


def test_the_ports_own_and_other_errors_pass_as_they_are() -> None:
    conflict = ConcurrencyConflict("vm/default/a", 1, 2)
    assert translate(conflict) is conflict
    bug = ValueError("a bug")
    assert translate(bug) is bug
