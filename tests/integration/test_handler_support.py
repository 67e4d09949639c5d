"""Shared helpers for the handler tests (no tests here): VMI manifests, intents as the
controller and api append them, waiting on the event store, cleaning up launchers."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import tempfile
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from events.catalog import Event, PodScheduled
from events.codec import event_type
from events.envelope import Stored
from events.meta import Actor, Aggregate, Kind, Meta
from eventstore.jetstream import JetStreamStore
from services.launcher import rundir


def vmi_manifest(name: str, *, grace: int = 30, paused: bool = False) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "domain": {
            "memory": {"guest": "64Mi"},
            "devices": {"disks": [{"name": "root", "disk": {"bus": "virtio"}}]},
        },
        "terminationGracePeriodSeconds": grace,
        "volumes": [{"name": "root", "containerDisk": {"image": "demo"}}],
    }
    if paused:
        spec["startStrategy"] = "Paused"
    return {
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachineInstance",
        "metadata": {"name": name, "namespace": "default", "uid": str(uuid.uuid4())},
        "spec": spec,
    }


def vmi_meta(manifest: dict[str, Any], node: str, service: str = "test") -> Meta:
    md = manifest["metadata"]
    return Meta(
        event_id=uuid.uuid4().hex,
        aggregate=Aggregate(Kind.VMI, md["namespace"], md["name"], md["uid"]),
        occurred_at=0.0,
        correlation_id="corr-" + md["name"],
        actor=Actor(service=service),
        node=node,
    )


def pod_scheduled(manifest: dict[str, Any], node: str) -> PodScheduled:
    name = manifest["metadata"]["name"]
    return PodScheduled(
        meta=vmi_meta(manifest, node, "virt-controller"),
        node=node,
        pod_name=f"virt-launcher-{name}-abcde",
        pod_uid=str(uuid.uuid4()),
        manifest=manifest,
    )


def types(events: list[Stored]) -> list[str]:
    return [event_type(s.event) for s in events]


async def wait_events(
    store: JetStreamStore,
    manifest: dict[str, Any],
    until: Callable[[list[str]], bool],
    timeout: float = 10.0,
) -> list[Stored]:
    md = manifest["metadata"]
    agg = Aggregate(Kind.VMI, md["namespace"], md["name"])
    async with asyncio.timeout(timeout):
        while True:
            events = await store.load(agg)
            if until(types(events)):
                return events
            await asyncio.sleep(0.05)


def of_type(events: list[Stored], cls: type[Event]) -> list[Any]:
    return [s.event for s in events if isinstance(s.event, cls)]


async def wait_dead(pid: int, timeout: float = 10.0) -> None:
    async with asyncio.timeout(timeout):
        while rundir.pid_alive(pid):  # noqa: ASYNC110 (another session's process)
            await asyncio.sleep(0.02)


@contextlib.contextmanager
def short_run_dir() -> Iterator[Path]:
    """A short path (unix sockets are limited to 107 bytes); kills leftover launchers."""
    with tempfile.TemporaryDirectory(prefix="vs-h-") as d:
        try:
            yield Path(d)
        finally:
            for pidfile in Path(d).glob("*/launchers/*.pid"):
                pid = rundir.read_pid(pidfile)
                if pid and rundir.pid_alive(pid):
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGKILL)
