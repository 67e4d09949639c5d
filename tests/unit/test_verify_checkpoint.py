"""`virtstream verify` keeps its checkpoint through the port: an agreeing rebuild is saved
and the next incremental run starts from it, whichever event log holds the history (here
the in-memory one)."""

from __future__ import annotations

import httpx

from eventstore.memory import MemoryLog
from kinds.registry import REGISTRY
from projections.cluster import Cluster
from readside import verify
from tests.debug_scenario import lifecycle


def live_api(cluster: Cluster) -> httpx.AsyncClient:
    """An api that lists what `cluster` renders, at the sequence it folded."""

    def answer(request: httpx.Request) -> httpx.Response:
        spec = next(s for s in REGISTRY if s.collection_path() == request.url.path)
        items = list(REGISTRY.render_all(cluster, spec.event_kind, 0.0).values())
        meta = {"resourceVersion": str(cluster.last_seq)}
        return httpx.Response(200, json={"metadata": meta, "items": items})

    return httpx.AsyncClient(transport=httpx.MockTransport(answer), base_url="http://api")


async def test_an_agreeing_rebuild_is_the_next_runs_start() -> None:
    log = MemoryLog()
    for ev in lifecycle().events:
        await log.append(ev)
    cluster = Cluster(kube_events=True)  # the api's fold
    async for s in log.replay(raw=True):
        cluster.apply(s)
    async with live_api(cluster) as client:
        first = await verify.verify(log, client, save=True)
        assert first.from_seq == 0 and first.compared > 0
        again = await verify.verify(log, client, full=False)
    assert again.from_seq == cluster.last_seq
