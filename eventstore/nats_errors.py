"""nats-py's errors as the port's (`eventstore/port.py`), at the edge of every adapter
module: what may pass (the client cannot reach a server, a request went unanswered) is
`Unavailable` (`TimedOut` for a timeout); any other error of the client or answer of the
server is `Refused`. The port's own errors pass as they are."""

from __future__ import annotations

from types import TracebackType

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


class _Translated:
    """A context manager without state (one instance serves every block): an append and
    an ack pay a method call, not a generator's set-up."""

    __slots__ = ()

    def __enter__(self) -> None:
        return None

    def __exit__(
        self, kind: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        if isinstance(e, Exception) and (mapped := translate(e)) is not e:
            raise mapped from e


_TRANSLATED = _Translated()


def translated() -> _Translated:
    """Raise the port's errors for the client's in the block."""
    return _TRANSLATED
