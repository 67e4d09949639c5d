"""Debugging from the event log: `events`, `replay`, `at`, `why`, `verify`, `snapshot`,
`dead-letters`. These read NATS directly (not the api), so they work when the api is down;
`verify` reads both. `register(app)` adds them to the `virtstream` app."""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import os
import sys
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import httpx
import msgspec
import typer
import yaml
from nats.aio.client import Client as NATS
from nats.js.errors import NotFoundError
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from cli.settings import settings
from client import credentials
from events.envelope import Stored
from events.meta import Aggregate, Kind, KindToken
from eventstore import checkpoints, dead_letters
from eventstore.connection import NotAuthorized, Unreachable, connect_once
from eventstore.jetstream import JetStreamStore
from eventstore.settings import StreamSettings
from kinds.registry import REGISTRY
from projections import replay as log_view
from projections.cluster import Cluster
from readside import causality, correlation, timetravel, verify, view_checkpoints

T = TypeVar("T")
DEFAULT_NATS = "nats://127.0.0.1:4222"
REF_HELP = "KIND/NAMESPACE/NAME or KIND/NAME: vm/default/vm-cirros, vm/vm-cirros, node/node-1"
POINT_HELP = "SEQ, a duration ago (5m), @EPOCH or an ISO time"

NatsUrl = typer.Option(
    DEFAULT_NATS, "--nats-url", envvar="VIRTSTREAM_NATS", help="NATS server with the event stream"
)
StreamName = typer.Option("VIRT", "--stream", help="Event stream (its dead letters: <stream>_DLQ)")
Output = typer.Option("text", "--output", "-o", help="text | json")


def _console() -> Console:
    return Console(soft_wrap=True, highlight=False)


def _fail(message: str) -> typer.Exit:
    Console(stderr=True, soft_wrap=True).print(f"[red]error:[/] {escape(message)}")
    return typer.Exit(1)


def _agg(text: str) -> Aggregate:
    """A reference the user wrote; `vm/NAME` is in the default namespace."""
    try:
        return REGISTRY.parse_ref(text, namespace=settings.namespace)
    except log_view.RefError as e:
        raise _fail(str(e)) from None


def _point(text: str) -> log_view.Point:
    try:
        return log_view.parse_point(text, time.time())
    except log_view.RefError as e:
        raise _fail(str(e)) from None


def _settings(stream: str) -> StreamSettings:
    return StreamSettings(name=stream, dlq_name=f"{stream}_DLQ")


def _run(
    nats_url: str,
    stream: str,
    body: Callable[[JetStreamStore], Awaitable[T]],
    user: str = "reader",
) -> T:
    """Connect (as the read-only `reader` unless a command writes), check the stream
    exists, run `body`, close."""

    async def main() -> T:
        try:
            nc: NATS = await connect_once(nats_url, options=credentials.nats_auth(nats_url, user))
        except NotAuthorized as exc:
            raise _fail(str(exc)) from None
        except Unreachable:
            raise _fail(
                f"cannot connect to NATS at {nats_url}: is `virtstream up` running? "
                "(another server: --nats-url)"
            ) from None
        try:
            store = JetStreamStore(nc, _settings(stream))
            try:
                await store.js.stream_info(stream)
            except NotFoundError:
                raise _fail(f"no stream {stream!r} on {nats_url}") from None
            return await body(store)
        finally:
            await nc.close()

    try:
        return asyncio.run(main())
    except log_view.RefError as e:
        raise _fail(str(e)) from None


def _hms(ts: float) -> str:
    return dt.datetime.fromtimestamp(ts, dt.UTC).strftime("%H:%M:%S.%f")[:-3]


def _latency(seconds: float | None) -> str:
    if seconds is None:
        return ""
    return f"+{seconds * 1000:.0f}ms" if seconds < 1 else f"+{seconds:.3f}s"


def _json_line(obj: Any) -> None:
    sys.stdout.write(msgspec.json.encode(obj).decode() + "\n")
    sys.stdout.flush()


# ------------------------------------------------------------------ events
def events(
    aggregate: str = typer.Option("", "--aggregate", "-a", help=f"Only this object: {REF_HELP}"),
    etype: str = typer.Option("", "--type", "-t", help="Event type, e.g. DomainStarted"),
    since: str = typer.Option("", "--since", help=POINT_HELP),
    follow: bool = typer.Option(False, "--follow", "-f", help="Keep printing new events"),
    limit: int = typer.Option(0, "--limit", help="Stop after this many events (0: no limit)"),
    correlation_id: str = typer.Option(
        "",
        "--correlation",
        help="Only the events one request caused (its x-correlation-id; `why` prints it)",
    ),
    output: str = Output,
    nats_url: str = NatsUrl,
    stream: str = StreamName,
) -> None:
    """The raw event log, one line per event (filtered on the server); --correlation: the
    events one request caused, found through the debugging index."""
    agg = _agg(aggregate) if aggregate else None
    filters = log_view.event_filters(agg, etype or None)
    start = _point(since) if since else None
    console = _console()
    if correlation_id:
        if follow:
            raise _fail("--correlation cannot be combined with --follow")
        found = _run(
            nats_url,
            stream,
            lambda store: correlation.events_of(
                store, correlation_id, agg=agg, etype=etype or None, since=start
            ),
        )
        if not found:  # as `replay`: nothing to show is an error the user should notice
            narrowed = " matching --aggregate/--type/--since" if agg or etype or start else ""
            raise _fail(f"no events with correlation {correlation_id}{narrowed}")
        for s in found[:limit] if limit else found:
            if output == "json":
                _json_line(log_view.event_json(s))
            else:
                _print_line(console, s)
        return

    async def body(store: JetStreamStore) -> None:
        n = 0
        events = store.replay(
            filters,
            start_seq=start.seq if start else None,
            start_time=start.time if start else None,
            follow=follow,
            raw=True,
        )
        async with contextlib.aclosing(events):  # --limit: unsubscribe before closing
            async for s in events:
                if output == "json":
                    _json_line(log_view.event_json(s))
                else:
                    _print_line(console, s)
                n += 1
                if limit and n >= limit:
                    return

    _run(nats_url, stream, body)


def _print_line(console: Console, s: Stored) -> None:
    line = log_view.summarize(s)
    console.print(
        f"[dim]{line.seq:>7}[/] {_hms(line.occurred_at)} {escape(line.aggregate):<28} "
        f"[bold]{line.type:<26}[/] [cyan]{escape(line.actor):<18}[/] {escape(line.fields)}"
    )


# ------------------------------------------------------------------ replay
def replay(
    ref: str = typer.Argument(..., metavar="KIND/NAME", help=REF_HELP),
    until: str = typer.Option("", "--until", help=f"Stop there: {POINT_HELP}"),
    output: str = Output,
    nats_url: str = NatsUrl,
    stream: str = StreamName,
) -> None:
    """Each event of an object with the object's change after it."""
    agg = _agg(ref)
    point = _point(until) if until else None
    steps = _run(nats_url, stream, lambda store: timetravel.aggregate_replay(store, agg, point))
    ref_text = REGISTRY.ref_text(agg)
    if not steps:  # as `why`: nothing to show is an error the user should notice
        raise _fail(f"{ref_text}: no events" + (f" up to {until}" if until else ""))
    if output == "json":
        for st in steps:
            _json_line(
                {
                    "seq": st.stored.seq,
                    "type": log_view.summarize(st.stored).type,
                    "aggregate": log_view.summarize(st.stored).aggregate,
                    "own": st.own,
                    "exists": st.exists,
                    "changes": [
                        {"path": c.path, "before": c.before, "after": c.after} for c in st.changes
                    ],
                }
            )
        return
    console = _console()
    console.print(f"[bold]{escape(ref_text)}[/]: {len(steps)} steps")
    for st in steps:
        line = log_view.summarize(st.stored)
        where = "" if st.own else f"  [dim](via {escape(line.aggregate)})[/]"
        console.print(
            f"[dim]#{line.seq}[/] {_hms(line.occurred_at)} [bold]{line.type}[/] "
            f"[cyan]{escape(line.actor)}[/] {escape(line.fields)}{where}"
        )
        for c in st.changes:
            console.print(f"    {escape(str(c))}")
        if not st.exists and st.own:
            console.print("    [yellow](the object does not exist after this event)[/]")


# --------------------------------------------------------------------- at
async def _time_of(store: JetStreamStore, seq: int) -> float:
    if seq <= 0:
        return 0.0
    msg = await store.js.get_msg(store.stream, seq)
    return msg.time.timestamp() if msg.time else 0.0


def at(
    point: str = typer.Argument(..., metavar="POINT", help=POINT_HELP),
    kind: str = typer.Argument(..., metavar="KIND", help=" | ".join(REGISTRY.cli_names)),
    name: str = typer.Argument(
        "", metavar="[NAME]", help="NAME (or NS/NAME); all of the kind when empty"
    ),
    namespace: str = typer.Option("", "--namespace", "-n", help="Only this namespace"),
    output: str = typer.Option("table", "--output", "-o", help="table | yaml | json"),
    nats_url: str = NatsUrl,
    stream: str = StreamName,
) -> None:
    """Objects as they were at a stream sequence or a time (time travel)."""
    try:
        k = REGISTRY.parse_kind(kind)
    except log_view.RefError as e:
        raise _fail(str(e)) from None
    p = _point(point)

    async def body(store: JetStreamStore) -> tuple[int, list[dict[str, Any]]]:
        seq = await timetravel.resolve(store, p)
        cluster = await timetravel.cluster_at(store, seq=seq) if seq > 0 else Cluster()
        now = p.time if p.time is not None else await _time_of(store, seq)
        return seq, objects_at(cluster, k, name, namespace, now)

    seq, objs = _run(nats_url, stream, body)
    if name and not objs:
        raise _fail(f"{kind} {name!r} did not exist at sequence {seq}")
    if output == "json":
        _json_line(objs[0] if name else {"items": objs, "metadata": {"resourceVersion": str(seq)}})
    elif output == "yaml":
        sys.stdout.write(yaml.safe_dump(objs[0] if name else objs, sort_keys=False))
    else:
        _console().print(summary_table(k, objs, seq))


def objects_at(
    cluster: Cluster, kind: KindToken, name: str, namespace: str, now: float
) -> list[dict[str, Any]]:
    """The rendered objects of `kind` (one when `name` is given) in a rebuilt cluster."""
    if name:
        if not REGISTRY.of(kind).namespaced or "/" in name:
            k = name
        else:
            k = f"{namespace or 'default'}/{name}"
        obj = REGISTRY.render_object(cluster, kind, k, now)
        return [obj] if obj is not None else []
    objs = REGISTRY.render_all(cluster, kind, now)
    return [o for k, o in objs.items() if not namespace or k.startswith(f"{namespace}/")]


def summary_table(kind: KindToken, objs: list[dict[str, Any]], seq: int) -> Table:
    t = Table(title=f"{kind}s at sequence {seq}", box=None, title_justify="left")
    scoped = REGISTRY.of(kind).namespaced
    if scoped:
        t.add_column("NAMESPACE")
    t.add_column("NAME")
    t.add_column("STATUS")
    t.add_column("NODE")
    t.add_column("RV")
    for o in objs:
        md, st = o.get("metadata") or {}, o.get("status") or {}
        status = st.get("printableStatus") or st.get("phase") or ""
        node = st.get("nodeName") or (st.get("migrationState") or {}).get("targetNode") or ""
        if kind == Kind.NODE:
            ready = (st.get("conditions") or [{}])[0].get("status") == "True"
            status = ("Ready" if ready else "NotReady") + (
                "" if st.get("schedulable", True) else ",SchedulingDisabled"
            )
        row = [md.get("name", ""), status, node, md.get("resourceVersion", "")]
        t.add_row(*([md.get("namespace", "")] if scoped else []), *row)
    return t


# -------------------------------------------------------------------- why
def why(
    ref: str = typer.Argument(..., metavar="KIND/NAME", help=REF_HELP),
    seq: int = typer.Option(0, "--seq", help="Explain this event instead of the latest change"),
    output: str = Output,
    nats_url: str = NatsUrl,
    stream: str = StreamName,
) -> None:
    """The causal chain behind an object's current state, with each hop's latency."""
    agg = _agg(ref)
    ref_text = REGISTRY.ref_text(agg)
    chain = _run(nats_url, stream, lambda store: causality.why(store, agg, anchor_seq=seq or None))
    slowest = chain.slowest
    if output == "json":
        body = msgspec.to_builtins(chain)
        body["slowest"] = slowest
        body["total"] = chain.total
        _json_line(body)
        return
    console = _console()
    if not chain.hops:
        raise _fail(f"{ref_text}: no events")
    console.print(f"[bold]why {escape(ref_text)}[/]  correlation {escape(chain.correlation_id)}")
    for i, h in enumerate(chain.hops):
        mark = "  [red bold]◀ slowest[/]" if i == slowest else ""
        seqtxt = f"#{h.seq}" if h.seq else "-"
        link = "" if h.link in ("causation", "anchor") else f" [dim]({h.link})[/]"
        console.print(
            f"[dim]{seqtxt:>7}[/] {_hms(h.at)} {_latency(h.latency):>9} "
            f"[cyan]{escape(h.actor):<20}[/] [bold]{h.type:<24}[/] {escape(h.aggregate)} "
            f"{escape(h.detail)}{link}{mark}"
        )
    if chain.missing:
        console.print(f"[yellow]cause {escape(chain.missing)} not found in the stream[/]")
    console.print(f"{len(chain.hops)} hops, {chain.total:.3f}s from the first to the last")


# ----------------------------------------------------------------- verify
VERIFY_PATIENCE = 10.0  # seconds of JetStream API timeouts verify waits through


async def through_timeouts(
    call: Callable[[], Awaitable[T]], patience: float = VERIFY_PATIENCE
) -> T:
    """`call()`, asked again with backoff while it times out, for at most `patience`
    seconds: JetStream answers its API with a timeout while a new meta leader settles (a
    failover), which is NATS being slow, not an answer. The last timeout is raised."""
    delay, deadline = 0.25, time.monotonic() + patience
    while True:
        try:
            return await call()
        except TimeoutError:
            if time.monotonic() + delay > deadline:
                raise
        await asyncio.sleep(delay)
        delay = min(delay * 2, 2.0)


def verify_cmd(
    full: bool = typer.Option(
        False, "--full", help="Rebuild from the first event (the archive's), not a checkpoint"
    ),
    output: str = Output,
    nats_url: str = NatsUrl,
    stream: str = StreamName,
) -> None:
    """Rebuild every view and compare it with the live projection (the api of the global
    --server): from verify's last agreeing rebuild (a checkpoint) and the tail, or with
    --full from the first event."""
    server = settings.server

    async def body(store: JetStreamStore) -> verify.Report:
        async with httpx.AsyncClient(timeout=30, **credentials.httpx_options(server)) as client:
            try:
                return await through_timeouts(
                    lambda: verify.verify(store, client, full=full, save=True)
                )
            except httpx.HTTPError as e:
                raise _fail(f"cannot read the live views from {server}: {e}") from None
            except TimeoutError:
                raise _fail(
                    f"NATS at {nats_url} did not answer a JetStream request for "
                    f"{VERIFY_PATIENCE:.0f}s: is its stream {stream!r} available?"
                ) from None

    report = _run(nats_url, stream, body, user="admin")  # saves its checkpoint
    if output == "json":
        _json_line(msgspec.to_builtins(report))
    else:
        console = _console()
        for d in report.differences:
            console.print(f"[red]{d.problem}[/] {d.kind}/{escape(d.key)}")
            for c in d.changes:
                console.print(f"    {escape(str(c))}  [dim](rebuilt → live)[/]")
        at_seqs = ", ".join(f"{k}@{v}" for k, v in report.seqs.items())
        verdict = "[green]OK[/]" if report.ok else f"[red]{len(report.differences)} differ[/]"
        since = f"from the checkpoint at {report.from_seq}" if report.from_seq else "in full"
        console.print(f"{verdict}: {report.compared} objects compared ({at_seqs}), {since}")
    if not report.ok:
        raise typer.Exit(1)


# ------------------------------------------------------------- checkpoint
CheckpointName = typer.Option(
    "cluster-views", "--name", help="Projection name (the checkpoint's key)"
)
CheckpointBucket = typer.Option(view_checkpoints.BUCKET, "--bucket", help="KV bucket")


def checkpoint(
    name: str = CheckpointName,
    bucket: str = CheckpointBucket,
    nats_url: str = NatsUrl,
    stream: str = StreamName,
) -> None:
    """Save a checkpoint of all views (checkpoint + tail replay = a rebuild)."""

    async def body(store: JetStreamStore) -> checkpoints.Head:
        cluster, _ = await view_checkpoints.load_cluster(store, name, bucket_name=bucket)
        return await view_checkpoints.save(store, name, cluster, bucket_name=bucket)

    head = _run(nats_url, stream, body, user="admin")  # writes the checkpoint bucket
    _console().print(
        f"checkpoint {escape(name)}: sequence {head.last_seq}, {head.size} bytes in "
        f"{head.chunks} chunk(s) of bucket {escape(bucket)}"
    )


def snapshot(
    name: str = CheckpointName,
    bucket: str = CheckpointBucket,
    nats_url: str = NatsUrl,
    stream: str = StreamName,
) -> None:
    """Deprecated: `virtstream checkpoint` (a snapshot is a VirtualMachineSnapshot)."""
    # kubectl's (cobra's) words for a command that was renamed
    print('Command "snapshot" is deprecated, use "checkpoint" instead', file=sys.stderr)
    checkpoint(name, bucket, nats_url, stream)


# ----------------------------------------------------------- dead letters
def dead_letters_cmd(
    retry: bool = typer.Option(False, "--retry", help="Re-deliver them to their subjects"),
    seq: int = typer.Option(0, "--seq", help="Only the dead letter with this sequence"),
    output: str = Output,
    nats_url: str = NatsUrl,
    stream: str = StreamName,
) -> None:
    """Messages a service could not handle (and ticks it gave up on): error, service,
    original event; --retry."""

    async def body(
        store: JetStreamStore,
    ) -> tuple[list[dead_letters.DeadLetter], list[dead_letters.Retried]]:
        dls = await dead_letters.list_dead_letters(store)
        if seq:
            dls = [d for d in dls if d.seq == seq]
        done = []
        for d in dls if retry else []:
            if d.original_subject:  # else there is nowhere to send it back to
                done.append(await dead_letters.retry(store, d))
        return dls, done

    dls, done = _run(nats_url, stream, body, user="admin" if retry else "reader")
    if output == "json":
        for d in dls:
            _json_line(
                {
                    "seq": d.seq,
                    "time": log_view.iso(d.time),
                    "service": d.service,
                    "error": d.error,
                    "originalSubject": d.original_subject,
                    "originalSeq": d.original_seq,
                    "event": msgspec.to_builtins(d.event) if d.event else None,
                    "data": None if d.event else d.data.decode(errors="replace"),
                }
            )
        for r in done:
            _json_line({"retried": r.dead_letter_seq, "subject": r.subject, "seq": r.new_seq})
        return
    console = _console()
    if not dls:
        console.print("no dead letters")
        return
    for d in dls:
        # neither bytes nor an origin: a give-up of no delivery's (a tick's)
        parked = d.data or d.original_subject
        etype = type(d.event).__name__ if d.event else "(undecodable)" if parked else "(tick)"
        where = f"{d.original_subject}#{d.original_seq}" if d.original_seq else d.original_subject
        console.print(
            f"[dim]{d.seq:>5}[/] {log_view.iso(d.time)} [cyan]{escape(d.service)}[/] "
            f"[bold]{etype}[/] {escape(where)}"
        )
        first, *rest = (d.error or "(no error recorded)").splitlines()
        console.print(
            f"      [red]{escape(first)}[/]" + (f" [dim](+{len(rest)} lines)[/]" if rest else "")
        )
    for r in done:
        console.print(f"retried {r.dead_letter_seq} → {escape(r.subject)} as #{r.new_seq}")
    if retry and len(done) < len(dls):
        console.print(f"[yellow]{len(dls) - len(done)} without an original subject stay[/]")


def register(app: typer.Typer) -> None:
    """Add the debugging commands to the `virtstream` app."""
    app.command("events")(events)
    app.command("replay")(replay)
    app.command("at")(at)
    app.command("why")(why)
    app.command("verify")(verify_cmd)
    app.command("checkpoint")(checkpoint)
    app.command("snapshot", hidden=True)(snapshot)  # the old name, with a deprecation line
    app.command("dead-letters")(dead_letters_cmd)


# standalone: python -m cli.debug ...
debug_app = typer.Typer(help="virtstream debugging from the event log", no_args_is_help=True)


@debug_app.callback()
def _globals(
    server: str = typer.Option(
        settings.server, "--server", envvar="VIRTSTREAM_SERVER", help="The api (for verify)"
    ),
) -> None:
    settings.server = server


register(debug_app)

if __name__ == "__main__":
    os.environ.setdefault("COLUMNS", "200")
    debug_app()
