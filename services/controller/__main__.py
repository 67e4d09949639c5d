"""python -m services.controller --nats-url URL [--metrics-port P] [--node-timeout S]
[--max-backoff S] [--parallel-migrations N] [--parallel-outbound-migrations N]
[--migration-bandwidth BYTES_PER_S]"""

from __future__ import annotations

if __name__ == "__main__":  # its own process: before nats, litestar and structlog
    from services.runtime import lean

    lean.skip_unused()

import argparse
import os
import socket
import sys
from pathlib import Path

from eventstore import connection
from eventstore.lease import LeaseLost
from services.controller.backoff import BackoffConfig
from services.controller.node_health import DEFAULT_NODE_TIMEOUT
from services.controller.policy import MigrationConfig
from services.controller.reactor import ControllerReactor
from services.controller.service import serve
from services.runtime import logs, loop, metrics_access


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="virt-controller")
    p.add_argument(
        "--nats-url", default="nats://127.0.0.1:4222", help="one URL or a comma-separated list"
    )
    connection.add_arguments(p)
    p.add_argument("--metrics-port", type=int, default=None)
    metrics_access.add_arguments(p)
    p.add_argument(
        "--node-timeout",
        type=float,
        default=DEFAULT_NODE_TIMEOUT,
        help="seconds without a heartbeat before a node is unresponsive",
    )
    p.add_argument(
        "--cluster-nodes",
        default=None,
        metavar="NAMES",
        help="the nodes this cluster runs, comma-separated (virtstream up gives them): a "
        "node of the log not among them is unresponsive once the node timeout has passed "
        "since its last heartbeat, without the grace a restarted controller gives the others",
    )
    p.add_argument(
        "--max-backoff", type=float, default=300.0, help="cap of the crash-loop backoff, seconds"
    )
    p.add_argument("--parallel-migrations", type=int, default=5, help="per cluster")
    p.add_argument("--parallel-outbound-migrations", type=int, default=2, help="per node")
    p.add_argument(
        "--migration-bandwidth", type=int, default=0, help="bytes/s per migration, 0: unlimited"
    )
    p.add_argument(
        "--identity",
        default=f"{socket.gethostname()}-{os.getpid()}",
        help="who holds the active controller's lease: stable per host (a restart under the "
        "same identity takes its lease over at once); default hostname-pid",
    )
    p.add_argument(
        "--lease-ttl",
        type=float,
        default=5.0,
        help="seconds after the active controller's last renewal that a standby takes over",
    )
    p.add_argument(
        "--export-key-file",
        type=Path,
        help="the key VirtualMachineExport tokens are derived from (kept secret)",
    )
    p.add_argument("--export-url", default="", help="the api's URL, as export links name it")
    args = p.parse_args(argv)
    connection.from_arguments(args)
    access = metrics_access.from_arguments(p, args)
    logs.configure()
    controller = ControllerReactor(
        node_timeout=args.node_timeout,
        cluster_nodes=(
            frozenset(n for n in args.cluster_nodes.split(",") if n)
            if args.cluster_nodes is not None
            else None
        ),
        backoff_config=BackoffConfig(max_delay=args.max_backoff),
        migration_config=MigrationConfig(
            parallel_migrations_per_cluster=args.parallel_migrations,
            parallel_outbound_migrations_per_node=args.parallel_outbound_migrations,
            bandwidth_per_migration=args.migration_bandwidth,
        ),
        export_key=args.export_key_file.read_bytes() if args.export_key_file else None,
        export_url=args.export_url,
    )
    try:
        loop.run(
            serve(
                controller,
                args.nats_url,
                metrics_port=args.metrics_port,
                identity=args.identity,
                lease_ttl=args.lease_ttl,
                metrics_access=access,
            ),
            "virt-controller",
        )
    except LeaseLost as e:  # stopped acting; a supervisor starts it again as a standby
        print(f"virt-controller: {e}", file=sys.stderr)
        raise SystemExit(3) from None


if __name__ == "__main__":
    main()
