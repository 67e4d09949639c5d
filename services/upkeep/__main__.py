"""python -m services.upkeep --nats-url URL [--metrics-port P] [--identity ID]
[--lease-ttl S]: the log's upkeep (index, archive, retirement), active while it holds the
lease."""

from __future__ import annotations

if __name__ == "__main__":  # its own process: before nats and structlog
    from services.runtime import lean

    lean.skip_unused()

import argparse
import os
import socket
import sys

from eventstore import connection
from eventstore.lease import LeaseLost
from services.runtime import logs, loop, metrics_access
from services.runtime.shell import run_process
from services.upkeep.service import NAME, UpkeepService


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog=NAME)
    p.add_argument(
        "--nats-url", default="nats://127.0.0.1:4222", help="one URL or a comma-separated list"
    )
    connection.add_arguments(p)
    p.add_argument("--metrics-port", type=int, default=None)
    metrics_access.add_arguments(p)
    p.add_argument(
        "--identity",
        default=f"{socket.gethostname()}-{os.getpid()}",
        help="who holds the upkeep's lease: stable per host; default hostname-pid",
    )
    p.add_argument(
        "--lease-ttl",
        type=float,
        default=15.0,
        help="seconds after the active process's last renewal that a standby takes over "
        "(it renews every quarter of it: nothing waits on a takeover of the upkeep)",
    )
    args = p.parse_args(argv)
    connection.from_arguments(args)
    access = metrics_access.from_arguments(p, args)
    logs.configure()
    try:
        loop.run(
            run_process(
                NAME,
                args.nats_url,
                lambda store: UpkeepService(
                    store, identity=args.identity, lease_ttl=args.lease_ttl
                ),
                metrics_port=args.metrics_port,
                metrics_access=access,
            ),
            NAME,
        )
    except LeaseLost as e:  # stopped working; a supervisor starts it again as a standby
        print(f"{NAME}: {e}", file=sys.stderr)
        raise SystemExit(3) from None


if __name__ == "__main__":
    main()
