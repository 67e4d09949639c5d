"""virt-handler heartbeats: a JetStream key-value bucket, not events.

Heartbeats are liveness signals, not facts worth keeping: writing one per node per few
seconds into the event log would bloat it and wake every consumer. The handler `put`s
epoch seconds under its node name; the controller `watch`es the bucket and decides
NodeUnresponsive / NodeResponsive from what it saw (those *are* events).

Used by both virt-handler (`ensure_bucket` + `put`) and virt-controller (`ensure_bucket` +
`watch`)."""

from __future__ import annotations

from collections.abc import AsyncIterator

from nats.js.api import KeyValueConfig, StorageType
from nats.js.client import JetStreamContext
from nats.js.errors import BucketNotFoundError, NotFoundError
from nats.js.kv import KV_DEL, KV_PURGE, KeyValue

from eventstore.nats_errors import translated

BUCKET = "virt-heartbeats"
# Entries expire after a few node timeouts: a node gone for that long is unresponsive
# anyway, and expiry keeps the bucket from growing with every node ever seen.
DEFAULT_TTL = 300.0


async def ensure_bucket(
    js: JetStreamContext,
    bucket: str = BUCKET,
    *,
    ttl: float = DEFAULT_TTL,
    storage: StorageType = StorageType.FILE,
    replicas: int = 1,
) -> KeyValue:
    """Bind to the heartbeat bucket, creating it if missing (idempotent; a concurrent
    creator with the same config is fine)."""
    with translated():
        try:
            return await js.key_value(bucket)
        except (BucketNotFoundError, NotFoundError):
            pass
        # as many replicas as the event stream: on a cluster, heartbeats survive a lost server
        cfg = KeyValueConfig(bucket=bucket, history=1, ttl=ttl, storage=storage, replicas=replicas)
        try:
            return await js.create_key_value(cfg)
        except Exception:
            # lost a creation race (or the config differs): bind to whatever exists
            return await js.key_value(bucket)


def key_of(node: str) -> str:
    # KV keys allow [-/_=.a-zA-Z0-9]; node names are DNS names, so they already fit
    return node


async def put(kv: KeyValue, node: str, at: float) -> None:
    """Record that `node`'s handler was alive at epoch second `at`."""
    with translated():
        await kv.put(key_of(node), f"{at:.3f}".encode())


async def watch(kv: KeyValue) -> AsyncIterator[tuple[str, float]]:
    """(node, epoch seconds) for the latest heartbeat of every node, then every new one.
    Deleted, expired and unparsable entries are skipped."""
    with translated():
        watcher = await kv.watchall()
        try:
            async for entry in watcher:
                if entry is None or entry.operation in (KV_DEL, KV_PURGE) or not entry.value:
                    continue
                try:
                    at = float(entry.value.decode())
                except ValueError:
                    continue
                yield entry.key, at
        finally:
            await watcher.stop()
