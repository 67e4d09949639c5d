"""`Idempotency-Key`: a client's key for a write, and the ids a keyed write decides with.
A retry of the same request with the same key is answered with the first one's result; the
same key with another request is refused. Pure: the shell remembers the keys it answered
(`services/api/service.py`) and hands the clock in."""

from __future__ import annotations

import hashlib
import string
from collections.abc import Callable
from dataclasses import dataclass

from core.context import RequestContext
from core.errors import bad_request

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
