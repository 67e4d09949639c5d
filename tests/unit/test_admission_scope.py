"""Which object each KubeVirt admission rule binds, rule by rule, each test naming the
KubeVirt file it follows: the memory rule binds VMIs only (a VM's template, a replica
set's, a pool's may ask for none); a VM that asks for none is accepted and gets no VMI
when started, as KubeVirt's VMI webhook refuses its create, and says so."""

from __future__ import annotations

from typing import Any

import msgspec

from core.admission import validate_vm, validate_vmi
from events.catalog import VMCreated, VMICreateFailed, VMUpdated
from events.meta import Kind
from events.objects import (
    VirtualMachine,
    VirtualMachineInstance,
    VirtualMachineInstanceReplicaSet,
)
from kinds import replicas
from kinds import vm as vm_kind
from projections import kube_events
from projections.cluster import Cluster
from projections.render import render_vm
from services.controller.run_strategy import asks_memory
from tests.factories import vm_manifest
from tests.unit.test_controller_world import World, types

NO_MEMORY = (
    "no memory requested, at least one of '{f}.domain.memory.guest', "
    "'{f}.domain.memory.hugepages.pageSize' or '{f}.domain.resources.requests.memory' must be set"
)


def _messages(causes: list[Any]) -> list[str]:
    return [c.message for c in causes]


def test_no_memory_binds_vmis_only() -> None:
    """pkg/virt-api/webhooks/validating-webhook/admitters/vmi-create-admitter.go:
    ValidateVirtualMachineInstanceMandatoryFields ("only meant to be used for VMI reviews,
    not if they are templates on other objects"), called by VMICreateAdmitter.Admit only."""
    vmi = msgspec.convert(
        {"metadata": {"name": "v"}, "spec": {"domain": {"devices": {}}}}, VirtualMachineInstance
    )
    assert _messages(validate_vmi(vmi)) == [NO_MEMORY.format(f="spec")]
    hugepages = msgspec.convert(
        {
            "metadata": {"name": "v"},
            "spec": {"domain": {"devices": {}, "memory": {"hugepages": {"pageSize": "2Mi"}}}},
        },
        VirtualMachineInstance,
    )
    assert NO_MEMORY.format(f="spec") not in _messages(validate_vmi(hugepages))


def test_a_stopped_vm_asking_no_memory_is_accepted() -> None:
    """pkg/virt-api/webhooks/validating-webhook/admitters/vms-admitter.go:
    ValidateVirtualMachineSpec validates the template with ValidateVirtualMachineInstanceSpec,
    not the mandatory fields."""
    vm = msgspec.convert(
        {
            "metadata": {"name": "v"},
            "spec": {"runStrategy": "Halted", "template": {"spec": {"domain": {"devices": {}}}}},
        },
        VirtualMachine,
    )
    assert validate_vm(vm) == []
    _, causes = vm_kind.admit(Cluster(), vm, "uid")
    assert causes == []


def test_a_replica_sets_template_asking_no_memory_is_accepted() -> None:
    """pkg/virt-api/webhooks/validating-webhook/admitters/vmirs-admitter.go: the template
    through ValidateVirtualMachineInstanceSpec only: neither the memory rule nor the
    volume-has-a-disk rule (vmi-create-admitter.go's, for VMIs alone)."""
    rs = msgspec.convert(
        {
            "metadata": {"name": "rs"},
            "spec": {
                "selector": {"matchLabels": {"a": "b"}},
                "template": {
                    "metadata": {"labels": {"a": "b"}},
                    "spec": {"domain": {"devices": {}}},
                },
            },
        },
        VirtualMachineInstanceReplicaSet,
    )
    _, causes = replicas.admit_replicaset(Cluster(), rs, "uid")
    assert causes == []


def test_its_vmi_is_not_made_when_started_and_the_vm_says_why() -> None:
    """pkg/virt-controller/watch/vm/vm.go: the VMI create goes through the VMI webhook,
    which refuses it: no VMI; the controller records a Warning FailedCreate Event ("Error
    creating virtual machine instance: <the refusal>") and a Failure condition, once per
    generation of the VM; a template fixed by an update gets its VMI."""
    assert not asks_memory({"domain": {"devices": {}}})
    assert not asks_memory({"domain": {"resources": {"requests": {"memory": "0"}}}})
    assert asks_memory({"domain": {"resources": {"requests": {"memory": "64Mi"}}}})
    assert asks_memory({"domain": {"memory": {"guest": "1Gi"}}})
    w = World()
    w.given(w.node_joined("node-1"))
    m = vm_manifest("vm1", "Always")
    m["spec"]["template"]["spec"]["domain"] = {"devices": {}}
    created = VMCreated(meta=w.m(Kind.VM, "vm1"), manifest=m)
    decided = w.run(created)
    assert types(decided) == ["VMICreateFailed"]
    refusal = (
        'admission webhook "virtualmachineinstances-create-validator.kubevirt.io" denied the '
        f"request: {NO_MEMORY.format(f='spec')}"
    )
    assert isinstance(decided[0], VMICreateFailed) and decided[0].message == refusal
    assert w.react(w.log[-1]) == []  # its own event decides nothing more
    condition = render_vm(w.state.cluster, w.vm(), w.now)["status"]["conditions"][-1]
    assert (condition["type"], condition["reason"]) == ("Failure", "FailedCreate")
    assert condition["message"] == refusal
    found = kube_events.occurrences(w.log[-1], w.state.cluster)
    assert [(n.type, n.reason, n.message) for n in found] == [
        ("Warning", "FailedCreate", f"Error creating virtual machine instance: {refusal}")
    ]
    fixed = vm_manifest("vm1", "Always")
    assert "VMICreated" in types(w.run(VMUpdated(meta=w.m(Kind.VM, "vm1"), manifest=fixed)))
    conditions = render_vm(w.state.cluster, w.vm(), w.now)["status"]["conditions"]
    assert "FailedCreate" not in [c.get("reason") for c in conditions]
