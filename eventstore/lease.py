"""An exclusive lease in a JetStream key-value bucket: who is the active controller.

The bucket's max age is the lease's TTL. The holder writes its identity under the key and
renews it (an update that names the revision it last wrote) every TTL/4; a candidate
`create`s the key, which succeeds only once the key is gone: deleted by a holder that
stopped cleanly, or expired a TTL after the last renewal of one that died. A holder that
cannot renew for `TTL * STEP_DOWN` (well before the entry expires at the server) counts
the lease as lost and must stop acting, so two holders never act at once.

A candidate whose identity is already the holder's takes the lease over at once: a
supervised process restarted under the same identity (`up`, systemd: one per host) does
not wait out its own dead incarnation's TTL.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable

import nats.errors
import structlog
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
from eventstore.port import Unavailable
from eventstore.tasks import finish

BUCKET = "virt-leases"
STEP_DOWN = 0.6  # of the TTL without a renewal: the holder stops acting
log = structlog.get_logger()


class Lease:
    def __init__(
        self,
        js: JetStreamContext,
        key: str,
        identity: str,
        *,
        ttl: float = 5.0,
        bucket: str = BUCKET,
        replicas: int = 1,
    ) -> None:
        self.js = js
        self.key = key
        self.identity = identity
        self.ttl = ttl
        self.bucket = bucket
        self.replicas = replicas
        self.kv: KeyValue | None = None
        self.revision = 0
        self.renewed = 0.0  # monotonic time the last successful write was sent

    async def open(self) -> KeyValue:
        if self.kv is None:
            try:
                self.kv = await self.js.key_value(self.bucket)
            except (BucketNotFoundError, NotFoundError):
                cfg = KeyValueConfig(
                    bucket=self.bucket,
                    history=1,
                    ttl=self.ttl,
                    storage=StorageType.FILE,
                    replicas=self.replicas,
                )
                try:
                    self.kv = await self.js.create_key_value(cfg)
                except Exception:  # a concurrent creator won: bind to its bucket
                    self.kv = await self.js.key_value(self.bucket)
        return self.kv

    async def holder(self) -> str:
        with translated():
            kv = await self.open()
            try:
                entry = await kv.get(self.key)
            except (KeyNotFoundError, KeyDeletedError):
                return ""
        return (entry.value or b"").decode()

    async def try_acquire(self) -> bool:
        kv = await self.open()
        me = self.identity.encode()
        self.renewed = time.monotonic()
        try:
            self.revision = await kv.create(self.key, me)
            return True
        except KeyWrongLastSequenceError:
            pass
        try:
            entry = await kv.get(self.key)
        except (KeyNotFoundError, KeyDeletedError):
            return False  # gone meanwhile: the next attempt creates it
        if entry.value != me or entry.revision is None:
            return False
        try:  # our own identity: a previous incarnation of this process held it
            self.renewed = time.monotonic()
            self.revision = await kv.update(self.key, me, last=entry.revision)
        except KeyWrongLastSequenceError:
            return False
        return True

    async def acquire(self, stop: asyncio.Event) -> bool:
        """Wait until this identity holds the lease (True) or `stop` is set (False)."""
        while not stop.is_set():
            try:
                if await self.try_acquire():
                    return True
            except (TimeoutError, nats.errors.Error) as e:
                log.warning("lease: cannot reach the bucket", key=self.key, error=repr(e))
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.ttl / 5):
                    await stop.wait()
        return False

    async def keep(self) -> None:
        """Renew until the lease is lost (someone else holds it, or no renewal succeeded
        for TTL * STEP_DOWN since the last one); then return. Cancel it to stop renewing."""
        kv = await self.open()
        while True:
            deadline = self.renewed + self.ttl * STEP_DOWN
            await asyncio.sleep(max(0.0, min(self.ttl / 4, deadline - time.monotonic())))
            left = deadline - time.monotonic()
            if left <= 0:
                log.error("lease: not renewed in time", key=self.key, identity=self.identity)
                return
            started = time.monotonic()
            try:
                async with asyncio.timeout(left):
                    self.revision = await kv.update(
                        self.key, self.identity.encode(), last=self.revision
                    )
                self.renewed = started  # the entry's age at the server counts from no earlier
            except KeyWrongLastSequenceError:
                log.error("lease: taken over", key=self.key, identity=self.identity)
                return
            except (TimeoutError, nats.errors.Error) as e:
                log.warning("lease: renewal failed", key=self.key, error=repr(e))

    async def release(self) -> None:
        """A clean stop: delete the key, so that a standby takes over at once."""
        if self.kv is None or not self.revision:
            return
        with contextlib.suppress(Exception):
            await self.kv.delete(self.key, last=self.revision)
        self.revision = 0


class LeaseLost(RuntimeError):
    """The process was active and no longer is: it stopped acting."""


async def while_holding(
    lease: Lease,
    stopping: asyncio.Event,
    work: Callable[[], Awaitable[None]],
    lost: Callable[[], None],
) -> None:
    """Wait for the lease (until `stopping` is set), then run `work` while renewing it;
    `lost` is called at once if a renewal fails (it must make `work` end). A clean end
    releases the lease for a standby; a lost one raises `LeaseLost`, so the process exits
    and its supervisor starts it again as a standby."""
    bound = log.bind(key=lease.key, identity=lease.identity)
    try:
        holder = await lease.holder()
    except Unavailable:  # (only said: acquiring rides out a log that is away)
        holder = "unknown: the bucket does not answer"
    bound.info("standby: waiting for the lease", holder=holder)
    if not await lease.acquire(stopping):
        return
    bound.info("active: holding the lease", ttl=lease.ttl)
    keeping = asyncio.create_task(lease.keep(), name=f"lease-{lease.key}")
    keeping.add_done_callback(lambda _: lost())
    try:
        await work()
    finally:
        gone = keeping.done() and not keeping.cancelled()
        await finish(keeping)
        if not gone:
            await lease.release()
    if gone:
        raise LeaseLost(f"{lease.identity} lost the lease {lease.key}")
