"""The HTTP api's reads: get, list and watch from the projection, at a point in the past
(`?at=`: time travel) or now, never older than what the client saw (`not_older_than`)."""

from __future__ import annotations

import time
from typing import Any

import msgspec
from litestar import Request, Response
from litestar.response import Stream

from core.errors import (
    ApiError,
    bad_request,
    method_not_allowed,
    not_found,
    timeout,
)
from events.meta import CLUSTER_SCOPE, Aggregate, Kind, KindToken
from kinds.spec import KindSpec
from projections import replay
from projections.cluster import Cluster
from projections.render import rfc3339
from readside import timetravel
from readside.watch import Selector, SelectorError, TooOldResourceVersion
from services.api import (
    pagination,
    reads,
    table,
    watch_stream,
)
from services.api.http_plumbing import (
    api_of,
    respond,
)
from services.api.service import ApiService

JSON = dict[str, Any]
_json = msgspec.json.Encoder()


def selector_of(
    request: Request[Any, Any, Any], kind: KindToken, namespace: str, fields: tuple[str, ...] = ()
) -> Selector:
    q = request.query_params
    try:
        return Selector.parse(
            kind, namespace, q.get("labelSelector"), q.get("fieldSelector"), fields
        )
    except SelectorError as exc:
        raise bad_request(str(exc)) from None


def is_watch(request: Request[Any, Any, Any]) -> bool:
    return request.query_params.get("watch", "").lower() in ("true", "1")


async def list_or_watch(
    request: Request[Any, Any, Any], spec: KindSpec, namespace: str
) -> Response[Any]:
    api = api_of(request)
    kind = spec.event_kind
    selector = selector_of(request, kind, namespace, spec.field_labels)
    if (past := await at_point(request, api)) is not None:
        cluster, now, seq = past
        items = [
            obj
            for k in sorted(spec.table(cluster))
            if (obj := reads.render_at(spec, cluster, k, now)) is not None
            and selector.matches(kind, obj)
        ]
        meta = {"resourceVersion": str(seq)}
        listed = {"apiVersion": spec.api_version, "kind": spec.list_kind, "metadata": meta}
        return at_time(respond({**listed, "items": items}), now)
    if is_watch(request):
        if "watch" not in spec.verbs or not (reads.renders_own(api, spec) or spec.convert):
            raise method_not_allowed()
        return watch(request, api, spec, selector)
    await not_older_than(request, api)
    q = request.query_params
    wants_table = table.wants_table(request.headers.get("accept", ""))
    whole = not pagination.limit_of(q) and not q.get("continue")
    if reads.renders_own(api, spec) and not wants_table and whole:
        # the whole list, encoded once per projection version (readside/runner.py)
        rv = str(api.runner.last_seq)

        def encode(items: list[JSON]) -> bytes:
            meta = {"resourceVersion": rv}
            return _json.encode(
                {"apiVersion": spec.api_version, "kind": spec.list_kind, "metadata": meta}
                | {"items": items}
            )

        encoded = api.runner.list_body(selector, encode)
        return Response(encoded, status_code=200, media_type="application/json")
    if reads.renders_own(api, spec):
        items = api.runner.list(selector)
    else:
        now = api.runner.clock()
        items = [
            obj
            for k in sorted(spec.table(api.cluster))
            if (obj := reads.render_at(spec, api.cluster, k, now)) is not None
            and selector.matches(kind, obj)
        ]
    current = api.runner.last_seq
    token = pagination.start(q, current, api.runner.history_floor)
    keyed = [(key_of(spec, obj), obj) for obj in items]
    page = pagination.page(keyed, pagination.limit_of(q), token, current)
    meta = pagination.list_metadata(page)
    if wants_table:
        doc = table.table(
            table.columns(spec), page.items, meta["resourceVersion"], api.runner.clock()
        )
        doc["metadata"] = meta
        return respond(doc)
    body = {
        "apiVersion": spec.api_version,
        "kind": spec.list_kind,
        "metadata": meta,
        "items": page.items,
    }
    return respond(body)


def key_of(spec: KindSpec, obj: JSON) -> str:
    meta = obj.get("metadata") or {}
    return spec.key(meta.get("namespace", ""), meta.get("name", ""))


def watch(
    request: Request[Any, Any, Any], api: ApiService, spec: KindSpec, selector: Selector
) -> Response[Any]:
    opts = watch_stream.WatchOptions.parse(request.query_params, request.headers.get("accept", ""))
    try:
        convert = None if reads.renders_own(api, spec) else spec.convert
        watcher = api.runner.watch(selector, opts.resource_version, convert)
    except TooOldResourceVersion as exc:
        return Stream(watch_stream.expired(str(exc)), media_type="application/json")
    if opts.send_initial_events:  # queued before any later change: nothing is folded between
        end = watch_stream.bookmark(spec, api.runner.last_seq, initial_end=True)
        watcher.queue.put_nowait(end)
    lines = watch_stream.stream(
        spec, watcher, opts, lambda: api.runner.last_seq, api.runner.unwatch
    )
    return Stream(lines, media_type="application/json")


async def get_one(request: Request[Any, Any, Any], spec: KindSpec, k: str) -> Response[Any]:
    api = api_of(request)
    if (past := await at_point(request, api, spec, k)) is not None:
        cluster, now, _ = past
        if (obj := reads.render_at(spec, cluster, k, now)) is None:
            raise not_found_then(api, spec, k, now)
        if table.wants_table(request.headers.get("accept", "")):  # ages as they were then
            return at_time(respond(table.table(table.columns(spec), [obj], now=now)), now)
        return at_time(respond(obj), now)
    await not_older_than(request, api)
    obj = reads.current(api, spec, k)
    if obj is None:
        raise not_found(spec.resource, k.rsplit("/", 1)[-1])
    if table.wants_table(request.headers.get("accept", "")):
        return respond(table.table(table.columns(spec), [obj], now=api.runner.clock()))
    return respond(obj)


def at_time(response: Response[bytes], when: float) -> Response[bytes]:
    """A time-travel answer says the time it shows (a sequence's is its event's), so that
    a client shows ages as they were then."""
    response.headers[AT_TIME_HEADER] = f"{when:.3f}"
    return response


def not_found_then(api: ApiService, spec: KindSpec, k: str, when: float) -> ApiError:
    """NotFound at a point in the past; one that exists now did not exist then: it says
    when it was made."""
    status = not_found(spec.resource, k.rsplit("/", 1)[-1]).status
    now = reads.current(api, spec, k)
    created = ((now or {}).get("metadata") or {}).get("creationTimestamp")
    then = rfc3339(when)
    said = f"{status.message} at {then}"
    if created:
        said += f": it did not exist then, it was created at {created}"
    return ApiError(msgspec.structs.replace(status, message=said))


SEQUENCE_HEADER = "virtstream-sequence"
AT_TIME_HEADER = "virtstream-at-time"
MIN_SEQUENCE_HEADER = "virtstream-min-sequence"
#: how long a read waits for this api's view to reach the sequence it asks for
NOT_OLDER_THAN_SECONDS = 5.0


async def not_older_than(request: Request[Any, Any, Any], api: ApiService) -> None:
    """Read-your-writes across api replicas: a read carrying a sequence is answered from a
    view that has folded at least that far (waiting for it), never from an older one. The
    sequence comes as Kubernetes' `resourceVersion` of a get or list ("not older than";
    0 or none: any) or as the `Virtstream-Min-Sequence` header, which the virtstream client
    sends with the last sequence its writes returned. Never caught up in time: 504, as
    Kubernetes answers "Too large resource version"."""
    wanted = 0
    for text in (
        request.query_params.get("resourceVersion") or "",
        request.headers.get(MIN_SEQUENCE_HEADER) or "",
    ):
        if text:
            try:
                wanted = max(wanted, int(text))
            except ValueError:
                raise bad_request(f"invalid resourceVersion: {text!r}") from None
    if wanted > api.runner.last_seq and not await api.runner.wait_for(
        wanted, NOT_OLDER_THAN_SECONDS
    ):
        raise timeout(f"Too large resource version: {wanted}, current: {api.runner.last_seq}")


# kinds whose one object renders from its related aggregates alone (projections/replay.py)
ONE_OBJECT_AT = (Kind.VM, Kind.VMI, Kind.MIGRATION, Kind.POLICY)


async def at_point(
    request: Request[Any, Any, Any], api: ApiService, spec: KindSpec | None = None, k: str = ""
) -> tuple[Cluster, float, int] | None:
    """`?at=SEQ|TIME` (time travel): the cluster as folded up to that point, from the log.

    Rebuilt per request from the stream; for one object of a kind whose rendering depends
    on a few aggregates (`spec` and `k`: VMs, VMIs, migrations, policies) only from those
    aggregates' events (`timetravel.object_at`), so its cost does not grow with the log.
    Time-dependent status (CrashLoopBackOff, heartbeat age) is evaluated at the point's
    time when it has one."""
    text = request.query_params.get("at")
    if not text:
        return None
    if is_watch(request):
        raise bad_request("at cannot be combined with watch")
    try:
        point = replay.parse_point(text, time.time())
    except ValueError as exc:
        raise bad_request(f"invalid at: {exc}") from None
    seq = await timetravel.resolve(api.runner.store, point)
    when = point.time if point.time is not None else await timetravel.time_of(api.runner.store, seq)
    if spec is not None and spec.event_kind in ONE_OBJECT_AT and reads.renders_own(api, spec):
        ns, _, name = k.rpartition("/")
        agg = Aggregate(kind=spec.event_kind, namespace=ns or CLUSTER_SCOPE, name=name)
        cluster = await timetravel.object_at(api.runner.store, agg, seq)
    else:
        cluster = await timetravel.cluster_at(api.runner.store, seq=seq)
    return cluster, when if when is not None else time.time(), seq
