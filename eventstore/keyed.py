"""Records kept for a while under a key, first writer wins: where every api replica finds
what the first request with an `Idempotency-Key` decided (`services/api/idempotency.py`).

`KeyedRecords` is the port; `JetStreamKeyedRecords` keeps them in a JetStream key-value
bucket (`virt-idempotency`, as many replicas as the event stream, entries expiring after
the stream's duplicate window: past it a re-append would no longer be dropped as a
duplicate); `MemoryKeyedRecords` keeps them in one process (a store-less test, an api
without JetStream). Not events: a record is a cache of a decision whose events are in the
log, so it is not history and may expire."""

from __future__ import annotations

import time
from collections import OrderedDict
from typing import Protocol

from nats.js.api import KeyValueConfig, StorageType
from nats.js.client import JetStreamContext
from nats.js.errors import (
    BucketNotFoundError,
    KeyDeletedError,
    KeyNotFoundError,
    KeyWrongLastSequenceError,
    NotFoundError,
)
from nats.js.kv import KeyValue

from eventstore.nats_errors import translated

BUCKET = "virt-idempotency"


class KeyedRecords(Protocol):
    async def get(self, key: str) -> bytes | None:
        """The record under `key`, None when there is none (or it expired)."""
        ...

    async def create(self, key: str, value: bytes) -> bytes | None:
        """Store `value` under `key` unless a record is there: None when stored, else the
        record found (another request got there first)."""
        ...

    async def put(self, key: str, value: bytes) -> None:
        """Store `value` under `key`, replacing what is there."""
        ...


class MemoryKeyedRecords:
    """One process's records, the oldest forgotten first past `ttl` or `limit`."""

    def __init__(self, ttl: float, limit: int = 10_000) -> None:
        self.ttl, self.limit = ttl, limit
        self._records: OrderedDict[str, tuple[float, bytes]] = OrderedDict()

    def _expire(self) -> None:
        now = time.monotonic()
        while self._records:
            at, _ = next(iter(self._records.values()))
            if now - at <= self.ttl and len(self._records) <= self.limit:
                break
            self._records.popitem(last=False)

    async def get(self, key: str) -> bytes | None:
        self._expire()
        found = self._records.get(key)
        return found[1] if found else None

    async def create(self, key: str, value: bytes) -> bytes | None:
        self._expire()
        if (found := self._records.get(key)) is not None:
            return found[1]
        self._records[key] = (time.monotonic(), value)
        return None

    async def put(self, key: str, value: bytes) -> None:
        self._records.pop(key, None)
        self._records[key] = (time.monotonic(), value)


class JetStreamKeyedRecords:
    """The bucket, bound (or created) on first use; it raises the port's errors
    (`eventstore/port.py`), as every adapter does."""

    def __init__(
        self,
        js: JetStreamContext,
        ttl: float,
        *,
        bucket: str = BUCKET,
        replicas: int = 1,
        storage: StorageType = StorageType.FILE,
    ) -> None:
        self.js, self.ttl, self.bucket = js, ttl, bucket
        self.replicas, self.storage = replicas, storage
        self._kv: KeyValue | None = None

    async def _open(self) -> KeyValue:
        if self._kv is None:
            try:
                self._kv = await self.js.key_value(self.bucket)
            except (BucketNotFoundError, NotFoundError):
                cfg = KeyValueConfig(
                    bucket=self.bucket,
                    history=1,
                    ttl=self.ttl,
                    storage=self.storage,
                    replicas=self.replicas,
                )
                try:
                    self._kv = await self.js.create_key_value(cfg)
                except Exception:  # a concurrent creator won: bind to its bucket
                    self._kv = await self.js.key_value(self.bucket)
        return self._kv

    async def get(self, key: str) -> bytes | None:
        with translated():
            return await self._get(key)

    async def _get(self, key: str) -> bytes | None:
        kv = await self._open()
        try:
            entry = await kv.get(key)
        except (KeyNotFoundError, KeyDeletedError):
            return None
        return entry.value or None

    async def create(self, key: str, value: bytes) -> bytes | None:
        with translated():
            return await self._create(key, value)

    async def _create(self, key: str, value: bytes) -> bytes | None:
        kv = await self._open()
        for _ in range(3):
            try:
                await kv.create(key, value)
                return None
            except KeyWrongLastSequenceError:
                found = await self._get(key)
                if found is not None:
                    return found
                # expired (or deleted) between the two: ours goes in now
        raise KeyWrongLastSequenceError(description=f"the key {key} keeps changing")

    async def put(self, key: str, value: bytes) -> None:
        with translated():
            kv = await self._open()
            await kv.put(key, value)
