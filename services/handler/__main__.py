"""`python -m services.handler --node NAME --nats-url URL --run-dir DIR`: one virt-handler."""

from __future__ import annotations

import argparse
import asyncio

from eventstore.settings import StreamSettings
from services.handler.node_info import NodeConfig
from services.handler.service import HandlerConfig, serve
from services.runtime import logs


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m services.handler", description=__doc__)
    p.add_argument("--node", required=True)
    p.add_argument("--nats-url", default="nats://127.0.0.1:4222")
    p.add_argument("--run-dir", required=True, help="launcher sockets go in <dir>/<node>/")
    p.add_argument("--cpus", type=int, default=None, help="default: libvirt getInfo()")
    p.add_argument("--memory", default=None, help="e.g. 16Gi; default: libvirt getInfo()")
    p.add_argument("--hypervisor", default="test", choices=["test"])
    p.add_argument("--address", default="127.0.0.1")
    p.add_argument("--metrics-port", type=int, default=None)
    p.add_argument("--heartbeat-interval", type=float, default=5.0)
    p.add_argument("--stream", default="VIRT", help="event stream name (tests use others)")
    p.add_argument("--storage", default="file", choices=["file", "memory"])
    a = p.parse_args(argv)
    logs.configure()
    cfg = HandlerConfig(
        node=NodeConfig(
            name=a.node, cpus=a.cpus, memory=a.memory, hypervisor=a.hypervisor, address=a.address
        ),
        nats_url=a.nats_url,
        run_dir=a.run_dir,
        metrics_port=a.metrics_port,
        heartbeat_interval=a.heartbeat_interval,
        settings=StreamSettings(name=a.stream, dlq_name=f"{a.stream}_DLQ", storage=a.storage),
    )
    asyncio.run(serve(cfg))


if __name__ == "__main__":
    main()
