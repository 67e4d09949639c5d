"""The port's `Bucket` on a JetStream key-value bucket (history 1: the latest value per
key), its errors the port's."""

from __future__ import annotations

import contextlib

from nats.js.api import KeyValueConfig, StorageType
from nats.js.client import JetStreamContext
from nats.js.errors import BucketNotFoundError, KeyNotFoundError, NoKeysError, NotFoundError
from nats.js.kv import KeyValue

from eventstore.nats_errors import translated
from eventstore.settings import StreamSettings


class JsBucket:
    __slots__ = ("kv",)

    def __init__(self, kv: KeyValue) -> None:
        self.kv = kv

    async def get(self, key: str) -> bytes | None:
        with translated():
            try:
                entry = await self.kv.get(key)
            except (KeyNotFoundError, NotFoundError):
                return None
        return entry.value or b""

    async def put(self, key: str, value: bytes) -> None:
        with translated():
            await self.kv.put(key, value)

    async def purge(self, key: str) -> None:
        with translated(), contextlib.suppress(KeyNotFoundError, NotFoundError):
            await self.kv.purge(key)

    async def keys(self) -> list[str]:
        with translated():
            try:
                return sorted(await self.kv.keys())
            except NoKeysError:
                return []


async def find_bucket(js: JetStreamContext, name: str) -> JsBucket | None:
    try:
        return JsBucket(await js.key_value(name))
    except BucketNotFoundError:
        return None


async def make_bucket(
    js: JetStreamContext, name: str, settings: StreamSettings, description: str = ""
) -> JsBucket:
    """Bind to the bucket, creating it if missing with the stream's storage and replicas."""
    if (found := await find_bucket(js, name)) is not None:
        return found
    storage = StorageType.FILE if settings.storage == "file" else StorageType.MEMORY
    cfg = KeyValueConfig(
        bucket=name,
        history=1,
        storage=storage,
        replicas=settings.replicas,
        description=description or None,
    )
    return JsBucket(await js.create_key_value(cfg))
