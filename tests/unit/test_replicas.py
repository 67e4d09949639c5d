"""The replica set and pool controllers on plain data: scale up and down, KubeVirt's
scale-down order, pool naming, pause, and idempotent decisions after a restart."""

from __future__ import annotations

from typing import Any

from events.catalog import (
    ResourceCreated,
    ResourceUpdated,
    VMCreated,
    VMDeleted,
    VMICreated,
    VMIDeleteRequested,
)
from events.meta import ResourceKind
from projections import replicas as rp
from tests.factories import meta
from tests.unit.test_controller_world import World

TEMPLATE_SPEC = {"domain": {"devices": {}, "resources": {"requests": {"memory": "64Mi"}}}}


def rs_manifest(replicas: int, paused: bool = False) -> dict[str, Any]:
    return {
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachineInstanceReplicaSet",
        "metadata": {"name": "web", "namespace": "default", "uid": "rs-uid"},
        "spec": {
            "replicas": replicas,
            "paused": paused,
            "selector": {"matchLabels": {"app": "web"}},
            "template": {"metadata": {"labels": {"app": "web"}}, "spec": TEMPLATE_SPEC},
        },
    }


def pool_manifest(replicas: int, policy: str | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "replicas": replicas,
        "selector": {"matchLabels": {"app": "p"}},
        "virtualMachineTemplate": {
            "metadata": {"labels": {"app": "p"}},
            "spec": {"runStrategy": "Always", "template": {"spec": TEMPLATE_SPEC}},
        },
    }
    if policy:
        spec["scaleInStrategy"] = {"proactive": {"selectionPolicy": {"sortPolicy": policy}}}
    return {
        "apiVersion": "pool.kubevirt.io/v1alpha1",
        "kind": "VirtualMachinePool",
        "metadata": {"name": "pool", "namespace": "default", "uid": "pool-uid"},
        "spec": spec,
    }


def world() -> World:
    w = World()
    w.given(w.node_joined("node-1"), w.node_joined("node-2"))
    return w


def rs_vmis(w: World) -> list[str]:
    c = w.state.cluster
    rs = c.resources[ResourceKind.VMIRS]["default/web"]
    return sorted(v.name for v in rp.owned_vmis(c, rs) if rp.vmi_active(v))


def test_a_replica_set_creates_its_replicas_with_owner_and_labels() -> None:
    w = world()
    appended = w.run(
        ResourceCreated(meta=meta(ResourceKind.VMIRS, "web"), manifest=rs_manifest(10))
    )
    created = [e for e in appended if isinstance(e, VMICreated)]
    assert len(created) == 10 and len(rs_vmis(w)) == 10
    m = created[0].manifest["metadata"]
    assert m["name"].startswith("web") and m["labels"] == {"app": "web"}
    assert m["ownerReferences"][0]["uid"] == "rs-uid"
    status = w.state.cluster.resources[ResourceKind.VMIRS]["default/web"].status
    assert status["replicas"] == 10 and status["labelSelector"] == "app=web"


def test_scaled_down_a_replica_set_leaves_exactly_the_replicas_and_deletes_pending_first() -> None:
    w = world()
    w.run(ResourceCreated(meta=meta(ResourceKind.VMIRS, "web"), manifest=rs_manifest(4)))
    names = rs_vmis(w)
    for name in names[:2]:  # two of them run, two are still scheduled
        w.run(w.launcher_started(name))
        w.run(w.domain_started(name))
    appended = w.run(ResourceUpdated(meta=meta(ResourceKind.VMIRS, "web"), manifest=rs_manifest(3)))
    deleted = [e.meta.aggregate.name for e in appended if isinstance(e, VMIDeleteRequested)]
    assert deleted == [names[2]]  # not running yet, first by name
    assert len(rs_vmis(w)) == 3


def test_a_repeated_decision_creates_nothing_twice() -> None:
    w = world()
    w.run(ResourceCreated(meta=meta(ResourceKind.VMIRS, "web"), manifest=rs_manifest(3)))
    assert [e for e in w.tick() if isinstance(e, VMICreated)] == []


def test_a_paused_replica_set_does_not_scale() -> None:
    w = world()
    appended = w.run(
        ResourceCreated(meta=meta(ResourceKind.VMIRS, "web"), manifest=rs_manifest(3, True))
    )
    assert not [e for e in appended if isinstance(e, VMICreated)]
    status = w.state.cluster.resources[ResourceKind.VMIRS]["default/web"].status
    assert status["conditions"][0]["type"] == "ReplicaPaused"


def test_a_pool_names_its_vms_by_ordinal_and_scales_in_from_the_highest() -> None:
    w = world()
    appended = w.run(
        ResourceCreated(meta=meta(ResourceKind.VMPOOL, "pool"), manifest=pool_manifest(3))
    )
    names = sorted(e.meta.aggregate.name for e in appended if isinstance(e, VMCreated))
    assert names == ["pool-0", "pool-1", "pool-2"]
    assert len([e for e in appended if isinstance(e, VMICreated)]) == 3  # the VMs start
    appended = w.run(
        ResourceUpdated(meta=meta(ResourceKind.VMPOOL, "pool"), manifest=pool_manifest(1))
    )
    assert sorted(e.meta.aggregate.name for e in appended if isinstance(e, VMDeleted)) == [
        "pool-1",
        "pool-2",
    ]


def test_a_pool_decides_the_same_ids_after_a_controller_restart() -> None:
    w = world()
    w.run(ResourceCreated(meta=meta(ResourceKind.VMPOOL, "pool"), manifest=pool_manifest(2)))
    restarted = World()
    for s in w.log:  # a new controller folds the same log
        restarted.fold(s.event)
    assert [e for e in restarted.tick() if isinstance(e, VMCreated)] == []
    assert sorted(restarted.state.cluster.vms) == ["default/pool-0", "default/pool-1"]


def test_label_selectors_print_as_kubernetes_does() -> None:
    sel = {
        "matchLabels": {"b": "2", "a": "1"},
        "matchExpressions": [{"key": "c", "operator": "In", "values": ["y", "x"]}],
    }
    assert rp.label_selector(sel) == "a=1,b=2,c in (x,y)"
    assert rp.selector_matches(sel, {"a": "1", "b": "2", "c": "x"})
    assert not rp.selector_matches(sel, {"a": "1", "b": "2", "c": "z"})
