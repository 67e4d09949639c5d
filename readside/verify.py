"""`virtstream verify`: rebuild every view and compare it with the live projection the api
serves.

Incremental by default: the rebuild starts from verify's own checkpoint of the views
(`verify-views` in the checkpoint bucket: the rebuild it saved after the last comparison
that found no difference, never the api's own) and folds the tail; `full` folds from the
first event (the archive's, when ended aggregates have left the hot log). Only a rebuild
that agreed with the live views is saved, so each incremental run extends a chain of
agreeing comparisons that starts at a full one.

Each list the api returns carries the sequence its projection had folded
(`metadata.resourceVersion`), so the rebuild folds the stream once, in order, and compares
each kind at exactly the sequence its list was taken at: a busy cluster does not produce
false differences. Fields that depend on the reader's clock are ignored."""

from __future__ import annotations

import time
from typing import Any

import httpx
import msgspec

from events.meta import KindToken
from eventstore.port import EventLog
from kinds.registry import REGISTRY, Registry
from projections import kube_events
from projections.cluster import Cluster
from projections.replay import FieldChange, diff_objects
from readside import view_checkpoints

JSON = dict[str, Any]

# Rendered from the reader's clock, not from events.
CLOCK_FIELDS = ("status.heartbeatAgeSeconds",)


class Difference(msgspec.Struct, frozen=True):
    kind: KindToken
    key: str
    problem: str  # missing-live | extra-live | differs
    changes: list[FieldChange] = []  # rebuilt → live


class Report(msgspec.Struct, frozen=True):
    seqs: dict[str, int]  # kind → the sequence compared at
    compared: int
    differences: list[Difference]
    from_seq: int = 0  # the checkpoint the rebuild started from (0: the first event)

    @property
    def ok(self) -> bool:
        return not self.differences


class LiveList(msgspec.Struct, frozen=True):
    seq: int
    items: dict[str, JSON]


def object_key(kind: KindToken, obj: JSON, kinds: Registry = REGISTRY) -> str:
    md = obj.get("metadata") or {}
    return kinds.of(kind).key(str(md.get("namespace", "")), str(md.get("name", "")))


def compare(kind: KindToken, rebuilt: dict[str, JSON], live: dict[str, JSON]) -> list[Difference]:
    """Pure: the differences between rebuilt and live objects of one kind."""
    out: list[Difference] = []
    for k in sorted(rebuilt.keys() | live.keys()):
        if k not in live:
            out.append(Difference(kind, k, "missing-live"))
        elif k not in rebuilt:
            out.append(Difference(kind, k, "extra-live"))
        else:
            changes = diff_objects(rebuilt[k], live[k], ignore=CLOCK_FIELDS)
            if changes:
                out.append(Difference(kind, k, "differs", changes))
    return out


async def fetch_live(
    client: httpx.AsyncClient, kinds: Registry = REGISTRY
) -> dict[KindToken, LiveList]:
    """Each kind's list across namespaces (the kinds that render each aggregate kind)."""
    out: dict[KindToken, LiveList] = {}
    for kind in dict.fromkeys(spec.event_kind for spec in kinds):
        r = await client.get(kinds.of(kind).collection_path())
        r.raise_for_status()
        body = r.json()
        seq = int((body.get("metadata") or {}).get("resourceVersion") or 0)
        items = {object_key(kind, o, kinds): o for o in body.get("items") or []}
        out[kind] = LiveList(seq=seq, items=items)
    return out


CHECKPOINT = "verify-views"


async def verify(
    store: EventLog,
    client: httpx.AsyncClient,
    kinds: Registry = REGISTRY,
    *,
    full: bool = True,
    save: bool = False,
) -> Report:
    """Compare; `full=False` starts from verify's checkpoint when one is usable, `save`
    saves the rebuild as that checkpoint when nothing differed."""
    live = await fetch_live(client, kinds)
    now = time.time()
    cluster = Cluster(kube_events=True)  # the api's fold, its Events included
    pending = sorted(live.items(), key=lambda kv: kv[1].seq)
    if not full and pending:
        loaded = await view_checkpoints.load(store, CHECKPOINT)
        if loaded is not None and loaded.last_seq <= pending[0][1].seq:
            cluster = loaded
    differences: list[Difference] = []
    compared = 0

    def check_due() -> None:
        nonlocal compared
        while pending and pending[0][1].seq <= cluster.last_seq:
            kind, lst = pending.pop(0)
            rebuilt = kinds.render_all(cluster, kind, now)
            if kind == kube_events.KIND:  # the api lists no Event past its TTL by the clock
                table = cluster.table(kind)
                rebuilt = {
                    k: o for k, o in rebuilt.items() if table[k].last_at >= now - kube_events.WINDOW
                }
            compared += len(rebuilt.keys() | lst.items.keys())
            differences.extend(compare(kind, rebuilt, lst.items))

    start = cluster.last_seq + 1
    check_due()
    if pending:
        async for s in store.replay(start_seq=start, until_seq=pending[-1][1].seq, raw=True):
            cluster.apply(s)
            check_due()
    # lists taken at a sequence the stream does not reach (it was recreated): compare anyway
    cluster.last_seq = max(cluster.last_seq, pending[-1][1].seq) if pending else cluster.last_seq
    check_due()
    seqs = {str(kind): lst.seq for kind, lst in live.items()}
    if save and not differences:
        await view_checkpoints.save(store, CHECKPOINT, cluster)
    return Report(seqs=seqs, compared=compared, differences=differences, from_seq=start - 1)
