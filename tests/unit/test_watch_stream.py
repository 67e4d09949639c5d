import asyncio

import msgspec

from events.meta import Kind
from kinds.registry import REGISTRY
from readside.watch import Selector, Watcher
from services.api.watch_stream import CHUNK_EVENTS, WatchOptions, stream


async def _chunks(watcher: Watcher) -> list[bytes]:
    opts = WatchOptions(
        resource_version=None, timeout_seconds=None, bookmarks=False, as_table=False
    )
    lines = stream(REGISTRY.of(Kind.VM), watcher, opts, lambda: 0, lambda _: None)
    return [chunk async for chunk in lines]


def test_queued_events_share_a_write_up_to_a_chunk_and_the_end_still_ends_it() -> None:
    watcher = Watcher(Selector(Kind.VM))
    n = CHUNK_EVENTS + 36
    for i in range(n):
        watcher.initial(f"default/vm{i}", {"metadata": {"name": f"vm{i}"}})
    watcher.queue.put_nowait(None)  # the watch closed (a stop, a watcher too far behind)

    chunks = asyncio.run(_chunks(watcher))

    assert [c.count(b"\n") for c in chunks] == [CHUNK_EVENTS, 36]
    events = [msgspec.json.decode(line) for c in chunks for line in c.splitlines()]
    assert [e["object"]["metadata"]["name"] for e in events] == [f"vm{i}" for i in range(n)]
    assert {e["type"] for e in events} == {"ADDED"}


def test_an_event_alone_is_written_at_once() -> None:
    async def one_then_close() -> list[bytes]:
        watcher = Watcher(Selector(Kind.VM))
        opts = WatchOptions(None, None, bookmarks=False, as_table=False)
        lines = stream(REGISTRY.of(Kind.VM), watcher, opts, lambda: 0, lambda _: None)
        watcher.initial("default/a", {"metadata": {"name": "a"}})
        first = await asyncio.wait_for(anext(lines), 1)
        watcher.queue.put_nowait(None)
        return [first, *[c async for c in lines]]

    chunks = asyncio.run(one_then_close())

    assert len(chunks) == 1 and chunks[0].count(b"\n") == 1
