"""A task cancelled once ends, even when the cancel lands as what it awaits completes.

On Python 3.11 `asyncio.wait_for` loses such a cancel: the task carries on as if never
cancelled, and a stop that cancelled it once and waited hangs. Product code waits with
`asyncio.timeout` instead (ruff bans wait_for outside tests and benchmarks); these cases
race a cancel against a report arriving on a handler's launcher connection."""

from __future__ import annotations

import asyncio
import contextlib
import socket

from services.launcher.client import LauncherClient
from services.launcher.domain_state import DomainState
from services.launcher.protocol import DomainStatus, encode


async def _follow(client: LauncherClient) -> None:
    """A handler's relay: follow the launcher's reports until cancelled."""
    while True:
        with contextlib.suppress(TimeoutError):
            await client.next_status(timeout=5.0)


async def _connected() -> tuple[LauncherClient, socket.socket]:
    ours, theirs = socket.socketpair()
    client = LauncherClient()
    await asyncio.get_running_loop().create_unix_connection(lambda: client, sock=ours)
    return client, theirs


async def test_a_cancel_racing_a_report_still_ends_the_follower() -> None:
    for seq in range(20):
        client, peer = await _connected()
        task = asyncio.create_task(_follow(client))
        await asyncio.sleep(0.001)  # waiting for a report
        # as the loop does when the line arrives
        client.data_received(encode(DomainStatus(state=DomainState.RUNNING, seq=seq)))
        await asyncio.sleep(0)  # the waiter is woken, not yet run: the cancel races it
        task.cancel()
        done, _ = await asyncio.wait({task}, timeout=1.0)
        assert task in done, "one cancel did not end the task"
        assert task.cancelled()
        await client.close()
        peer.close()


async def test_a_wait_for_a_report_still_times_out() -> None:
    client, peer = await _connected()
    try:
        await client.next_status(timeout=0.01)
    except TimeoutError:
        return
    finally:
        await client.close()
        peer.close()
    raise AssertionError("next_status returned without a report")
