"""python -m services.whatif --nats-url URL [--scheduler-policy P] [--scheduler-weights W]
[--migration-policy -]: the whole retained log replayed through the controller's decider
with a scheduler change, or a MigrationPolicy (JSON on stdin) put in place as it begins
(services/controller/whatif.py, services/whatif/changes.py), the report as one JSON line
on stdout. The api runs it for the web console as a process of its own, so a replay's CPU
never stalls the api's answers; the NATS credentials come from the environment."""

from __future__ import annotations

if __name__ == "__main__":  # its own process: before nats and structlog
    from services.runtime import lean

    lean.skip_unused()

import argparse
import asyncio
import sys
from typing import Any

import msgspec

from core.errors import ApiError
from eventstore.connection import connect_service
from eventstore.jetstream import JetStreamStore
from eventstore.settings import StreamSettings
from services.controller import scheduler
from services.controller.reactor import ControllerReactor
from services.controller.whatif import Report, WhatIf, scheduler_change
from services.whatif import changes
from services.whatif import replay as whatif_replay


async def replay(
    nats_url: str, policy: str, weights: str, migration_policy: dict[str, Any] | None = None
) -> Report:
    decider = ControllerReactor(
        scheduler_policy=policy or scheduler.SPREAD,
        scheduler_weights=scheduler.parse_weights(weights),
    )
    if migration_policy is not None:
        sandbox = WhatIf(
            decider,
            change=changes.policy_name(migration_policy),
            prelude=changes.migration_policy(migration_policy),
        )
    else:
        sandbox = WhatIf(decider, change=scheduler_change(policy, weights))
    nc = await connect_service(nats_url, "virt-whatif")
    try:
        store = JetStreamStore(nc, StreamSettings.from_env())
        return await whatif_replay.replay(store, sandbox)
    finally:
        await nc.close()


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="virt-whatif")
    p.add_argument("--nats-url", required=True)
    p.add_argument("--scheduler-policy", default="", choices=("", *scheduler.POLICIES))
    p.add_argument("--scheduler-weights", default="")
    p.add_argument("--migration-policy", choices=("-",), help="a MigrationPolicy on stdin")
    args = p.parse_args(argv)
    try:
        manifest = msgspec.json.decode(sys.stdin.buffer.read()) if args.migration_policy else None
        report = asyncio.run(
            replay(args.nats_url, args.scheduler_policy, args.scheduler_weights, manifest)
        )
    except ApiError as e:
        print(f"what-if failed: {e.status.message}", file=sys.stderr)
        raise SystemExit(1) from None
    except Exception as e:  # one line for the api to show
        print(f"what-if failed: {e}", file=sys.stderr)
        raise SystemExit(1) from None
    sys.stdout.buffer.write(msgspec.json.encode(report) + b"\n")


if __name__ == "__main__":
    main()
