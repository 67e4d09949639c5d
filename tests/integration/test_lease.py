"""The active controller's lease (eventstore/lease.py) on a real nats-server: one holder
at a time; a standby takes it once the holder stops renewing (after the TTL) or lets it
go (at once); a holder that cannot renew steps down before its entry expires; a restarted
holder under the same identity takes its own lease back at once."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import nats
import pytest
from nats.aio.client import Client as NATS

from eventstore.lease import Lease
from ops.nats_server import NatsServer
from tests.conftest import unique

TTL = 1.0


@pytest.fixture
async def bucket(nc: NATS) -> AsyncIterator[str]:
    name = unique("lease")
    yield name
    with contextlib.suppress(Exception):
        await nc.jetstream().delete_key_value(name)


def lease(nc: NATS, bucket: str, identity: str) -> Lease:
    return Lease(nc.jetstream(), "virt-controller", identity, ttl=TTL, bucket=bucket)


async def test_one_holder_a_standby_takes_over_after_the_ttl(nc: NATS, bucket: str) -> None:
    a, b = lease(nc, bucket, "a"), lease(nc, bucket, "b")
    assert await a.try_acquire()
    assert not await b.try_acquire()
    assert await b.holder() == "a"
    # a renews: b keeps waiting past several TTLs
    keeping = asyncio.create_task(a.keep())
    stop = asyncio.Event()
    waiting = asyncio.create_task(b.acquire(stop))
    await asyncio.sleep(3 * TTL)
    assert not waiting.done() and not keeping.done()
    # a dies without a word (no release): b holds it once the entry expires
    keeping.cancel()
    assert await asyncio.wait_for(waiting, 10 * TTL)
    assert await a.holder() == "b"
    # a, still believing, cannot renew: it counts the lease as lost
    await asyncio.wait_for(a.keep(), 2 * TTL)


async def test_a_release_hands_over_at_once_and_an_identity_reclaims_its_own(
    nc: NATS, bucket: str
) -> None:
    a, b = lease(nc, bucket, "a"), lease(nc, bucket, "b")
    assert await a.try_acquire()
    again = lease(nc, bucket, "a")  # a's next incarnation, before the entry expires
    assert await again.try_acquire()
    await again.release()
    assert await b.try_acquire()


async def test_a_holder_cut_off_steps_down_before_its_entry_expires(
    nats_server: NatsServer, nc: NATS, bucket: str
) -> None:
    own = await nats.connect(nats_server.url)
    a = Lease(own.jetstream(), "virt-controller", "a", ttl=2 * TTL, bucket=bucket)
    assert await a.try_acquire()
    await own.close()  # a's bus is gone: no renewal can succeed
    await asyncio.wait_for(a.keep(), 4 * TTL)
    # it stopped acting while its entry still stands: nobody else could hold it yet
    assert not await lease(nc, bucket, "b").try_acquire()
