"""The VMI stream subresources' pure part (`services/api/streams.target`): KubeVirt's
answers for a VMI that has no console to give, and the node console server's URL."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from core.errors import ApiError, bad_request, unavailable
from events.catalog import (
    DomainStarted,
    DomainStopped,
    LauncherStarted,
    NodeJoined,
    PodScheduled,
    Resources,
    StopReason,
    VMICreated,
)
from events.envelope import Stored
from events.meta import Kind
from projections.cluster import Cluster
from services.api import streams
from services.api.streams import target
from tests.factories import meta, vmi_manifest


class Given:
    def __init__(self) -> None:
        self.cluster = Cluster()
        self.seq = 0

    def __call__(self, *events: Any) -> Given:
        for ev in events:
            self.seq += 1
            self.cluster.apply(Stored(seq=self.seq, subject="s", time=1.0, event=ev))
        return self


def scheduled(console_port: int = 0, **spec: Any) -> Given:
    manifest = vmi_manifest("vm1")
    manifest["spec"]["domain"]["devices"].update(spec)
    return Given()(
        NodeJoined(
            meta=meta(Kind.NODE, "node-1", "_"), node="node-1", address="127.0.0.1",
            capacity=Resources(cpu_millis=4000, memory_bytes=8 << 30),
            hypervisor="qemu" if console_port else "test", console_port=console_port,
        ),
        VMICreated(meta=meta(Kind.VMI), manifest=manifest),
        PodScheduled(meta=meta(Kind.VMI, node="node-1"), node="node-1", pod_name="p",
                     pod_uid="pod-1", manifest=manifest),
        LauncherStarted(meta=meta(Kind.VMI, node="node-1"), node="node-1", pod_uid="pod-1", pid=1),
    )  # fmt: skip


def running(console_port: int = 0, **spec: Any) -> Given:
    return scheduled(console_port, **spec)(
        DomainStarted(meta=meta(Kind.VMI, node="node-1"), node="node-1", domain="default_vm1")
    )


def refusal(g: Given, channel: Any = "console", name: str = "vm1") -> tuple[int, str]:
    with pytest.raises(ApiError) as e:
        target(g.cluster, "default", name, channel)
    return e.value.code, e.value.status.message


def test_a_missing_vmi_is_not_found() -> None:
    assert refusal(Given(), name="nope") == (
        404, 'virtualmachineinstances.kubevirt.io "nope" not found'
    )  # fmt: skip


def test_a_vmi_that_is_not_running_yet_is_a_bad_request() -> None:
    assert refusal(scheduled(4000)) == (400, "VMI is not running")


def test_a_failed_vmi_is_a_conflict() -> None:
    g = running(4000)(DomainStopped(meta=meta(Kind.VMI), reason=StopReason.CRASHED))
    assert refusal(g) == (
        409, 'Operation cannot be fulfilled on virtualmachineinstances.kubevirt.io "vm1": '
        "VMI is in failed status",
    )  # fmt: skip


def test_devices_turned_off_in_the_spec_are_not_present() -> None:
    g = running(4000, autoattachSerialConsole=False, autoattachGraphicsDevice=False)
    assert refusal(g, "console") == (400, "No serial consoles are present.")
    assert refusal(g, "vnc") == (400, "No graphics devices are present.")
    assert refusal(g, "screenshot") == (400, "No graphics devices are present.")


def test_test_mode_guests_have_no_console_as_kubevirt_says_for_a_vmi_without_one() -> None:
    assert refusal(running(0)) == (400, "No serial consoles are present.")
    assert refusal(running(0), "vnc") == (400, "No graphics devices are present.")


def test_a_running_guest_is_reached_at_its_nodes_console_server() -> None:
    g = running(4000)
    assert target(g.cluster, "default", "vm1", "console").url == (
        "ws://127.0.0.1:4000/v1/namespaces/default/virtualmachineinstances/vm1/console"
    )
    assert target(g.cluster, "default", "vm1", "screenshot").url.startswith(
        "http://127.0.0.1:4000/"
    )


def test_a_console_waits_out_a_handover_and_ends_when_the_vmi_stops() -> None:
    answers = [unavailable("the domain is not running on this node")] * 3
    answers.append(bad_request("VMI is not running"))

    def resolve() -> streams.Target:
        raise answers.pop(0)

    assert asyncio.run(streams.follow_guest(resolve, seconds=30)) == (1000, "VMI is not running")
    assert answers == []


def test_a_console_whose_guest_does_not_come_back_closes_with_the_reason() -> None:
    def resolve() -> streams.Target:
        raise unavailable("the domain default_vm is not running on this node")

    ended = asyncio.run(streams.follow_guest(resolve, seconds=0))
    assert isinstance(ended, tuple)
    code, reason = ended
    assert code == 1011
    assert reason == (
        "the guest's console did not come back within 0s: "
        "the domain default_vm is not running on this node"
    )


def _relayed(headers: list[tuple[bytes, bytes]]) -> list[dict[str, Any]]:
    """What the api sends a client whose console it refuses (the test driver's guest)."""
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "websocket.connect"}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    scope = {"type": "websocket", "headers": headers, "subprotocols": ["plain.kubevirt.io"]}
    g = running(0)
    resolve = lambda: target(g.cluster, "default", "vm1", "console")  # noqa: E731
    asyncio.run(streams.relay(scope, receive, send, resolve))
    return sent


def test_a_refusal_is_kubevirts_http_answer_and_a_browsers_close() -> None:
    """virtctl, kubectl and the CLI send no Origin: KubeVirt's 400 before the upgrade. A
    browser, which cannot read that answer, gets it in the close: 4000 + the status."""
    plain = _relayed([])
    assert [m["type"] for m in plain] == [
        "websocket.http.response.start",
        "websocket.http.response.body",
    ]
    assert plain[0]["status"] == 400 and b"No serial consoles are present." in plain[1]["body"]
    browser = _relayed([(b"origin", b"https://127.0.0.1:8443")])
    assert browser == [
        {"type": "websocket.accept", "subprotocol": "plain.kubevirt.io"},
        {"type": "websocket.close", "code": 4400, "reason": "No serial consoles are present."},
    ]
