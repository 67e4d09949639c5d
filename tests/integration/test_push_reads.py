"""Reading an ordered push consumer through `eventstore/push.py` on a real nats-server:
every message in order, and a reader slower than the server still bounded by the server's
flow control (the queue in the client does not grow to the whole stream); each message's
place read from its reply subject as nats-py's metadata has it."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator

import pytest
from nats.aio.client import Client as NATS
from nats.js.api import ConsumerConfig, DeliverPolicy

from eventstore import push, reply
from tests.conftest import unique

MESSAGES = 20_000
PAYLOAD = b"x" * 1024  # 20 MB in all: several of the server's flow-control windows


@pytest.fixture
async def stream(nc: NATS) -> AsyncIterator[str]:
    js = nc.jetstream()
    name = unique("PUSH")
    await js.add_stream(name=name, subjects=[f"{name.lower()}.>"], storage="memory")
    acks = [js.publish(f"{name.lower()}.m", PAYLOAD) for _ in range(MESSAGES)]
    for chunk in range(0, MESSAGES, 1000):
        await asyncio.gather(*acks[chunk : chunk + 1000])
    yield name
    with contextlib.suppress(Exception):
        await js.delete_stream(name)


async def test_a_slow_reader_gets_every_message_in_order_with_a_bounded_queue(
    nc: NATS, stream: str
) -> None:
    js = nc.jetstream()
    cfg = ConsumerConfig(deliver_policy=DeliverPolicy.ALL)
    sub = await js.subscribe(
        "", stream=stream, ordered_consumer=True, config=cfg, idle_heartbeat=5.0,
        pending_msgs_limit=0, pending_bytes_limit=0,
    )  # fmt: skip
    seqs: list[int] = []
    most_queued = 0
    try:
        while len(seqs) < MESSAGES:
            msg = await push.next_msg(sub, 10.0)
            at, md = reply.position(msg), msg.metadata  # ours, and nats-py's
            assert (at.seq, at.pending) == (md.sequence.stream, md.num_pending)
            assert at.time == md.timestamp.timestamp()
            seqs.append(at.seq)
            most_queued = max(most_queued, sub.pending_msgs)
            if len(seqs) % 500 == 0:
                # a fold slower than the server (CPU, not awaiting): the server runs ahead
                time.sleep(0.02)  # noqa: ASYNC251
                await asyncio.sleep(0)
    finally:
        await sub.unsubscribe()
    assert seqs == list(range(1, MESSAGES + 1))
    assert 0 < most_queued < MESSAGES // 2, most_queued
