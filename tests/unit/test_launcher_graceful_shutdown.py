"""Graceful shutdown timing, which libvirt's test driver cannot show.

The test driver powers a domain off the instant it gets an ACPI shutdown, so a guest that
ignores ACPI (a booting OS) needs a stand-in: a small in-memory implementation of the
launcher's Hypervisor port. The launcher itself runs for real, on a real socket.
"""

from __future__ import annotations

import asyncio
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from services.launcher import lifecycle
from services.launcher.client import LauncherClient
from services.launcher.domain_state import DomainEvent, DomainState, StateReason
from services.launcher.hypervisor import (
    DomainInfo,
    EventCallback,
    HypervisorError,
    JobProgress,
    MigrationOptions,
)
from services.launcher.process import Launcher, LauncherConfig
from services.launcher.protocol import Shutdown, Start


class AcpiDeafHypervisor:
    """A guest that never reacts to ACPI: only destroy stops it."""

    uri = "fake://acpi-deaf"

    def __init__(self) -> None:
        self._state = DomainState.SHUTOFF
        self._reason = StateReason.UNKNOWN
        self._on_event: EventCallback | None = None
        self.acpi_requests: list[float] = []
        self.destroyed_at: float | None = None

    def open(self, on_event: EventCallback) -> None:
        self._on_event = on_event

    def define(self, xml: str) -> None:
        self._emit(DomainEvent.DEFINED, StateReason.UNKNOWN)

    def start(self, paused: bool = False) -> None:
        self._set(DomainState.RUNNING, StateReason.BOOTED, DomainEvent.STARTED)

    def pause(self) -> None:
        self._set(DomainState.PAUSED, StateReason.USER, DomainEvent.SUSPENDED)

    def resume(self) -> None:
        self._set(DomainState.RUNNING, StateReason.UNPAUSED, DomainEvent.RESUMED)

    def soft_reboot(self) -> None:
        pass

    def stuck(self) -> str | None:
        return None

    def live_xml(self) -> str:
        return "<domain/>"

    def attach_device(self, xml: str) -> None:
        pass

    def detach_device(self, xml: str) -> None:
        pass

    def watch_agent(self, on_agent: object) -> None:
        pass

    def agent_connected(self) -> bool:
        return False

    def guest_addresses(self) -> dict[str, tuple[str, tuple[str, ...]]]:
        return {}

    def shutdown(self) -> None:
        self.acpi_requests.append(asyncio.get_running_loop().time())

    def destroy(self) -> None:
        self.destroyed_at = asyncio.get_running_loop().time()
        self._set(DomainState.SHUTOFF, StateReason.DESTROYED, DomainEvent.STOPPED)

    def state(self) -> tuple[DomainState, StateReason]:
        return self._state, self._reason

    def info(self) -> DomainInfo:
        return DomainInfo(
            state=self._state,
            reason=self._reason,
            max_memory_kib=0,
            memory_kib=0,
            vcpus=1,
            cpu_time_ns=0,
        )

    def pid(self) -> int | None:
        return None

    def attach(self, uuid: str) -> bool:
        return False

    def migrate(self, target_uri: str, options: MigrationOptions) -> None:
        raise HypervisorError("no migration here")

    def job_progress(self) -> JobProgress:
        return JobProgress(active=False)

    def abort_job(self) -> None:
        raise HypervisorError("no job")

    def switch_to_post_copy(self) -> None:
        raise HypervisorError("no job")

    def close(self) -> None:
        pass

    def _set(self, state: DomainState, reason: StateReason, event: DomainEvent) -> None:
        self._state, self._reason = state, reason
        self._emit(event, reason)

    def _emit(self, event: DomainEvent, reason: StateReason) -> None:
        # Like libvirt: events arrive on the loop after the call that caused them returns.
        assert self._on_event is not None
        asyncio.get_running_loop().call_soon(self._on_event, event, reason)


VMI = {
    "metadata": {"name": "deaf", "namespace": "ns", "uid": "u-deaf"},
    "spec": {"domain": {"memory": {"guest": "64Mi"}}, "terminationGracePeriodSeconds": 1},
}


@pytest.fixture
async def running() -> AsyncIterator[tuple[AcpiDeafHypervisor, LauncherClient, asyncio.Task[int]]]:
    with tempfile.TemporaryDirectory(prefix="vs-") as run_dir:
        hv = AcpiDeafHypervisor()
        config = LauncherConfig(vmi=VMI, socket_path=str(Path(run_dir) / "ns_deaf.sock"))
        task = asyncio.get_running_loop().create_task(Launcher(config, hv).run())
        client = await LauncherClient.connect(config.socket_path)
        await client.call(Start())
        await client.wait_for(lambda s: s.state is DomainState.RUNNING)
        yield hv, client, task
        await client.close()
        if not task.done():
            task.cancel()


async def test_acpi_is_resent_then_the_domain_destroyed_when_grace_runs_out(
    running: tuple[AcpiDeafHypervisor, LauncherClient, asyncio.Task[int]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(lifecycle, "ACPI_RESEND_SECONDS", 0.1)
    hv, client, task = running
    started = asyncio.get_running_loop().time()
    result = await client.call(Shutdown(grace_period_seconds=0.5))
    assert result.ok

    final = await client.wait_for(lambda s: s.final, timeout=5)
    assert (final.state, final.reason, final.grace_period_expired) == (
        DomainState.SHUTOFF,
        StateReason.DESTROYED,
        True,
    )
    assert len(hv.acpi_requests) >= 4  # re-sent every 0.1 s over 0.5 s
    gaps = [b - a for a, b in zip(hv.acpi_requests, hv.acpi_requests[1:], strict=False)]
    assert max(gaps) < 0.2
    assert hv.destroyed_at is not None and hv.destroyed_at - started >= 0.45
    assert await asyncio.wait_for(task, 2) == 0


async def test_a_shorter_grace_period_overrides_a_longer_one(
    running: tuple[AcpiDeafHypervisor, LauncherClient, asyncio.Task[int]],
) -> None:
    hv, client, task = running
    await client.call(Shutdown(grace_period_seconds=60))
    await asyncio.sleep(0.05)
    assert hv.destroyed_at is None and len(hv.acpi_requests) == 1
    await client.call(Shutdown(grace_period_seconds=0))
    final = await client.wait_for(lambda s: s.final, timeout=2)
    assert final.reason is StateReason.DESTROYED
    assert final.grace_period_expired  # ACPI was tried and the guest did not comply
    assert await asyncio.wait_for(task, 2) == 0


async def test_zero_grace_destroys_at_once_without_acpi(
    running: tuple[AcpiDeafHypervisor, LauncherClient, asyncio.Task[int]],
) -> None:
    hv, client, task = running
    await client.call(Shutdown(grace_period_seconds=0))
    final = await client.wait_for(lambda s: s.final, timeout=2)
    assert (final.reason, final.grace_period_expired) == (StateReason.DESTROYED, False)
    assert hv.acpi_requests == []
    assert await asyncio.wait_for(task, 2) == 0
