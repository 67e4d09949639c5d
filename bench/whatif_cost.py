"""What a what-if costs against a full rebuild of the views, on a real cluster's log.

  python -m bench.whatif_cost [--vms 200] [--rate 20] [--nodes 3] [--rounds 3] [--profile F]

Starts `virtstream up` (test mode), creates `--vms` VMs at `--rate` and waits for them to
run, deletes every other one and waits for their VMIs to go: a log the real services
wrote. Then, in this process, over the same stream, `--rounds` times each (the best kept):
- rebuild: every event read and folded into the views (`Cluster`, the api's fold);
- what-if, no change: every event read, folded and decided on by today's controller
  decider (`virtstream whatif`'s sandbox), its decisions compared with the log's;
- what-if, `pack`: the same with the scheduler policy changed.
Prints each time, the what-ifs' ratios to the rebuild, and the differences found (none
expected without a change: `whatif` would exit 1); with `--stages`, the CPU per event of
each stage, one at a time in this process: reading the records, decoding them, the views'
fold, the controller's fold and its decisions (a what-if's reader does the first; its
decider the other three but the views' fold, which the controller's includes)."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import cProfile
import gc
import pstats
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path

from bench.exec_common import Track, paced, remove_run, start_up, wait_ready, watch_vmis
from events.envelope import Context
from eventstore import records
from eventstore.connection import ConnectOptions, connect_service
from eventstore.jetstream import JetStreamStore
from projections.cluster import Cluster
from services.controller.reactor import ControllerReactor
from services.controller.whatif import WhatIf
from services.whatif import replay as whatif_replay


async def rebuild(store: JetStreamStore) -> int:
    cluster = Cluster()
    n = 0
    async for s in store.replay(None, raw=True):
        cluster.apply(s)
        n += 1
    return n


def whatif(policy: str) -> Callable[[JetStreamStore], Awaitable[int]]:
    async def run(store: JetStreamStore) -> int:
        sandbox = WhatIf(ControllerReactor(scheduler_policy=policy))
        return len((await whatif_replay.replay(store, sandbox)).differences)

    return run


async def stages(store: JetStreamStore) -> dict[str, float]:
    """CPU seconds per event of each stage (process time, one after the other). Each stage
    keeps nothing it would not keep in a what-if: the lists that carry one stage's output
    to the next are built outside the measure and frozen, or the collector's passes over
    them, which grow with the log, would be charged to the stages."""
    t = time.process_time()
    n = 0
    async for _ in store.records(as_archived=True):
        n += 1
    read = time.process_time() - t
    with _kept():
        recs = [r async for r in store.records(as_archived=True)]
    t = time.process_time()
    for r in recs:
        records.stored(r)
    decode = time.process_time() - t
    with _kept():
        stored = [records.stored(r) for r in recs]
    t = time.process_time()
    cluster = Cluster()
    for s in stored:
        cluster.apply(s)
    views = time.process_time() - t
    reactor = ControllerReactor()
    state = reactor.initial_state()
    fold = decide = 0.0
    for s in stored:
        t = time.process_time()
        state = reactor.evolve(state, s)
        t1 = time.process_time()
        reactor.react(state, s, Context(reactor.name, "", s.time, s))
        fold += t1 - t
        decide += time.process_time() - t1
    gc.unfreeze()
    n = max(1, n)
    return {
        "read": read / n,
        "decode": decode / n,
        "views' fold": views / n,
        "controller's fold": fold / n,
        "decisions": decide / n,
    }


@contextlib.contextmanager
def _kept() -> Iterator[None]:
    """Build what the next stage reads without collections, then freeze it."""
    gc.disable()
    try:
        yield
    finally:
        gc.enable()
        gc.freeze()


async def best(rounds: int, body: Callable[[], Awaitable[int]]) -> tuple[float, int]:
    times, result = [], 0
    for _ in range(rounds):
        t = time.perf_counter()
        result = await body()
        times.append(time.perf_counter() - t)
    return min(times), result


async def measure(a: argparse.Namespace) -> None:
    data_dir = Path(tempfile.mkdtemp(prefix="vswi", dir="/tmp"))
    up = start_up(data_dir, a.nodes, "64Gi", 64)
    try:
        await wait_ready(up, a.nodes)
        track = Track(n=a.vms)
        opened = asyncio.Event()
        watcher = asyncio.create_task(watch_vmis(up.api, track, opened))
        await asyncio.wait_for(opened.wait(), 10)
        names = [f"w{i}" for i in range(a.vms)]
        await paced(up, names, a.rate, "POST", 2, track)
        await asyncio.wait_for(track.all_running.wait(), a.timeout)
        gone = names[::2]
        track.n = len(gone)
        await paced(up, gone, a.rate, "DELETE", 2, track)
        await asyncio.wait_for(track.all_removed.wait(), a.timeout)
        watcher.cancel()
        password = (data_dir / "credentials" / "nats-admin").read_text().strip()
        options = ConnectOptions(user="admin", password=password)
        nc = await connect_service(up.nats_url, "bench-whatif", options)
        store = JetStreamStore(nc)
        events = await store.stream_last_seq()
        fold_s, _ = await best(a.rounds, lambda: rebuild(store))
        same_s, same = await best(a.rounds, lambda: whatif("spread")(store))
        pack_s, packed = await best(a.rounds, lambda: whatif("pack")(store))
        per_stage = await stages(store) if a.stages else {}
        if a.profile:  # one more what-if, no change, read and decided in this process
            sandbox = WhatIf(ControllerReactor())
            profiler = cProfile.Profile()
            profiler.enable()
            async for s in store.replay(None, raw=True, on_skip=sandbox.skip):
                sandbox.feed(s)
            profiler.disable()
            profiler.dump_stats(a.profile)
            pstats.Stats(a.profile).sort_stats("tottime").print_stats(25)
        await nc.close()
    finally:
        up.stop()
        remove_run(data_dir, a.keep)
    print(f"== a log of {events} events: {a.vms} VMs created, {len(gone)} deleted ==")
    print(f"rebuild of the views: {fold_s:.3f} s ({events / fold_s:,.0f} events/s)")
    print(f"what-if, no change:   {same_s:.3f} s (x{same_s / fold_s:.2f}), {same} differences")
    print(f"what-if, pack:        {pack_s:.3f} s (x{pack_s / fold_s:.2f}), {packed} differences")
    if per_stage:
        print("CPU per event: " + ", ".join(f"{k} {v * 1e6:.1f} µs" for k, v in per_stage.items()))


def main() -> None:
    p = argparse.ArgumentParser(prog="python -m bench.whatif_cost")
    p.add_argument("--vms", type=int, default=200)
    p.add_argument("--rate", type=float, default=20.0)
    p.add_argument("--nodes", type=int, default=3)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--timeout", type=float, default=180.0)
    p.add_argument("--keep", action="store_true", help="keep the data dir")
    p.add_argument("--stages", action="store_true", help="CPU per event of each stage")
    p.add_argument("--profile", default="", help="cProfile's stats of one what-if go here")
    asyncio.run(measure(p.parse_args()))


if __name__ == "__main__":
    main()
