"""The launcher in qemu mode: real libvirtds (one per node), real QEMU guests, real live
migration between the nodes' libvirtds. Skipped without the qemu packages."""

from __future__ import annotations

import os
import signal
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import libvirt
import pytest

from services.launcher import rundir, storage
from services.launcher.client import LauncherClient
from services.launcher.domain_state import DomainState, StateReason
from services.launcher.domain_xml import DomainType
from services.launcher.kvm_probe import domain_type as probe_domain_type
from services.launcher.protocol import (
    AbortMigration,
    DomainStatus,
    MigrateTo,
    MigrationProgress,
    Pause,
    Resume,
    Shutdown,
    Start,
)
from services.launcher.zygote import spawn_launcher
from tests.integration.qemu_support import (
    QemuCluster,
    cirros_vmi,
    pid_alive,
    process_name,
    qemu_cluster,
    qemu_marks,
    qemu_zygote,
    vmi_json,
    wait_until,
)

pytestmark = qemu_marks
__all__ = ["qemu_cluster", "qemu_zygote"]  # fixtures, used by name


def _running(status: DomainStatus) -> bool:
    return status.state is DomainState.RUNNING


def _record(seen: list[DomainStatus], status: DomainStatus) -> bool:
    seen.append(status)
    return True


class Launchers:
    """Spawns launchers through the zygote as the handler does; kills leftovers after."""

    def __init__(self, cluster: QemuCluster, zygote: str) -> None:
        self.cluster = cluster
        self.zygote = zygote
        self.pids: list[int] = []
        self.domain_type = probe_domain_type(cluster.nodes["node-1"].uri).domain_type

    async def spawn(
        self, node: str, vmi: dict[str, Any], *, migration_target: bool = False
    ) -> LauncherClient:
        runtime = self.cluster.nodes[node]
        sock = self.cluster.socket_for(node, vmi)
        pid = spawn_launcher(
            self.zygote,
            vmi_json(vmi),
            sock,
            hypervisor_uri=runtime.uri,
            domain_type=self.domain_type,
            disk_dir=self.cluster.disk_dir,
            qemu_pid_dir=str(runtime.qemu_pid_dir),
            migration_target=migration_target,
        )
        self.pids.append(pid)
        return await LauncherClient.connect(sock)


@pytest.fixture
async def launchers(qemu_cluster: QemuCluster, qemu_zygote: str) -> AsyncIterator[Launchers]:
    spawned = Launchers(qemu_cluster, qemu_zygote)
    yield spawned
    for pid in spawned.pids:
        if rundir.pid_alive(pid):
            os.kill(pid, signal.SIGKILL)


def _libvirt_state(uri: str, name: str) -> int | None:
    conn = libvirt.open(uri)
    try:
        return int(conn.lookupByName(name).state()[0])
    except libvirt.libvirtError:
        return None
    finally:
        conn.close()


async def _start_running(client: LauncherClient) -> DomainStatus:
    assert (await client.call(Start(), timeout=30)).ok
    return await client.wait_for(_running, timeout=30)


async def _stop(client: LauncherClient) -> None:
    await client.call(Shutdown(grace_period_seconds=0))
    await client.wait_for(lambda s: s.final, timeout=30)
    await client.close()


async def test_cirros_template_runs_pauses_and_stops_with_a_real_qemu(
    launchers: Launchers, qemu_cluster: QemuCluster
) -> None:
    vmi = cirros_vmi("cirros-life")
    vmi["spec"]["terminationGracePeriodSeconds"] = 1
    node = qemu_cluster.nodes["node-1"]
    client = await launchers.spawn("node-1", vmi)
    assert client.hello.domain_type in (DomainType.QEMU, DomainType.KVM)
    first = await client.next_status(timeout=30)
    assert first.state is DomainState.SHUTOFF, first.message

    running = await _start_running(client)
    pid = running.domain_pid
    assert pid_alive(pid) and pid is not None
    assert process_name(pid).startswith("qemu"), process_name(pid)
    # The catalogue's guest under a per-VMI overlay; the cloud-init seed is an ISO when a
    # tool for it is installed.
    disks = Path(qemu_cluster.disk_dir) / "default_cirros-life"
    assert (disks / "containerdisk.qcow2").is_file()
    assert (disks / "cloudinitdisk.iso").is_file() == (storage.iso_tool() is not None)

    assert (await client.call(Pause())).ok
    paused = await client.wait_for(lambda s: s.state is DomainState.PAUSED)
    assert paused.reason is StateReason.USER
    assert _libvirt_state(node.uri, "default_cirros-life") == libvirt.VIR_DOMAIN_PAUSED
    assert (await client.call(Resume())).ok
    await client.wait_for(_running)
    assert _libvirt_state(node.uri, "default_cirros-life") == libvirt.VIR_DOMAIN_RUNNING

    # A guest that has not started its acpid within the second (it was just started) is
    # destroyed as the grace period runs out; one that has powers off on the button.
    assert (await client.call(Shutdown(grace_period_seconds=1))).ok
    final = await client.wait_for(lambda s: s.final, timeout=30)
    assert (final.state, final.reason, final.grace_period_expired) in (
        (DomainState.SHUTOFF, StateReason.DESTROYED, True),
        (DomainState.SHUTOFF, StateReason.SHUTDOWN, False),
    )
    await wait_until(lambda: not pid_alive(pid), 10, "qemu to exit")
    await wait_until(lambda: not disks.exists(), 10, "the launcher to remove its disks")
    assert _libvirt_state(node.uri, "default_cirros-life") is None  # undefined
    await client.close()


async def test_live_migration_moves_the_qemu_process_to_the_target_node(
    launchers: Launchers, qemu_cluster: QemuCluster
) -> None:
    vmi = cirros_vmi("cirros-mig")
    source = await launchers.spawn("node-1", vmi)
    source_pid = (await _start_running(source)).domain_pid
    assert pid_alive(source_pid)
    target = await launchers.spawn("node-2", vmi, migration_target=True)
    assert target.hello.migration_target and target.hello.domain_pid is None

    accepted = await source.call(
        MigrateTo(migration_uid="m1", target_uri=qemu_cluster.nodes["node-2"].uri)
    )
    assert accepted.ok, accepted.error
    result = await source.migration_result(timeout=60)
    assert result.ok and result.migration_uid == "m1", result.error

    # The source's domain ends as migrated (never shut down), its QEMU is gone.
    seen: list[DomainStatus] = []
    final = await source.wait_for(lambda s: _record(seen, s) and s.final, timeout=30)
    assert (final.state, final.reason) == (DomainState.SHUTOFF, StateReason.MIGRATED)
    assert all(s.state is not DomainState.SHUTOFF for s in seen[:-1]), seen
    await wait_until(lambda: not pid_alive(source_pid), 10, "the source qemu to exit")

    # The target runs the guest in a new QEMU, resumed by the migration, never booted.
    arriving: list[DomainStatus] = []
    arrived = await target.wait_for(
        lambda s: _record(arriving, s) and _running(s) and s.domain_pid is not None, timeout=30
    )
    assert arrived.reason is StateReason.MIGRATED
    assert all(s.state is not DomainState.SHUTOFF for s in arriving), arriving
    assert arrived.domain_pid != source_pid and pid_alive(arrived.domain_pid)
    node2 = qemu_cluster.nodes["node-2"].uri
    assert _libvirt_state(node2, "default_cirros-mig") == libvirt.VIR_DOMAIN_RUNNING
    assert _libvirt_state(qemu_cluster.nodes["node-1"].uri, "default_cirros-mig") is None
    # The disks belong to the target's launcher now.
    assert (Path(qemu_cluster.disk_dir) / "default_cirros-mig").is_dir()
    await source.close()
    await _stop(target)


async def test_aborting_a_throttled_migration_keeps_the_guest_running_on_the_source(
    launchers: Launchers, qemu_cluster: QemuCluster
) -> None:
    vmi = cirros_vmi("cirros-abort")
    # An idle firmware guest is mostly zero pages, which QEMU sends as ~9-byte records: at
    # 1 MiB/s, 128 MiB migrate in ~2 s; 2 GiB (never touched, so no host memory) take
    # several times longer, leaving the abort a wide margin on a slow machine.
    vmi["spec"]["domain"]["memory"]["guest"] = "2Gi"
    source = await launchers.spawn("node-1", vmi)
    source_pid = (await _start_running(source)).domain_pid
    target = await launchers.spawn("node-2", vmi, migration_target=True)

    accepted = await source.call(
        MigrateTo(
            migration_uid="m2",
            target_uri=qemu_cluster.nodes["node-2"].uri,
            bandwidth_bytes_per_second=1024 * 1024,  # 1 MiB/s: the migration takes a while
        )
    )
    assert accepted.ok, accepted.error
    progress = await source.next_migration_report(timeout=30)
    assert isinstance(progress, MigrationProgress), progress
    assert (await source.call(AbortMigration())).ok
    result = await source.migration_result(timeout=30)
    assert (result.ok, result.aborted) == (False, True), result

    status = (await source.call(Start())).status  # a no-op on a running domain
    assert status is not None and status.state is DomainState.RUNNING
    assert status.domain_pid == source_pid and pid_alive(source_pid)
    node1 = qemu_cluster.nodes["node-1"].uri
    assert _libvirt_state(node1, "default_cirros-abort") == libvirt.VIR_DOMAIN_RUNNING
    # The target's incoming domain is gone, and with it the target's launcher.
    target_final = await target.wait_for(lambda s: s.final, timeout=30)
    assert target_final.state is DomainState.SHUTOFF, target_final
    assert _libvirt_state(qemu_cluster.nodes["node-2"].uri, "default_cirros-abort") is None
    assert (Path(qemu_cluster.disk_dir) / "default_cirros-abort").is_dir()  # source's, kept
    await target.close()
    await _stop(source)
