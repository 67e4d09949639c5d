"""Checkpoints on a real nats-server: a kill -9 while one is written leaves the previous
one usable; one of another schema is refused (the service rebuilds and says so in one
line); a shell restarts from its checkpoint and folds only the tail, which is also how it
repairs an `Unordered` fold."""

from __future__ import annotations

import asyncio
import contextlib
import random
import signal
import subprocess
import sys
import textwrap
from collections.abc import AsyncIterator

import pytest
import structlog
from nats.aio.client import Client as NATS

from events.catalog import VMCreated, VMStartRequested
from events.envelope import Stored
from eventstore import checkpoints
from eventstore.jetstream import JetStreamStore
from ops.nats_server import NatsServer
from readside.runner import ProjectionRunner
from services.controller.checkpoint import ControllerCodec
from services.controller.reactor import ControllerReactor
from services.runtime.checkpointing import Checkpointer
from services.runtime.shell import ServiceShell, Unordered
from tests.conftest import REPO, unique
from tests.factories import meta


@pytest.fixture
async def bucket(nc: NATS) -> AsyncIterator[str]:
    name = unique("cp")
    yield name
    with contextlib.suppress(Exception):
        await nc.jetstream().delete_key_value(name)


def body(seq: int) -> bytes:
    """Incompressible, several chunks, and a function of the sequence: a loaded body
    proves it is the whole of the checkpoint its head names."""
    return random.Random(seq).randbytes(3 * checkpoints.CHUNK // 2 + seq % 1000)


WRITER = textwrap.dedent(
    """
    import asyncio, random, sys
    import nats
    from eventstore import checkpoints
    from eventstore.jetstream import JetStreamStore

    def body(seq):
        return random.Random(seq).randbytes(3 * checkpoints.CHUNK // 2 + seq % 1000)

    async def main(url, bucket):
        nc = await nats.connect(url)
        kv = await checkpoints.bucket(JetStreamStore(nc), bucket)
        seq = int(sys.argv[3])
        print("ready", flush=True)
        while True:
            seq += 1
            await checkpoints.save(
                kv, "svc", schema="s/1", stream="S", last_seq=seq, body=body(seq), level=0
            )

    asyncio.run(main(sys.argv[1], sys.argv[2]))
    """
)


async def test_kill_9_during_a_checkpoint_write_leaves_the_previous_one_usable(
    nats_server: NatsServer, nc: NATS, bucket: str
) -> None:
    kv = await checkpoints.bucket(JetStreamStore(nc), bucket)
    await checkpoints.save(kv, "svc", schema="s/1", stream="S", last_seq=1, body=body(1))
    seen: set[int] = set()
    start = 1
    rng = random.Random(7)
    for _ in range(6):
        proc = subprocess.Popen(  # noqa: ASYNC220  (the writer to kill)
            [sys.executable, "-c", WRITER, nats_server.url, bucket, str(start)],
            cwd=REPO,
            stdout=subprocess.PIPE,
        )
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == b"ready"
        await asyncio.sleep(rng.uniform(0.05, 0.6))  # somewhere inside a write
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        found = await checkpoints.load(kv, "svc", schema="s/1", stream="S", stream_last_seq=10**9)
        assert isinstance(found, checkpoints.Checkpoint), found
        assert found.body == body(found.head.last_seq)
        seen.add(found.head.last_seq)
        start = found.head.last_seq + 1000  # the next writer's sequences are new
    assert len(seen) > 1  # the writers did get checkpoints through between the kills
    # what killed writers left behind goes with the next save
    await checkpoints.save(kv, "svc", schema="s/1", stream="S", last_seq=10**6, body=b"x")
    keys = await (await nc.jetstream().key_value(bucket)).keys()
    assert set(keys) == {"svc", f"svc.{10**6}.0", "svc.next"}


def vm(name: str) -> dict[str, object]:
    return {
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachine",
        "metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}"},
        "spec": {"runStrategy": "Manual", "template": {"spec": {}}},
    }


async def test_a_views_checkpoint_of_another_schema_is_refused_in_one_line(
    store: JetStreamStore,
) -> None:
    for i in range(5):
        await store.append(VMCreated(meta=meta(name=f"vm{i}"), manifest=vm(f"vm{i}")))
    name = unique("views")
    kv = await checkpoints.bucket(store)
    await checkpoints.save(
        kv, name, schema="views/0/old", stream=store.stream, last_seq=5, body=b"\x80"
    )
    with structlog.testing.capture_logs() as logs:
        runner = ProjectionRunner(store, checkpoint_name=name)
        await runner.start()
    try:
        refused = [e for e in logs if e["event"].startswith("checkpoint refused")]
        assert len(refused) == 1
        assert "schema views/0/old" in refused[0]["reason"]
        assert runner.checkpoint_seq == 0 and len(runner.cluster.vms) == 5  # rebuilt
    finally:
        await runner.stop()
        await kv.purge(name)


def controller_shell(
    store: JetStreamStore, bucket: str, name: str, every: int = 1
) -> ServiceShell[object]:
    reactor = ControllerReactor()
    reactor.name = name
    cp = Checkpointer(store, name, ControllerCodec(), every=every, bucket=bucket)
    return ServiceShell(reactor, store, checkpoints=cp)  # type: ignore[arg-type]


async def run_until_ready(shell: ServiceShell[object]) -> asyncio.Task[None]:
    task = asyncio.create_task(shell.run())
    async with asyncio.timeout(20):
        while not shell.ready:  # noqa: ASYNC110  (the shell has no event for it)
            await asyncio.sleep(0.02)
    return task


async def test_a_shell_restarts_from_its_checkpoint_and_the_unordered_repair_folds_only_the_tail(
    store: JetStreamStore, bucket: str
) -> None:
    name = unique("virt-controller")
    for i in range(40):
        await store.append(VMCreated(meta=meta(name=f"vm{i}"), manifest=vm(f"vm{i}")))
    first = controller_shell(store, bucket, name, every=10_000)
    task = await run_until_ready(first)
    first.stop()
    await task  # a clean stop saves a checkpoint
    head = await checkpoints.head(await checkpoints.bucket(store, bucket), name)
    assert head is not None and head.last_seq >= 40
    covered = head.last_seq

    for i in range(5):
        await store.append(VMStartRequested(meta=meta(name=f"vm{i}")))
    second = controller_shell(store, bucket, name)
    with structlog.testing.capture_logs() as logs:
        task = await run_until_ready(second)
    caught = next(e for e in logs if e["event"] == "caught up")
    assert caught["from_seq"] == covered + 1  # not 1
    assert caught["events"] < 40

    # the Unordered condition: an own append folded ahead, then an earlier event the
    # shell never folded; the process stops (the error), and its restart loads the
    # checkpoint and folds in order from there
    async with second._lock:
        last = await store.stream_last_seq()
        vmkey = "vm/default/vm0"
        ahead = Stored(
            seq=last + 2,
            subject="virt.vm.default.vm0.VMStartRequested._",
            time=0.0,
            event=VMStartRequested(meta=meta(name="vm0")),
        )
        second.fold(ahead, own=True)
        between = Stored(
            seq=last + 1,
            subject="virt.vm.default.vm0.VMStartRequested._",
            time=0.0,
            event=VMStartRequested(meta=meta(name="vm0")),
        )
        with pytest.raises(Unordered):
            second.fold(between)
        assert vmkey in second.ahead
    second.stop()
    await task
    third = controller_shell(store, bucket, name)
    with structlog.testing.capture_logs() as logs:
        task = await run_until_ready(third)
    caught = next(e for e in logs if e["event"] == "caught up")
    assert caught["from_seq"] > 1
    third.stop()
    await task
    # the state equals a full rebuild of the same log
    full = controller_shell(store, unique("none"), unique("virt-controller"))
    task = await run_until_ready(full)
    full.stop()
    await task
    codec = ControllerCodec()
    assert codec.encode(third.state) == codec.encode(full.state)  # type: ignore[arg-type]
