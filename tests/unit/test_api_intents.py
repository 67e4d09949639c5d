"""The api's pure intents and the read side's selectors, on plain data."""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from core import intents
from core.context import RequestContext
from core.errors import ApiError
from events.catalog import (
    DomainStarted,
    Event,
    LauncherStarted,
    PodScheduled,
    VMCreated,
    VMICreated,
    VMRunStrategyChanged,
    VMStartRequested,
    VMStopRequested,
)
from events.envelope import Stored
from events.meta import Kind
from kinds import vm
from projections.cluster import Cluster
from readside.watch import Selector, SelectorError, parse_label_selector
from tests.factories import meta, vm_manifest, with_namespaces

_ids = itertools.count(1)


def ctx() -> RequestContext:
    return RequestContext(
        now=1000.0,
        correlation_id="req-1",
        new_id=lambda: f"{next(_ids):032x}",
        suffix=lambda: "abcde",
    )


def fold(cluster: Cluster, *events: Event) -> None:
    for ev in events:
        cluster.apply(Stored(seq=cluster.last_seq + 1, subject="", time=0.0, event=ev))


def with_vm(strategy: str, running: bool = False) -> Cluster:
    c = with_namespaces()
    fold(
        c,
        VMCreated(meta=meta(Kind.VM, "vm1"), manifest=vm_manifest("vm1", strategy, memory="64Mi")),
    )
    if running:
        m = {"metadata": {"name": "vm1", "namespace": "default", "uid": "vmi-uid"}, "spec": {}}
        vmi = lambda: meta(Kind.VMI, "vm1", node="n1")  # noqa: E731
        fold(
            c,
            VMICreated(meta=vmi(), manifest=m, owner_vm_uid="uid-vm1"),
            PodScheduled(meta=vmi(), node="n1", pod_name="p", pod_uid="pu", manifest=m),
            LauncherStarted(meta=vmi(), node="n1", pod_uid="pu", pid=1),
            DomainStarted(meta=vmi(), node="n1", domain="default_vm1"),
        )
    return c


def conflict_message(fn: Any, *args: Any) -> str:
    with pytest.raises(ApiError) as exc:
        fn(*args)
    assert exc.value.code == 409
    return exc.value.status.message.split('": ', 1)[1]


def test_create_defaults_and_meta() -> None:
    out = intents.create(
        with_namespaces(), vm.SPEC, "default", vm_manifest("a", "Always", memory="64Mi"), ctx()
    )
    (append,) = out.appends
    assert append.expected == 0 and out.code == 201
    ev = append.event
    assert isinstance(ev, VMCreated)
    assert ev.meta.correlation_id == "req-1" and ev.meta.actor.service == "virt-api"
    assert ev.manifest["spec"]["template"]["spec"]["domain"]["machine"] == {"type": "q35"}
    assert ev.manifest["metadata"]["uid"] == ev.meta.aggregate.uid


def test_start_rules() -> None:
    assert conflict_message(vm.start, with_vm("Always"), "default", "vm1", False, ctx()) == (
        "Always does not support manual start requests"
    )
    assert conflict_message(vm.start, with_vm("Manual", True), "default", "vm1", False, ctx()) == (
        "VM is already running"
    )
    halted = vm.start(with_vm("Halted"), "default", "vm1", True, ctx())
    assert [type(a.event) for a in halted.appends] == [VMRunStrategyChanged, VMStartRequested]
    manual = with_vm("Manual")
    out = vm.start(manual, "default", "vm1", False, ctx())
    assert out.appends[0].expected == manual.vms["default/vm1"].version
    fold(manual, out.appends[0].event)
    assert conflict_message(vm.start, manual, "default", "vm1", False, ctx()) == (
        "unable to complete request: stop/start already underway"
    )


def test_stop_rules() -> None:
    assert conflict_message(vm.stop, with_vm("Manual"), "default", "vm1", None, ctx()) == (
        "VM is not running"
    )
    out = vm.stop(with_vm("Always", True), "default", "vm1", 3, ctx())
    stop, halted = (a.event for a in out.appends)
    assert isinstance(stop, VMStopRequested) and stop.vmi_uid == "vmi-uid"
    assert stop.grace_period_seconds == 3
    assert isinstance(halted, VMRunStrategyChanged) and halted.run_strategy == "Halted"


def test_migrate_names_the_migration() -> None:
    out = vm.migrate(with_vm("Manual", True), "default", "vm1", {"zone": "a"}, ctx())
    manifest = out.appends[0].event.manifest  # type: ignore[attr-defined]
    assert manifest["metadata"]["name"] == "kubevirt-migrate-vm-abcde"
    assert manifest["spec"] == {"vmiName": "vm1", "addedNodeSelector": {"zone": "a"}}


def test_selectors() -> None:
    reqs = parse_label_selector("app=web,tier!=db,env in (a, b),!legacy,team")
    sel = Selector(Kind.VM, "", reqs)
    obj = {"metadata": {"labels": {"app": "web", "env": "b", "team": "x"}}}
    assert sel.matches(Kind.VM, obj)
    assert not sel.matches(Kind.VMI, obj)
    assert not sel.matches(
        Kind.VM, {"metadata": {"labels": {"app": "web", "env": "c", "team": "x"}}}
    )
    by_node = Selector.parse(Kind.VMI, field_selector="status.nodeName=n1,metadata.name!=x")
    assert by_node.matches(Kind.VMI, {"metadata": {"name": "a"}, "status": {"nodeName": "n1"}})
    assert not by_node.matches(Kind.VMI, {"metadata": {"name": "x"}, "status": {"nodeName": "n1"}})
    with pytest.raises(SelectorError):
        Selector.parse(Kind.VM, field_selector="spec.foo=1")
