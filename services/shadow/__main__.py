"""python -m services.shadow --decider controller=MODULE:FACTORY --nats-url URL
[--module-path DIR] [--name NAME] [--grace S] [--metrics-port P]: another version of the
controller's decider on the live stream, its decisions compared with the live
controller's; appends nothing."""

from __future__ import annotations

if __name__ == "__main__":  # its own process: before nats and structlog
    from services.runtime import lean

    lean.skip_unused()

import argparse
import os
import sys

from eventstore import connection
from services.controller import decider_spec
from services.controller.shadow import GRACE
from services.runtime import logs, loop, metrics_access
from services.runtime.shell import run_process
from services.shadow.service import ShadowService

NAME = "virt-shadow"


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog=NAME)
    p.add_argument(
        "--decider",
        required=True,
        metavar="controller=MODULE:FACTORY",
        help="the decider to run in shadow: FACTORY() from MODULE",
    )
    p.add_argument(
        "--module-path",
        default=os.getcwd(),
        metavar="DIR",
        help="where MODULE is looked up besides the installed packages (default: here)",
    )
    p.add_argument(
        "--name",
        default="shadow",
        help="this shadow's name: its latest divergences are kept and shown under it",
    )
    p.add_argument(
        "--grace",
        type=float,
        default=GRACE,
        help="seconds after its cause that a decision only the shadow made is a divergence",
    )
    p.add_argument(
        "--nats-url", default="nats://127.0.0.1:4222", help="one URL or a comma-separated list"
    )
    connection.add_arguments(p)
    p.add_argument("--metrics-port", type=int, default=None)
    metrics_access.add_arguments(p)
    args = p.parse_args(argv)
    try:
        decider = decider_spec.load(args.decider, args.module_path)
    except ValueError as e:
        print(f"{NAME}: --decider {e}", file=sys.stderr)
        raise SystemExit(2) from None
    connection.from_arguments(args)
    access = metrics_access.from_arguments(p, args)
    logs.configure()
    loop.run(
        run_process(
            NAME,
            args.nats_url,
            lambda store: ShadowService(
                store, decider, args.decider, name=args.name, grace=args.grace
            ),
            metrics_port=args.metrics_port,
            metrics_access=access,
        ),
        NAME,
    )


if __name__ == "__main__":
    main()
