"""Time travel over the log: which sequence a point names, and the cluster or one
aggregate's replay as of that point. The folding and diffing is pure
(`projections/replay.py`); this module only chooses which events to read."""

from __future__ import annotations

from events.envelope import Stored
from events.meta import Aggregate
from eventstore.port import EventLog
from projections.cluster import Cluster
from projections.replay import Point, Step, current_life, related_filters, replay_steps
from readside import snapshots


async def resolve(store: EventLog, point: Point | None) -> int:
    """A point → the last sequence it includes (the stream's last when None)."""
    last = await store.stream_last_seq()
    if point is None:
        return last
    if point.seq is not None:
        return min(point.seq, last)
    assert point.time is not None
    return min(await store.seq_at_time(point.time), last)


async def read(
    store: EventLog, filters: list[str] | None = None, until_seq: int | None = None
) -> list[Stored]:
    if until_seq is not None and until_seq <= 0:
        return []
    return [s async for s in store.replay(filters, until_seq=until_seq, raw=True)]


async def cluster_at(
    store: EventLog,
    seq: int | None = None,
    time: float | None = None,
    *,
    snapshot: str | None = None,
    bucket: str = snapshots.BUCKET,
) -> Cluster:
    """Every view as it was once the event at `seq` (or the last one stored by `time`) was
    folded; the present without either. With `snapshot` (a projection name in the
    snapshot bucket) it starts from that snapshot when the snapshot is not newer."""
    # seq 0 is a point too (before the first event: nothing exists), not "the present"
    point = None if seq is None and time is None else Point(seq=seq, time=time)
    until = await resolve(store, point)
    if snapshot:
        cluster, _ = await snapshots.load_cluster(
            store, snapshot, until_seq=until, bucket_name=bucket
        )
        return cluster
    cluster = Cluster(kube_events=True)  # the api's fold: its Events as they were then
    if until > 0:  # else before the first event: the empty cluster
        async for s in store.replay(until_seq=until, raw=True):
            cluster.apply(s)
    return cluster


async def aggregate_replay(
    store: EventLog, agg: Aggregate, until: Point | None = None
) -> list[Step]:
    """`virtstream replay`: the steps of one aggregate up to a point (of the object that
    has its name then: not those of an earlier object of the name)."""
    until_seq = await resolve(store, until)
    return current_life(list(replay_steps(await read(store, related_filters(agg), until_seq), agg)))
