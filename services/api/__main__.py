"""`python -m services.api --nats-url URL --port P [--host H] [--read-only]
[--watch-history N] [--prometheus-url URL]`."""

from __future__ import annotations

if __name__ == "__main__":  # its own process: before nats, litestar and structlog
    from services.runtime import lean

    lean.skip_unused()

import argparse
from pathlib import Path

import uvicorn
from nats.js.api import StorageType

from core.names import SOCKET_NAME_MAX
from events import unknown_fields
from eventstore import checkpoints, connection
from eventstore.connection import ConnectOptions, connect_service
from eventstore.jetstream import JetStreamStore
from eventstore.keyed import JetStreamKeyedRecords
from eventstore.settings import StreamSettings
from kinds.registry import REGISTRY
from readside.runner import WATCH_HISTORY, ProjectionRunner
from services.api import prometheus_proxy, whatif_runs
from services.api.app import create_app
from services.api.auth import Authenticator, AuthFileError
from services.api.guard import Guard
from services.api.nats_endpoints import serve_intents
from services.api.node_ports import NodePorts
from services.api.server import Tls
from services.api.server import config as server_config
from services.api.service import ApiService
from services.runtime import loop
from services.runtime.metrics_access import MetricsAccess
from services.runtime.mtls import TlsFiles


async def serve(
    nats_url: str,
    host: str = "127.0.0.1",
    port: int = 8080,
    *,
    read_only: bool = False,
    settings: StreamSettings | None = None,
    watch_history: int = WATCH_HISTORY,
    socket_name_max: int = SOCKET_NAME_MAX,
    auth_file: Path | None = None,
    tls: Tls | None = None,
    nats_options: ConnectOptions | None = None,
    console_tls: TlsFiles | None = None,
    metrics: MetricsAccess | None = None,
    prometheus: prometheus_proxy.Upstream | None = None,
    disk_dir: Path | None = None,
    common_instancetypes: bool = True,
    upload_key: bytes | None = None,
    upload_dir: Path | None = None,
) -> None:
    """Run the api (or, read_only, the read side alone) until SIGINT/SIGTERM. With an
    `auth_file`, every request is authenticated and authorized by it; without
    `common_instancetypes`, KubeVirt's common instance types and preferences are not
    deployed at the start."""
    guard = (
        Guard.of(Authenticator(auth_file, metrics=metrics), REGISTRY)
        if auth_file is not None
        else None
    )
    nc = await connect_service(nats_url, "virt-api", nats_options)
    settings = settings or StreamSettings.from_env()
    store = JetStreamStore(nc, settings)
    await store.ensure()
    # the api and its read replicas fold the same views: one shared snapshot name
    runner = ProjectionRunner(store, history=watch_history, checkpoint_name=checkpoints.API_VIEWS)
    await runner.start()
    # idempotency keys in a bucket every api replica shares, kept as long as JetStream
    # drops a re-appended event as a duplicate
    keys = JetStreamKeyedRecords(
        nc.jetstream(),
        settings.duplicate_window_seconds,
        replicas=settings.replicas,
        storage=StorageType.MEMORY if settings.storage == "memory" else StorageType.FILE,
    )
    api = ApiService(
        runner, None if read_only else store, socket_name_max=socket_name_max, keys=keys
    )
    if not read_only:
        unknown_fields.prepare(spec.object_type for spec in REGISTRY)
        await api.bootstrap(common_instancetypes=common_instancetypes)
    app = create_app(
        api,
        guard,
        console_tls=console_tls.client_context() if console_tls else None,
        disk_dir=disk_dir,
        upload_key=upload_key,
        upload_dir=upload_dir,
    )
    # the node ports of NodePort Services, on this host (services/api/node_ports.py)
    node_ports = None if read_only else NodePorts(runner, host, app.state.get("console_tls"))
    if node_ports is not None:
        await node_ports.start()
    app.state[prometheus_proxy.STATE_KEY] = prometheus  # the web console's charts
    # the console's what-if: replays in a process of their own, as this api's NATS user
    connect_env = (nats_options or ConnectOptions.from_env()).env()
    app.state[whatif_runs.STATE_KEY] = whatif_runs.WhatIfRuns(nats_url, connect_env)
    # the same intents over NATS request-reply (writers only: a replica in the queue
    # group would be handed writes it must refuse)
    over_nats = None if read_only else await serve_intents(nc, api, guard)
    # the index, the archive and the hot log's trimming are the upkeep service's
    # (services/upkeep/): none of it answers a user
    server = uvicorn.Server(
        server_config(app, host=host, port=port, tls=tls, log_level="warning", lifespan="on")
    )
    try:
        await server.serve()  # uvicorn handles SIGINT/SIGTERM
    finally:
        if node_ports is not None:
            await node_ports.stop()
        if over_nats is not None:
            await over_nats.stop()
        await runner.stop()
        await nc.drain()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m services.api")
    parser.add_argument(
        "--nats-url", default="nats://127.0.0.1:4222", help="one URL or a comma-separated list"
    )
    connection.add_arguments(parser)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8080)
    parser.add_argument("--read-only", action="store_true", help="serve reads only (replica)")
    parser.add_argument(
        "--watch-history",
        type=int,
        default=WATCH_HISTORY,
        help="changes kept for watches resuming from a resourceVersion (older ones get 410)",
    )
    parser.add_argument(
        "--max-socket-name",
        type=int,
        default=SOCKET_NAME_MAX,
        help="bytes a VM's or VMI's <namespace>_<name> may take (it names the launcher's "
        "unix socket under <run-dir>/<node>/launchers/, limited to 107 bytes in all)",
    )
    parser.add_argument(
        "--auth-file",
        type=Path,
        help="users, tokens and role bindings (YAML, services/api/auth.py); "
        "without it the api serves anyone (insecure)",
    )
    parser.add_argument("--tls-cert", type=Path, help="serve HTTPS with this certificate")
    parser.add_argument("--tls-key", type=Path, help="the certificate's key")
    parser.add_argument("--client-ca", type=Path, help="CA of the client certificates accepted")
    parser.add_argument(
        "--console-cert",
        type=Path,
        help="the api's client certificate for the nodes' console servers (mutual TLS)",
    )
    parser.add_argument("--console-key", type=Path, help="its key")
    parser.add_argument("--console-ca", type=Path, help="the CA of the nodes' certificates")
    parser.add_argument(
        "--metrics-token-file",
        type=Path,
        help="bearer tokens (one per line) of the user `prometheus` in group "
        "system:monitoring, which may read /metrics (with --auth-file)",
    )
    parser.add_argument(
        "--prometheus-url",
        default="",
        help="a Prometheus whose query API the api relays at /prometheus/api/v1/ (charts)",
    )
    parser.add_argument(
        "--prometheus-user", default="", help="the basic-auth user the api asks Prometheus as"
    )
    parser.add_argument(
        "--prometheus-password-file", type=Path, help="that user's password (the file's text)"
    )
    parser.add_argument(
        "--disk-dir", type=Path, help="the nodes' disk dir: VirtualMachineExports serve it"
    )
    parser.add_argument(
        "--upload-key-file",
        type=Path,
        help="the key CDI's upload tokens are signed with (every api replica the same)",
    )
    parser.add_argument(
        "--upload-dir",
        type=Path,
        help="where uploads are staged for the nodes' handlers: their disk dir's uploads/",
    )
    parser.add_argument(
        "--no-common-instancetypes",
        action="store_true",
        help="do not deploy KubeVirt's common instance types and preferences at the start "
        "(KubeVirt's commonInstancetypesDeployment.enabled: false); deployed ones stay",
    )
    args = parser.parse_args(argv)
    if args.watch_history < 1:
        parser.error("--watch-history must be at least 1")
    connection.from_arguments(args)
    if bool(args.tls_cert) != bool(args.tls_key):
        parser.error("--tls-cert and --tls-key go together")
    tls = Tls(args.tls_cert, args.tls_key, args.client_ca) if args.tls_cert else None
    console_files = (args.console_cert, args.console_key, args.console_ca)
    if any(console_files) and not all(console_files):
        parser.error("--console-cert, --console-key and --console-ca go together")
    if args.auth_file is not None:
        try:
            Authenticator(args.auth_file)
        except AuthFileError as exc:
            parser.exit(1, f"error: {exc}\n")
    try:
        metrics = MetricsAccess.load(args.metrics_token_file)
    except ValueError as exc:
        parser.exit(1, f"error: {exc}\n")
    loop.run(
        serve(
            args.nats_url,
            args.host,
            args.port,
            read_only=args.read_only,
            watch_history=args.watch_history,
            socket_name_max=args.max_socket_name,
            auth_file=args.auth_file,
            tls=tls,
            console_tls=TlsFiles(*console_files) if all(console_files) else None,
            metrics=metrics,
            prometheus=prometheus_proxy.Upstream.of(
                args.prometheus_url, args.prometheus_user, args.prometheus_password_file
            ),
            disk_dir=args.disk_dir,
            common_instancetypes=not args.no_common_instancetypes,
            upload_key=args.upload_key_file.read_bytes() if args.upload_key_file else None,
            upload_dir=args.upload_dir,
        ),
        "virt-api",
    )


if __name__ == "__main__":
    main()
