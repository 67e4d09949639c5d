"""`Idempotency-Key`: what the first request with a key decided, kept where every api
replica finds it (`eventstore/keyed.py`), scoped to the user who sent it.

A record holds the request's fingerprint and its `Outcome` (the events it appends and the
object that answers). A retry with the same key, on any replica, appends those same events
again (JetStream drops them as duplicates of their ids) and answers the same object; the
same key with another request is refused. Keys are the user's own: another user's request
with the same key is its own request, neither answered with nor refused by the first's.
The record's key is a digest of (user, key): KV keys allow few characters, and neither
the user's name nor the client's key needs to be readable in the bucket."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import cast

import msgspec

from events.catalog import AnyEvent
from events.meta import Kind
from services.api.intents import Append, Outcome


@dataclass(frozen=True)
class Record:
    fingerprint: str
    outcome: Outcome


class _Append(msgspec.Struct, frozen=True):
    event: AnyEvent
    expected: int | None


class _Record(msgspec.Struct, frozen=True):
    fingerprint: str
    appends: tuple[_Append, ...]
    kind: Kind
    key: str
    code: int


_encoder = msgspec.json.Encoder()
_decoder = msgspec.json.Decoder(_Record)


def scoped(user: str, key: str) -> str:
    """The record's key for `user`'s `key` (also what the request's ids are derived from,
    so two users' requests with one key never share an event id)."""
    return hashlib.sha256(f"{user}\x00{key}".encode()).hexdigest()


def encode(fingerprint: str, outcome: Outcome) -> bytes:
    appends = tuple(_Append(cast(AnyEvent, a.event), a.expected) for a in outcome.appends)
    return _encoder.encode(_Record(fingerprint, appends, outcome.kind, outcome.key, outcome.code))


def decode(data: bytes) -> Record:
    r = _decoder.decode(data)
    appends = tuple(Append(a.event, a.expected) for a in r.appends)
    return Record(r.fingerprint, Outcome(appends, r.kind, r.key, r.code))
