"""The nats-server config renderer: the checked-in three-host configs are what it renders,
a local cluster's servers route to each other on distinct ports, and `nats-server -t`
accepts what it renders."""

from __future__ import annotations

import subprocess
from pathlib import Path

from ops.nats_config import example_install, local_cluster, render
from ops.nats_server import find_binary

REPO = Path(__file__).resolve().parents[2]


def test_the_checked_in_host_configs_are_rendered_from_the_example_settings() -> None:
    for settings in example_install():
        assert (REPO / "ops" / "nats" / f"{settings.name}.conf").read_text() == render(settings)


def test_a_local_cluster_routes_every_server_to_all_on_distinct_ports(tmp_path: Path) -> None:
    servers = local_cluster(3, tmp_path, client_ports=[4999, 5001, 5002])
    assert servers[0].port == 4999
    routes = {s.cluster.routes for s in servers if s.cluster}
    assert len(routes) == 1 and len(next(iter(routes))) == 3
    ports = [p for s in servers for p in (s.port, s.http_port, s.cluster.port if s.cluster else 0)]
    assert len(set(ports)) == len(ports)
    assert len({s.store_dir for s in servers}) == 3 and len({s.name for s in servers}) == 3


def test_nats_server_accepts_the_rendered_configs(tmp_path: Path) -> None:
    for settings in [*example_install(), *local_cluster(3, tmp_path)]:
        conf = tmp_path / f"{settings.name}.conf"
        conf.write_text(render(settings))
        done = subprocess.run([find_binary(), "-c", str(conf), "-t"], capture_output=True)
        assert done.returncode == 0, done.stderr.decode()
