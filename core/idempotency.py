"""`Idempotency-Key`: a client's key for a write, and the ids a keyed write decides with.
A retry of the same request with the same key is answered with the first one's result; the
same key with another request is refused. Pure: the shell keeps what each key decided (a
record: the request's fingerprint and its `Outcome`, in a bucket every api replica shares;
`services/api/service.py`, `eventstore/keyed.py`) and hands the clock in. Keys are their
user's own: the record's key and the ids a keyed request decides with are derived from
(user, key)."""

from __future__ import annotations

import hashlib
import string
from collections.abc import Callable
from dataclasses import dataclass
from typing import cast

import msgspec

from core.context import Append, Outcome, RequestContext
from core.errors import bad_request
from events.catalog import AnyEvent
from events.meta import KindToken

HEADER = "Idempotency-Key"
KEY_MAX = 256
ALNUM = string.ascii_lowercase + string.digits


@dataclass(frozen=True)
class Idempotency:
    """A client's key and what identifies its request (the command it addresses, its
    options and its body, the same over either transport)."""

    key: str
    fingerprint: str

    @classmethod
    def of(cls, key: str, identity: Callable[[], str], body: bytes) -> Idempotency | None:
        """From the header's value (None without one); `identity` is asked only then."""
        key = key.strip()
        if not key:
            return None
        if len(key) > KEY_MAX:
            raise bad_request(f"{HEADER} must be at most {KEY_MAX} characters")
        digest = hashlib.sha256(f"{identity()}\n".encode())
        digest.update(body)
        return cls(key, digest.hexdigest())


def keyed_context(correlation_id: str, key: str, now: float) -> RequestContext:
    """Ids derived from the idempotency key: a retried request decides the same event ids,
    uids and generated names, so JetStream's duplicate detection stores it once."""
    counter = iter(range(1 << 30))

    def derived(label: str) -> str:
        return hashlib.sha256(f"{key}\x00{label}\x00{next(counter)}".encode()).hexdigest()

    def suffix() -> str:
        digest = bytes.fromhex(derived("suffix"))
        return "".join(ALNUM[b % len(ALNUM)] for b in digest[:5])

    return RequestContext(
        now=now,
        correlation_id=correlation_id,
        new_id=lambda: derived("id")[:32],
        suffix=suffix,
    )


def scoped(user: str, key: str) -> str:
    """A user's key as the record's key and the ids' basis (hex: KV keys allow few
    characters, and neither the user's name nor the key need be readable in the bucket)."""
    return hashlib.sha256(f"{user}\x00{key}".encode()).hexdigest()


class _Append(msgspec.Struct, frozen=True):
    event: AnyEvent
    expected: int | None


class _Record(msgspec.Struct, frozen=True):
    fingerprint: str
    appends: tuple[_Append, ...]
    kind: KindToken
    key: str
    code: int
    warnings: tuple[str, ...] = ()


_encoder = msgspec.json.Encoder()
_decoder = msgspec.json.Decoder(_Record)


def encode_record(fingerprint: str, outcome: Outcome) -> bytes:
    """What a key decided: the request's fingerprint and the outcome, events included."""
    appends = tuple(_Append(cast(AnyEvent, a.event), a.expected) for a in outcome.appends)
    record = _Record(
        fingerprint, appends, outcome.kind, outcome.key, outcome.code, outcome.warnings
    )
    return _encoder.encode(record)


def decode_record(data: bytes) -> tuple[str, Outcome]:
    r = _decoder.decode(data)
    appends = tuple(Append(a.event, a.expected) for a in r.appends)
    return r.fingerprint, Outcome(appends, r.kind, r.key, r.code, r.warnings)
