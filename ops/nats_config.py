"""nats-server configuration, rendered from settings given as data.

Every server `virtstream up` starts (one embedded, or a cluster on this machine) and the
example configuration of a three-host install in ops/nats/ come from `render`: what a
server needs beyond this (accounts, users and permissions, TLS) is one more field of
`ServerSettings` and one more block here, not a change to whoever starts the servers.
"""

from __future__ import annotations

import json
from pathlib import Path

import msgspec

from ops.ports import free_port


class ClusterSettings(msgspec.Struct, frozen=True, kw_only=True):
    """The server's route listener and its peers (JetStream needs 3 or 5 for R3/R5)."""

    name: str = "virtstream"
    host: str = "127.0.0.1"
    port: int = 6222
    #: every server of the cluster, this one included (nats-server skips its own route)
    routes: tuple[str, ...] = ()


class ServerSettings(msgspec.Struct, frozen=True, kw_only=True):
    name: str
    host: str = "127.0.0.1"
    port: int = 4222
    http_port: int = 8222  # monitoring: /healthz, /jsz (0: none)
    #: where monitoring listens ("": `host`); it has no authentication of its own
    http_host: str = ""
    store_dir: str = "/var/lib/nats"
    #: "always" fsyncs every write before the ack (power-loss safe); or a duration, e.g. 2m
    sync_interval: str = "always"
    cluster: ClusterSettings | None = None
    #: clients connect with TLS: the server's certificate and key files ("" = plain)
    tls_cert: str = ""
    tls_key: str = ""
    #: users and permissions, as ops/nats_auth.py renders the block ("" = anonymous)
    authorization: str = ""


def _q(value: str) -> str:
    return json.dumps(value)  # a double-quoted string nats-server's parser accepts


def render(s: ServerSettings) -> str:
    lines = [
        f"server_name: {_q(s.name)}",
        f"host: {_q(s.host)}",
        f"port: {s.port}",
    ]
    if s.http_port:
        lines.append(f"http: {_q(f'{s.http_host or s.host}:{s.http_port}')}")
    lines += [
        "jetstream {",
        f"  store_dir: {_q(s.store_dir)}",
        f"  sync_interval: {_q(s.sync_interval)}",
        "}",
    ]
    if s.cluster is not None:
        c = s.cluster
        lines += [
            "cluster {",
            f"  name: {_q(c.name)}",
            f"  listen: {_q(f'{c.host}:{c.port}')}",
            "  routes: [",
            *(f"    {_q(r)}" for r in c.routes),
            "  ]",
            "}",
        ]
    if s.tls_cert:
        lines += ["tls {", f"  cert_file: {_q(s.tls_cert)}", f"  key_file: {_q(s.tls_key)}", "}"]
    return "\n".join(lines) + "\n" + s.authorization


def local_cluster(
    size: int,
    base_dir: Path,
    *,
    host: str = "127.0.0.1",
    sync_interval: str = "always",
    client_ports: list[int] | None = None,
    monitoring: bool = True,
) -> list[ServerSettings]:
    """`size` servers clustered on this machine: free client, monitoring (unless not
    `monitoring`) and route ports, a store dir each under `base_dir/<name>`."""
    route_ports = [free_port(host) for _ in range(size)]
    routes = tuple(f"nats-route://{host}:{p}" for p in route_ports)
    ports = client_ports or [free_port(host) for _ in range(size)]
    return [
        ServerSettings(
            name=f"virtstream-{i + 1}",
            host=host,
            port=ports[i],
            http_port=free_port(host) if monitoring else 0,
            store_dir=str(base_dir / f"nats-{i + 1}"),
            sync_interval=sync_interval,
            cluster=ClusterSettings(host=host, port=route_ports[i], routes=routes),
        )
        for i in range(size)
    ]


#: the three-host install of docs/OPERATIONS.md (ops/nats/nats-<n>.conf are rendered from it)
EXAMPLE_HOSTS = ("10.0.0.11", "10.0.0.12", "10.0.0.13")


def example_install() -> list[ServerSettings]:
    routes = tuple(f"nats-route://{h}:6222" for h in EXAMPLE_HOSTS)
    return [
        ServerSettings(
            name=f"nats-{i + 1}",
            host="0.0.0.0",
            port=4222,
            http_port=8222,
            http_host="127.0.0.1",  # unauthenticated: for a local exporter, not the network
            store_dir="/var/lib/nats",
            cluster=ClusterSettings(host="0.0.0.0", port=6222, routes=routes),
        )
        for i in range(len(EXAMPLE_HOSTS))
    ]


def write_examples(out_dir: Path) -> list[Path]:
    """`python -m ops.nats_config DIR`: the example configs, one per host."""
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for settings in example_install():
        path = out_dir / f"{settings.name}.conf"
        path.write_text(render(settings))
        written.append(path)
    return written


if __name__ == "__main__":
    import sys

    for path in write_examples(Path(sys.argv[1] if len(sys.argv) > 1 else "ops/nats")):
        print(path)
