"""virt-controller against what an older api (or a forger on the bus) could have stored: a
VM in namespace `>`, and poison inside a VM's own subject. The controller must keep
serving every other VM, and the poisoned VM must stay operable."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest

from events import subjects
from events.catalog import (
    VMCreated,
    VMICreated,
    VMIDeleteRequested,
    VMRunStrategyChanged,
    VMStopRequested,
)
from events.meta import Aggregate, Kind
from eventstore.jetstream import JetStreamStore
from eventstore.port import ConcurrencyConflict
from tests.conftest import unique
from tests.factories import meta, vm_manifest
from tests.integration import test_controller_service
from tests.integration.test_controller_service import Cluster, eventually

controller = test_controller_service.controller  # the fixture, shared


async def test_a_hostile_namespace_and_poison_do_not_stop_the_controller(
    store: JetStreamStore,
    controller: Callable[[], asyncio.Task[None]],
) -> None:
    c = Cluster(store)
    task = controller()
    await c.node_joined("node-a")

    # a VM in namespace ">" (a wildcard on the bus, were it not encoded)
    odd = unique("vm")
    manifest = vm_manifest(odd)
    manifest["metadata"]["namespace"] = ">"
    await c.append(VMCreated(meta=meta(Kind.VM, odd, namespace=">"), manifest=manifest))

    # a VM whose own subject then holds two events no fold can read
    name = unique("vm")
    vm = lambda: meta(Kind.VM, name)  # noqa: E731
    await c.append(VMCreated(meta=vm(), manifest=vm_manifest(name, memory="64Mi")))
    (created,) = await c.wait_for(name, VMICreated)
    subject = f"{subjects.PREFIX}.{Kind.VM}.default.{name}.VMStartRequested._"
    js = store.js
    await js.publish(subject, b"\x00garbage", stream=store.stream)
    await js.publish(subject, b'{"type": "VMStopRequested", "meta": []}', stream=store.stream)

    # the odd VM got its VMI, in its own (encoded) subject
    async def odd_vmi() -> bool:
        agg = Aggregate(kind=Kind.VMI, namespace=">", name=odd)
        return any(isinstance(s.event, VMICreated) for s in await store.load(agg))

    await eventually(odd_vmi)

    # and the poisoned VM can still be stopped: the controller's optimistic appends on it
    # stand past the poison
    uid = created.manifest["metadata"]["uid"]
    await c.append(VMRunStrategyChanged(meta=vm(), run_strategy="Halted"))
    await c.append(VMStopRequested(meta=vm(), vmi_uid=uid))
    await c.wait_for(name, VMIDeleteRequested)

    # a plain VM created after all of it is served too, by the same controller incarnation
    late = unique("vm")
    await c.append(VMCreated(meta=meta(Kind.VM, late), manifest=vm_manifest(late)))
    await c.wait_for(late, VMICreated)
    assert not task.done()


async def test_an_optimistic_append_stands_on_poison_but_not_on_a_real_event(
    store: JetStreamStore,
) -> None:
    name = unique("vm")
    first = await store.append(
        VMCreated(meta=meta(Kind.VM, name), manifest=vm_manifest(name)), expected=0
    )
    subject = f"{subjects.PREFIX}.{Kind.VM}.default.{name}.VMStopRequested._"
    await store.js.publish(subject, b"\xffpoison", stream=store.stream)
    # decided on the VM as of `first`: only poison came after, so the append stands
    landed = await store.append(
        VMRunStrategyChanged(meta=meta(Kind.VM, name), run_strategy="Halted"), expected=first.seq
    )
    assert landed.seq == first.seq + 2 and not landed.duplicate
    # a readable event after the expected sequence is a real conflict
    with pytest.raises(ConcurrencyConflict):
        await store.append(
            VMRunStrategyChanged(meta=meta(Kind.VM, name), run_strategy="Always"),
            expected=first.seq,
        )
