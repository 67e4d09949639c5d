"""`virtstream whatif`: the log replayed through the controller's decider in a sandbox
(services/controller/whatif.py), with one change or none, and each decision that differs
from the one the log records. Reads NATS directly (as the debug commands do: the read-only
user); appends nothing."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import msgspec
import typer
import yaml
from rich.markup import escape
from rich.table import Table

from cli.debug import POINT_HELP, NatsUrl, StreamName, _console, _fail, _json_line, _point, _run
from core.errors import ApiError
from events.codec import event_type
from eventstore.jetstream import JetStreamStore
from services.controller import decider_spec, scheduler
from services.controller.reactor import ControllerReactor
from services.controller.whatif import Decider, Report, WhatIf, scheduler_change
from services.whatif import changes
from services.whatif import replay as whatif_replay


def load_decider(spec: str) -> Decider:
    """`controller=MODULE:FACTORY`, MODULE looked up from the working directory too."""
    try:
        return decider_spec.load(spec, os.getcwd())
    except ValueError as e:
        raise _fail(f"--decider {e}") from None


def policy_prelude(path: Path) -> tuple[changes.Prelude, str]:
    """`--migration-policy FILE`: the MigrationPolicy in FILE, put in place as the window
    begins (`services/whatif/changes.py`), and the change named as the api names it;
    refused at once, in the api's words, when the api would refuse it."""
    try:
        manifest = yaml.safe_load(path.read_text())
        prelude = changes.migration_policy(manifest)
    except (OSError, yaml.YAMLError, changes.NotAPolicy) as e:
        raise _fail(f"--migration-policy {path}: {e}") from None
    except ApiError as e:
        raise _fail(f"--migration-policy {path}: {e.status.message}") from None
    return prelude, f"{changes.policy_name(manifest)} ({path})"


async def _window(store: JetStreamStore, since: str, until: str) -> tuple[int, int | None]:
    """The first and last sequence decided on (None: to the log's end)."""
    first, last = 1, None
    now = time.time()
    if since:
        p = _point(since)
        first = p.seq if p.seq is not None else await store.seq_at_time(p.time or now) + 1
    if until:
        p = _point(until)
        last = p.seq if p.seq is not None else await store.seq_at_time(p.time or now)
    return max(first, 1), last


async def run_whatif(
    store: JetStreamStore,
    decider: Decider,
    since: str,
    until: str,
    change: str,
    prelude: changes.Prelude | None = None,
) -> tuple[Report, dict[str, Any] | None]:
    """Fold the whole log once (the archive included), decide on each event of the window;
    the live decisions of the window's causes are read to the log's end."""
    first, last = await _window(store, since, until)
    sandbox = WhatIf(decider, since=first, until=last, change=change, prelude=prelude)
    try:
        report = await whatif_replay.replay(store, sandbox)
    except whatif_replay.DeciderFailed as e:
        raise _fail(f"the decider failed: {e}") from None
    cause = None
    fd = report.summary.first_divergence
    if fd and fd["cause"]:
        s = await store.get(fd["cause"])
        if s is not None:
            cause = {
                "seq": s.seq,
                "type": event_type(s.event),
                "aggregate": s.event.meta.aggregate.key,
                "actor": s.event.meta.actor.service,
            }
    return report, cause


def whatif(
    since: str = typer.Option("", "--since", help=f"First event decided on: {POINT_HELP}"),
    until: str = typer.Option("", "--until", help=f"Last event decided on: {POINT_HELP}"),
    scheduler_policy: str = typer.Option(
        "", "--scheduler-policy", help=f"Place pending VMIs by: {' | '.join(scheduler.POLICIES)}"
    ),
    scheduler_weights: str = typer.Option(
        "",
        "--scheduler-weights",
        metavar="cpu=N,memory=N",
        help="Score the nodes that fit by these resources' weighted shares of capacity "
        "(kube-scheduler's NodeResourcesFit), with --scheduler-policy's strategy "
        "(default spread)",
    ),
    migration_policy: Path | None = typer.Option(
        None,
        "--migration-policy",
        help="A MigrationPolicy (YAML) in effect from the window's start",
    ),
    decider: str = typer.Option(
        "", "--decider", help="Another controller: controller=MODULE:FACTORY"
    ),
    output: str = typer.Option("table", "--output", "-o", help="table | json"),
    nats_url: str = NatsUrl,
    stream: str = StreamName,
) -> None:
    """What the controller would have decided on the log's history, with a change
    (a scheduler policy, a migration policy, another decider) or none; each difference from
    the decisions the log records. With no change there must be none: a difference is a
    bug (a hidden input)."""
    scheduling = scheduler_policy or scheduler_weights
    if sum(map(bool, (scheduling, decider, migration_policy))) > 1:
        raise _fail(
            "one change at a time: --scheduler-policy/--scheduler-weights, --migration-policy "
            "or --decider"
        )
    if scheduler_policy and scheduler_policy not in scheduler.POLICIES:
        raise _fail(
            f"unknown scheduler policy {scheduler_policy!r}: {' | '.join(scheduler.POLICIES)}"
        )
    try:
        weights = scheduler.parse_weights(scheduler_weights)
    except ValueError as e:
        raise _fail(f"--scheduler-weights: {e}") from None
    prelude = None
    if decider:
        sandboxed, change = load_decider(decider), f"decider {decider}"
    elif migration_policy is not None:
        prelude, change = policy_prelude(migration_policy)
        sandboxed = ControllerReactor()
    elif scheduling:
        policy = scheduler_policy or scheduler.SPREAD
        sandboxed = ControllerReactor(scheduler_policy=policy, scheduler_weights=weights)
        change = scheduler_change(policy, scheduler_weights)
    else:
        sandboxed, change = ControllerReactor(), "none"
    report, cause = _run(
        nats_url,
        stream,
        lambda store: run_whatif(store, sandboxed, since, until, change, prelude),
    )
    if output == "json":
        out = msgspec.to_builtins(report)
        if cause is not None:
            out["summary"]["first_divergence"]["event"] = cause
        _json_line(out)
    else:
        _print(report, cause)
    if report.differences and change == "none":
        raise typer.Exit(1)  # today's decider did not reproduce the log: a bug


def _side(side: Any) -> str:
    if side is None:
        return "-"
    text = side.type + (f" on {side.node}" if side.node else "")
    return text + (f" ({', '.join(side.fields)} differ)" if side.fields else "")


def _print(report: Report, cause: dict[str, Any] | None) -> None:
    console = _console()
    s = report.summary
    if report.differences:
        table = Table(box=None, pad_edge=False)
        for col in ("CAUSE", "SEQ", "AGGREGATE", "LIVE", "WHATIF"):
            table.add_column(col)
        for d in report.differences:
            table.add_row(
                str(d.cause or "tick"),
                str(d.seq),
                escape(d.aggregate),
                escape(_side(d.live)),
                escape(_side(d.whatif)),
            )
        console.print(table)
        console.print()
    console.print(
        f"change: {escape(s.change)}; events {s.window[0]}..{s.window[1]}: "
        f"{report.events} decided on, {report.decisions} decisions; "
        f"{s.live_decisions} recorded for them, {s.reproduced} reproduced, "
        f"{len(report.differences)} differ; "
        f"{s.ticks_left_out} recorded for ticks left out (a tick's time is not in the log)"
    )
    nodes = sorted(set(s.placements["live"]) | set(s.placements["whatif"]))
    if nodes:
        table = Table(box=None, pad_edge=False, title="placements per node", title_justify="left")
        for col in ("NODE", "LIVE", "WHATIF"):
            table.add_column(col)
        for n in nodes:
            table.add_row(
                n, str(s.placements["live"].get(n, 0)), str(s.placements["whatif"].get(n, 0))
            )
        console.print(table)
    fd = s.first_divergence
    if fd is not None:
        what = (
            f"{cause['type']} of {cause['aggregate']} (by {cause['actor']})" if cause else "a tick"
        )
        console.print(f"first divergence: at event {fd['cause']}: {escape(what)}")
    else:
        console.print("no divergence")


def register(app: typer.Typer) -> None:
    app.command("whatif")(whatif)
