"""nats-py's errors as the port's (`eventstore/port.py`), at the edge of every adapter
module: what may pass (the client cannot reach a server, a request went unanswered) is
`Unavailable` (`TimedOut` for a timeout); any other error of the client or answer of the
server is `Refused`. The port's own errors pass as they are."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import nats.errors
import nats.js.errors

from eventstore.port import EventLogError, Refused, TimedOut, Unavailable

# the request may not have reached the server, or its answer not us
PASSING: tuple[type[BaseException], ...] = (
    nats.errors.NoRespondersError,
    nats.errors.ConnectionClosedError,
    nats.errors.ConnectionReconnectingError,
    nats.errors.OutboundBufferLimitError,
    nats.errors.StaleConnectionError,
    nats.errors.UnexpectedEOF,
    nats.js.errors.ServiceUnavailableError,
    nats.js.errors.NoStreamResponseError,
    OSError,
)


def translate(e: BaseException) -> BaseException:
    """The port's error for `e` (`e` itself when it is none of the client's)."""
    if isinstance(e, EventLogError):
        return e
    said = f"{type(e).__name__}: {e}" if str(e) else type(e).__name__
    if isinstance(e, TimeoutError):  # nats' TimeoutError is one too
        return TimedOut(said)
    if isinstance(e, PASSING):
        return Unavailable(said)
    if isinstance(e, nats.errors.Error):
        return Refused(said)
    return e


@contextlib.contextmanager
def translated() -> Iterator[None]:
    """Raise the port's errors for the client's in the block."""
    try:
        yield
    except Exception as e:
        mapped = translate(e)
        if mapped is e:
            raise
        raise mapped from e
