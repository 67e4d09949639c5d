"""python -m services.whatif --nats-url URL [--scheduler-policy P]
[--scheduler-weights W]: the whole retained log replayed through the controller's decider
with a scheduler change (services/controller/whatif.py), the report as one JSON line on
stdout. The api runs it for the web console as a process of its own, so a replay's CPU
never stalls the api's answers; the NATS credentials come from the environment."""

from __future__ import annotations

if __name__ == "__main__":  # its own process: before nats and structlog
    from services.runtime import lean

    lean.skip_unused()

import argparse
import asyncio
import sys

import msgspec

from eventstore.connection import connect_service
from eventstore.jetstream import JetStreamStore
from eventstore.settings import StreamSettings
from services.controller import scheduler
from services.controller.reactor import ControllerReactor
from services.controller.whatif import Report, WhatIf, scheduler_change
from services.whatif import replay as whatif_replay


async def replay(nats_url: str, policy: str, weights: str) -> Report:
    nc = await connect_service(nats_url, "virt-whatif")
    try:
        store = JetStreamStore(nc, StreamSettings.from_env())
        decider = ControllerReactor(
            scheduler_policy=policy or scheduler.SPREAD,
            scheduler_weights=scheduler.parse_weights(weights),
        )
        sandbox = WhatIf(decider, change=scheduler_change(policy, weights))
        return await whatif_replay.replay(store, sandbox)
    finally:
        await nc.close()


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="virt-whatif")
    p.add_argument("--nats-url", required=True)
    p.add_argument("--scheduler-policy", default="", choices=("", *scheduler.POLICIES))
    p.add_argument("--scheduler-weights", default="")
    args = p.parse_args(argv)
    try:
        report = asyncio.run(replay(args.nats_url, args.scheduler_policy, args.scheduler_weights))
    except Exception as e:  # one line for the api to show
        print(f"what-if failed: {e}", file=sys.stderr)
        raise SystemExit(1) from None
    sys.stdout.buffer.write(msgspec.json.encode(report) + b"\n")


if __name__ == "__main__":
    main()
