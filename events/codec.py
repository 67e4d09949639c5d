"""Wire codec: msgspec JSON for the tagged union, upcasting legacy shapes on read."""

from __future__ import annotations

import msgspec

from events.catalog import AnyEvent, Event
from events.legacy import LegacyEvent, upcast

_encoder = msgspec.json.Encoder()
_decoder: msgspec.json.Decoder[AnyEvent | LegacyEvent] = msgspec.json.Decoder(
    AnyEvent | LegacyEvent
)
_LEGACY = LegacyEvent


def encode(event: Event) -> bytes:
    return _encoder.encode(event)


def decode(data: bytes) -> Event:
    """Decode one stored event; raises msgspec.DecodeError/ValidationError on garbage."""
    event = _decoder.decode(data)
    if isinstance(event, _LEGACY):
        return upcast(event)
    return event


def event_type(event: Event) -> str:
    """The subject token for an event: its class name (stable, tag minus version)."""
    return type(event).__name__


def to_dict(event: Event) -> dict[str, object]:
    return msgspec.to_builtins(event)
