"""ops.node_libvirtd: a libvirtd per node in its own mount namespace, and nothing left behind
after stop, nor after a crash once cleanup_stale has run. Skipped without the qemu packages."""

from __future__ import annotations

import os
import signal
import tempfile
from collections.abc import Iterator
from pathlib import Path

import libvirt
import pytest

from ops.node_libvirtd import NodeRuntime, cleanup_stale, processes_in_namespace, read_state
from services.launcher.domain_xml import DomainType, build_domain_xml
from tests.integration.qemu_support import pid_alive, qemu_marks

pytestmark = qemu_marks

_TINY = {
    "metadata": {"name": "tiny", "namespace": "ns", "uid": "u-tiny"},
    "spec": {"domain": {"memory": {"guest": "64Mi"}}},
}


@pytest.fixture
def base() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="vs-nr-") as tmp:
        yield Path(tmp)
        cleanup_stale(tmp)  # whatever a failing test left


def _host_mounts() -> str:
    return Path("/proc/self/mountinfo").read_text()


def test_two_nodes_start_separately_and_stop_without_leftovers(base: Path) -> None:
    nodes = [NodeRuntime("node-1", base), NodeRuntime("node-2", base)]
    uris = [n.start() for n in nodes]
    states = [read_state(n.node_dir) for n in nodes]
    assert all(s is not None for s in states)
    namespaces = {s.mount_namespace for s in states if s is not None}
    assert len(namespaces) == 2 and os.readlink("/proc/self/ns/mnt") not in namespaces

    hosts = []
    for uri in uris:
        conn = libvirt.open(uri)
        hosts.append(conn.getCapabilities().split("<uuid>")[1].split("</uuid>")[0])
        conn.close()
    assert hosts == [n.host_uuid for n in nodes] and hosts[0] != hosts[1]
    assert str(base) not in _host_mounts()  # the bind mounts stay in the namespaces

    for node in nodes:
        node.stop()
    for state in states:
        assert state is not None
        assert not pid_alive(state.reaper_pid) and not pid_alive(state.child_pid)
        assert processes_in_namespace(state.mount_namespace) == []
    assert not any((n.socket_dir / "libvirt-sock").exists() for n in nodes)


def test_cleanup_stale_removes_what_a_crashed_run_left(base: Path) -> None:
    node = NodeRuntime("node-1", base)
    conn = libvirt.open(node.start())
    dom = conn.defineXML(build_domain_xml(_TINY, domain_type=DomainType.QEMU))
    dom.create()
    qemu_pid = int((node.qemu_pid_dir / "ns_tiny.pid").read_text())
    conn.close()
    state = read_state(node.node_dir)
    assert state is not None and pid_alive(qemu_pid)

    os.kill(state.reaper_pid, signal.SIGKILL)  # the "crash": libvirtd and QEMU live on
    assert pid_alive(state.child_pid) and pid_alive(qemu_pid)

    assert cleanup_stale(base) == ["node-1"]
    assert not pid_alive(state.child_pid) and not pid_alive(qemu_pid)
    assert processes_in_namespace(state.mount_namespace) == []

    # A new start brings back no domain of the old run.
    fresh = NodeRuntime("node-1", base)
    conn = libvirt.open(fresh.start())
    assert conn.listAllDomains() == []
    conn.close()
    fresh.stop()
