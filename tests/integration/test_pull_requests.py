"""A durable consumer keeps a request standing at the server (`eventstore/pull.py`): a
caught-up service is not one pull request per message, a request that expires is renewed,
and a request the server ends without a count is not asked again in a loop. Real
nats-server; the requests are what the store's connection published besides its appends,
acks and API calls (nats-py counts every message it sends)."""

from __future__ import annotations

import asyncio

import pytest

from events.catalog import VMStartRequested
from eventstore import pull
from eventstore.jetstream import JetStreamStore
from eventstore.port import Unavailable
from tests.conftest import unique
from tests.factories import meta


def _sent(store: JetStreamStore) -> int:
    return int(store.nc.stats["out_msgs"])


async def test_a_caught_up_consumer_is_not_one_request_per_message(store: JetStreamStore) -> None:
    name, durable = unique("vm"), unique("durable")
    consumer = await store.durable(durable, [f"virt.vm.default.{name}.>"], ack_wait=5, batch=16)
    before = _sent(store)
    try:
        got: list[int] = []
        for _ in range(40):  # one at a time: each appended once the last one was handled
            appended = await store.append(VMStartRequested(meta=meta(name=name)))
            (delivery,) = await consumer.fetch(timeout=5.0)
            assert delivery.seq == appended.seq
            await delivery.ack()
            got.append(delivery.seq)
        requests = _sent(store) - before - 40 - 40  # less the appends and the acks
        # topped up each time half of the 16 asked for were delivered: ~5, not 40
        assert 1 <= requests <= 7, requests
    finally:
        await consumer.close()


async def test_an_expired_request_is_renewed(
    store: JetStreamStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(pull, "EXPIRES", 0.6)
    name, durable = unique("vm"), unique("durable")
    consumer = await store.durable(durable, [f"virt.vm.default.{name}.>"], ack_wait=5, batch=8)
    before = _sent(store)
    try:
        with pytest.raises(TimeoutError):
            await consumer.fetch(timeout=2.5)  # idle through several expiries
        requests = _sent(store) - before
        assert 3 <= requests <= 8, requests  # asked again at each expiry, not in a loop
        later = asyncio.ensure_future(consumer.fetch(timeout=5.0))
        await asyncio.sleep(1.5)  # more expiries while a fetch waits
        appended = await store.append(VMStartRequested(meta=meta(name=name)))
        (delivery,) = await later
        assert delivery.seq == appended.seq
        await delivery.ack()
    finally:
        await consumer.close()


async def test_a_deleted_consumer_is_an_error_not_a_loop_of_requests(
    store: JetStreamStore,
) -> None:
    """The server ends the standing request ("409 Consumer Deleted", no count); asked
    again after a pause, no one takes requests for that consumer (503): the fetch fails
    with the port's error, as nats-py's fetch does, which a service rides out."""
    name, durable = unique("vm"), unique("durable")
    consumer = await store.durable(durable, [f"virt.vm.default.{name}.>"], ack_wait=5, batch=8)
    try:
        waiting = asyncio.ensure_future(consumer.fetch(timeout=10.0))
        await asyncio.sleep(0.3)
        before = _sent(store)
        await store.js.delete_consumer(store.stream, durable)
        with pytest.raises(Unavailable, match="ServiceUnavailable"):
            await asyncio.wait_for(waiting, 5)
        assert _sent(store) - before - 1 <= 2  # less the delete: one request asked again
    finally:
        await consumer.close()
