"""The controller's side of live migration and drain, given/when/then on the World harness:
admission, queueing under the parallel limits, target placement, policies, failures and
cancellation, evacuation of a draining node. The handlers' events are written by hand."""

from __future__ import annotations

from collections import Counter
from typing import Any

from events.catalog import (
    DomainStopped,
    Event,
    LauncherExited,
    MigrationAbortRequested,
    MigrationFailed,
    MigrationPending,
    MigrationRequested,
    MigrationScheduled,
    MigrationStarted,
    MigrationSucceeded,
    NodeDrainRequested,
    NodeTaintsChanged,
    NodeUnresponsive,
    PolicyCreated,
    StopReason,
    Taint,
    TargetPrepared,
    TargetPreparing,
    VMIDeleteRequested,
    VMIEvictionBlocked,
)
from events.meta import Kind
from projections.render import render_node, rfc3339
from projections.views import MigrationView
from services.controller import evacuation, migration
from services.controller.policy import MigrationConfig, matching_policy
from tests.unit.test_controller_world import GiB, World, of, types

MiB = 1024**2


# ---------------------------------------------------------------------- helpers
def world(*vmis: str, nodes: tuple[str, ...] = ("node2",), **kw: Any) -> World:
    """VMIs running on node1; then the other nodes join (so nothing else lands there)."""
    w = World(**kw)
    w.given(w.node_joined("node1"))
    for name in vmis:
        w.run(w.vmi_created(name))
        w.start_running(name)
        assert w.vmi(name).node == "node1"  # type: ignore[union-attr]
    for n in nodes:
        w.given(w.node_joined(n, labels={"zone": n}))
    return w


def request(
    w: World, name: str, vmi: str, *, selector: dict[str, str] | None = None
) -> MigrationRequested:
    spec: dict[str, Any] = {"vmiName": vmi}
    if selector:
        spec["addedNodeSelector"] = selector
    manifest = {
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachineInstanceMigration",
        "metadata": {"name": name, "namespace": "default", "uid": f"mig-uid-{name}"},
        "spec": spec,
    }
    return MigrationRequested(meta=w.m(Kind.MIGRATION, name), manifest=manifest)


def node_of(w: World, vmi: str) -> str:
    v = w.vmi(vmi)
    assert v is not None
    return v.node


def mig(w: World, name: str) -> MigrationView:
    return w.state.cluster.migrations[f"default/{name}"]


def hm(w: World, name: str, node: str) -> Any:
    return w.m(Kind.MIGRATION, name, node)


def through_handoff(w: World, name: str) -> list[Event]:
    """What the target and source handlers report up to the handoff."""
    m = mig(w, name)
    out: list[Event] = []
    out += w.run(TargetPreparing(meta=hm(w, name, m.target_node), target_node=m.target_node))
    out += w.run(
        TargetPrepared(
            meta=hm(w, name, m.source_node),
            target_node=m.target_node,
            target_address=f"{m.target_node}:49152",
            target_pod_uid=m.target_pod_uid,
        )
    )
    out += w.run(MigrationStarted(meta=hm(w, name, m.source_node)))
    return out


def first(events: list[Event]) -> Any:
    assert events
    return events[0]


# ------------------------------------------------------------------------ tests
def test_migration_places_the_target_on_another_node_and_the_vmi_moves() -> None:
    w = world("vm1")
    out = w.run(request(w, "m1", "vm1"))
    assert types(out) == ["MigrationScheduling", "MigrationScheduled"]
    sched = of(out, MigrationScheduled)[0]
    assert sched.target_node == "node2" and sched.meta.node == "node2"
    assert sched.source_node == "node1" and sched.source_pod == w.vmi("vm1").pod_name  # type: ignore[union-attr]
    assert sched.target_pod.startswith("virt-launcher-vm1-") and len(sched.target_pod) == 23
    assert sched.manifest == w.vmi("vm1").manifest  # type: ignore[union-attr]
    assert sched.settings.policy == "" and sched.settings.progress_timeout == 150
    vmi = w.vmi("vm1")
    assert vmi is not None and dict(vmi.active_pods) == {
        vmi.pod_uid: "node1",
        sched.target_pod_uid: "node2",
    }

    assert through_handoff(w, "m1") == []
    assert mig(w, "m1").phase == "Running"
    out = w.run(
        MigrationSucceeded(
            meta=hm(w, "m1", "node2"), target_node="node2", target_pod_uid=sched.target_pod_uid
        )
    )
    assert out == []
    vmi = w.vmi("vm1")
    assert vmi is not None and vmi.node == "node2" and vmi.phase == "Running"
    # the source reports its domain gone (Migrated) and its launcher exited
    stopped = DomainStopped(meta=w.m(Kind.VMI, "vm1", "node1"), reason=StopReason.MIGRATED)
    assert w.run(stopped) == []
    out = w.run(
        LauncherExited(meta=w.m(Kind.VMI, "vm1", "node1"), node="node1", pod_uid="source-pod")
    )
    assert out == []
    vmi = w.vmi("vm1")
    assert vmi is not None and vmi.phase == "Running" and not vmi.launcher_exited
    assert mig(w, "m1").phase == "Succeeded"
    assert w.tick() == []


def test_source_launcher_exit_only_drops_the_source_pod() -> None:
    w = world("vm1")
    source_pod = w.vmi("vm1").pod_uid  # type: ignore[union-attr]
    sched = of(w.run(request(w, "m1", "vm1")), MigrationScheduled)[0]
    through_handoff(w, "m1")
    w.run(
        MigrationSucceeded(
            meta=hm(w, "m1", "node2"), target_node="node2", target_pod_uid=sched.target_pod_uid
        )
    )
    w.run(LauncherExited(meta=w.m(Kind.VMI, "vm1", "node1"), node="node1", pod_uid=source_pod))
    vmi = w.vmi("vm1")
    assert vmi is not None and dict(vmi.active_pods) == {sched.target_pod_uid: "node2"}
    assert not vmi.launcher_exited and vmi.pod_uid == sched.target_pod_uid


def test_never_the_source_node_and_no_target_waits_then_fails() -> None:
    w = world("vm1", nodes=(), migration_config=MigrationConfig(unschedulable_timeout=60))
    out = w.run(request(w, "m1", "vm1"))
    assert types(out) == ["MigrationScheduling"]
    assert w.tick() == []
    w.now += 30
    # a node joins: retried at once
    out = w.run(w.node_joined("node3"))
    assert types(out) == ["MigrationScheduled"] and first(out).target_node == "node3"


def test_unschedulable_target_fails_after_the_timeout() -> None:
    w = world("vm1", nodes=("node2",), migration_config=MigrationConfig(unschedulable_timeout=60))
    out = w.run(request(w, "m1", "vm1", selector={"zone": "nowhere"}))
    assert types(out) == ["MigrationScheduling"]
    w.now += 61
    out = w.settle(w.tick())
    assert types(out) == ["MigrationFailed"]
    assert first(out).reason == "Unschedulable"
    assert "0/2 nodes are available" in first(out).message
    assert "1 node(s) didn't match Pod's node affinity/selector" in first(out).message
    assert "1 node(s) didn't match pod anti-affinity rules" in first(out).message
    assert mig(w, "m1").phase == "Failed"


def test_added_node_selector_is_honoured() -> None:
    w = world("vm1", nodes=("node2", "node3"))
    out = w.run(request(w, "m1", "vm1", selector={"zone": "node3"}))
    assert of(out, MigrationScheduled)[0].target_node == "node3"


def test_a_second_migration_of_the_same_vmi_is_rejected() -> None:
    w = world("vm1")
    w.run(request(w, "m1", "vm1"))
    out = w.run(request(w, "m2", "vm1"))
    assert types(out) == ["MigrationFailed"]
    assert first(out).message == migration.IN_PROGRESS
    assert mig(w, "m1").phase == "Scheduled" and mig(w, "m2").phase == "Failed"


def test_a_vmi_that_is_not_running_is_not_migrated() -> None:
    w = World()
    w.given(w.node_joined("node1"), w.node_joined("node2"))
    w.run(w.vmi_created("vm1"))  # scheduled, never started
    out = w.run(request(w, "m1", "vm1"))
    assert types(out) == ["MigrationFailed"] and first(out).reason == "VMINotRunning"
    out = w.run(request(w, "m2", "ghost"))
    assert types(out) == ["MigrationFailed"]
    assert first(out).message == 'the VMI "default/ghost" does not exist'


def test_parallel_limits_queue_the_rest_in_pending_fifo() -> None:
    names = [f"vm{i}" for i in range(12)]
    w = World()
    # three source nodes with 4 VMIs each, then three empty targets
    for i, n in enumerate(("node1", "node2", "node3")):
        w.given(w.node_joined(n, memory=64 * GiB))  # the least allocated: takes the next 4
        for name in names[4 * i : 4 * i + 4]:
            w.run(w.vmi_created(name))
            w.start_running(name)
    for n in ("node4", "node5", "node6"):
        w.given(w.node_joined(n, memory=64 * GiB))
    by_node = {n: [v for v in names if w.vmi(v).node == n] for n in ("node1", "node2", "node3")}  # type: ignore[union-attr]
    assert all(len(v) == 4 for v in by_node.values()), by_node
    out: list[Event] = []
    for i, name in enumerate(names):
        w.now += 0.001  # creation order
        out += w.run(request(w, f"m{i:02d}", name))
    started = [m for m in w.state.cluster.migrations.values() if m.phase != "Pending"]
    assert len(started) == 5
    per_node: dict[str, int] = {}
    for m in started:
        per_node[m.source_node] = per_node.get(m.source_node, 0) + 1
    assert max(per_node.values()) <= 2
    pending = [m for m in w.state.cluster.migrations.values() if m.phase == "Pending"]
    assert len(pending) == 7
    assert all(m.message.startswith("Waiting") for m in pending)
    assert len(of(out, MigrationPending)) >= 7
    # one finishes: the oldest waiting migration that fits the limits goes next
    done = sorted(started, key=lambda m: m.name)[0]
    m = mig(w, done.name)
    through_handoff(w, done.name)
    nxt = w.run(
        MigrationSucceeded(
            meta=hm(w, done.name, m.target_node),
            target_node=m.target_node,
            target_pod_uid=m.target_pod_uid,
        )
    )
    assert "MigrationScheduling" in types(nxt)
    admitted = [e.meta.aggregate.name for e in nxt if type(e).__name__ == "MigrationScheduling"]
    waiting = sorted(pending, key=migration.order)
    busy = Counter(s.source_node for s in started if s.name != done.name)
    eligible = [p for p in waiting if busy[node_of(w, p.vmi_name)] < 2]
    assert admitted == [eligible[0].name]


def test_policy_with_most_matching_labels_wins() -> None:
    w = world()
    w.run(w.vmi_created("vm1", labels={"app": "db", "tier": "gold"}))
    w.start_running("vm1")
    w.given(w.node_joined("node2"))

    def policy(name: str, spec: dict[str, Any]) -> PolicyCreated:
        manifest = {
            "apiVersion": "migrations.kubevirt.io/v1alpha1",
            "kind": "MigrationPolicy",
            "metadata": {"name": name, "uid": f"p-{name}"},
            "spec": spec,
        }
        return PolicyCreated(meta=w.m(Kind.POLICY, name), manifest=manifest)

    w.given(
        policy("a-app", {"selectors": {"virtualMachineInstanceSelector": {"app": "db"}}}),
        policy(
            "b-gold",
            {
                "selectors": {"virtualMachineInstanceSelector": {"app": "db", "tier": "gold"}},
                "bandwidthPerMigration": "64Mi",
                "completionTimeoutPerGiB": 300,
                "allowAutoConverge": True,
            },
        ),
        policy(
            "c-ns",
            {
                "selectors": {
                    "namespaceSelector": {"kubernetes.io/metadata.name": "default"},
                    "virtualMachineInstanceSelector": {"app": "db"},
                }
            },
        ),
        policy("d-other", {"selectors": {"virtualMachineInstanceSelector": {"app": "web"}}}),
        policy("e-other-ns", {"selectors": {"namespaceSelector": {"team": "x"}}}),
    )
    vmi = w.vmi("vm1")
    assert vmi is not None
    # b-gold and c-ns both match 2 labels; b-gold matches more VMI labels
    assert matching_policy(vmi, w.state.cluster.policies.values()).name == "b-gold"  # type: ignore[union-attr]
    sched = of(w.run(request(w, "m1", "vm1")), MigrationScheduled)[0]
    s = sched.settings
    assert s.policy == "b-gold" and s.bandwidth_bytes_per_second == 64 * MiB
    assert s.completion_timeout_per_gib == 300 and s.allow_auto_converge
    assert not s.allow_post_copy and s.progress_timeout == 150
    assert mig(w, "m1").policy == "b-gold"


def test_policy_ties_go_to_name_order() -> None:
    w = world("vm1")
    for name in ("zz", "aa"):
        w.given(
            PolicyCreated(
                meta=w.m(Kind.POLICY, name),
                manifest={
                    "metadata": {"name": name},
                    "spec": {"selectors": {"virtualMachineInstanceSelector": {"app": "vm1"}}},
                },
            )
        )
    assert matching_policy(w.vmi("vm1"), w.state.cluster.policies.values()).name == "aa"  # type: ignore[arg-type, union-attr]


def test_abort_before_the_handoff_fails_it_on_the_target() -> None:
    w = world("vm1")
    w.run(request(w, "m1", "vm1"))
    w.run(TargetPreparing(meta=hm(w, "m1", "node2"), target_node="node2"))
    out = w.run(MigrationAbortRequested(meta=w.m(Kind.MIGRATION, "m1")))
    assert types(out) == ["MigrationFailed"]
    failed = first(out)
    assert failed.reason == "Aborted" and failed.meta.node == "node2"
    m = mig(w, "m1")
    assert m.phase == "Failed" and m.abort_status == "Succeeded"
    vmi = w.vmi("vm1")
    assert vmi is not None and vmi.node == "node1" and [n for _, n in vmi.active_pods] == ["node1"]


def test_abort_while_running_is_relayed_to_the_source() -> None:
    w = world("vm1")
    w.run(request(w, "m1", "vm1"))
    through_handoff(w, "m1")
    out = w.run(MigrationAbortRequested(meta=w.m(Kind.MIGRATION, "m1")))
    assert types(out) == ["MigrationAbortRequested"] and first(out).meta.node == "node1"
    assert w.tick() == []
    # already routed to the source by the api: nothing to relay
    w2 = world("vm1")
    w2.run(request(w2, "m1", "vm1"))
    through_handoff(w2, "m1")
    assert w2.run(MigrationAbortRequested(meta=w2.m(Kind.MIGRATION, "m1", "node1"))) == []


def test_abort_racing_the_transfer_start_is_relayed_after_all() -> None:
    """The source started before the controller's MigrationFailed landed (its OCC append
    conflicts, the shell folds MigrationStarted and decides again)."""
    w = world("vm1")
    w.run(request(w, "m1", "vm1"))
    w.run(TargetPreparing(meta=hm(w, "m1", "node2"), target_node="node2"))
    w.given(
        TargetPrepared(
            meta=hm(w, "m1", "node1"), target_node="node2", target_address="a", target_pod_uid="t"
        ),
        MigrationAbortRequested(meta=w.m(Kind.MIGRATION, "m1")),
        MigrationStarted(meta=hm(w, "m1", "node1")),
    )
    out = w.tick()
    assert types(out) == ["MigrationAbortRequested"] and first(out).meta.node == "node1"


def test_vmi_deleted_mid_migration_fails_it() -> None:
    w = world("vm1")
    w.run(request(w, "m1", "vm1"))
    through_handoff(w, "m1")
    out = w.run(VMIDeleteRequested(meta=w.m(Kind.VMI, "vm1", "node1")))
    failed = of(out, MigrationFailed)
    assert len(failed) == 1 and failed[0].meta.node == "node1"  # the source stops the transfer
    assert failed[0].reason == "VMIDeleted"
    # before the handoff, the target cleans up
    w = world("vm1")
    w.run(request(w, "m1", "vm1"))
    out = w.run(VMIDeleteRequested(meta=w.m(Kind.VMI, "vm1", "node1")))
    assert of(out, MigrationFailed)[0].meta.node == "node2"


def test_target_node_down_fails_the_migration_and_the_source_keeps_the_vm() -> None:
    w = world("vm1")
    w.run(request(w, "m1", "vm1"))
    through_handoff(w, "m1")
    out = w.run(NodeUnresponsive(meta=w.m(Kind.NODE, "node2"), last_heartbeat=0.0))
    failed = of(out, MigrationFailed)
    assert len(failed) == 1 and failed[0].message == "Target pod is down"
    assert failed[0].meta.node == "node1"
    vmi = w.vmi("vm1")
    assert vmi is not None and vmi.node == "node1" and vmi.phase == "Running"


def _not_migratable(w: World, name: str, strategy: str) -> None:
    ev = w.vmi_created(name, spec={"evictionStrategy": strategy})
    spec = ev.manifest["spec"]
    spec["domain"]["devices"]["interfaces"] = [{"name": "default", "bridge": {}}]
    spec["networks"] = [{"name": "default", "pod": {}}]
    w.run(ev)
    w.start_running(name)


def test_drain_migrates_live_migrate_vmis_deletes_the_rest_and_reports_the_stuck() -> None:
    w = World()
    w.given(w.node_joined("node1"))
    for name, strategy in (("mig-a", "LiveMigrate"), ("mig-b", "LiveMigrateIfPossible")):
        w.run(w.vmi_created(name, spec={"evictionStrategy": strategy}))
        w.start_running(name)
    w.run(w.vmi_created("plain"))  # evictionStrategy None
    w.start_running("plain")
    _not_migratable(w, "stuck", "LiveMigrate")
    _not_migratable(w, "maybe", "LiveMigrateIfPossible")
    w.given(w.node_joined("node2"))

    out = w.run(NodeDrainRequested(meta=w.m(Kind.NODE, "node1")))
    requested = of(out, MigrationRequested)
    assert sorted(r.manifest["spec"]["vmiName"] for r in requested) == ["mig-a", "mig-b"]
    for r in requested:
        md = r.manifest["metadata"]
        assert md["name"].startswith("kubevirt-evacuation-") and len(md["name"]) == 25
        assert md["annotations"][evacuation.EVACUATION_ANNOTATION] == "node1"
    assert {e.target_node for e in of(out, MigrationScheduled)} == {"node2"}
    deleted = of(out, VMIDeleteRequested)
    assert sorted(d.meta.aggregate.name for d in deleted) == ["maybe", "plain"]
    assert all(d.meta.node == "node1" for d in deleted)
    blocked = of(out, VMIEvictionBlocked)
    assert [b.meta.aggregate.name for b in blocked] == ["stuck"]
    assert blocked[0].message == (
        "VMI stuck is configured with an eviction strategy but is not live-migratable"
    )
    assert w.tick() == []  # level-triggered: nothing twice


def test_drain_retries_a_failed_evacuation_after_a_pause() -> None:
    w = World(migration_config=MigrationConfig(evacuation_retry_seconds=10))
    w.given(w.node_joined("node1"))
    w.run(w.vmi_created("a", spec={"evictionStrategy": "LiveMigrate"}))
    w.start_running("a")
    w.given(w.node_joined("node2"))
    out = w.run(NodeDrainRequested(meta=w.m(Kind.NODE, "node1")))
    first = of(out, MigrationRequested)[0].meta.aggregate.name
    w.run(MigrationAbortRequested(meta=w.m(Kind.MIGRATION, first)))
    assert mig(w, first).phase == "Failed"
    assert w.tick() == []
    w.now += 11
    out = w.settle(w.tick())
    again = of(out, MigrationRequested)
    assert len(again) == 1 and again[0].meta.aggregate.name != first


def test_a_drained_node_empties_once_the_migrations_complete() -> None:
    w = World()
    w.given(w.node_joined("node1"))
    for name in ("a", "b", "c"):
        w.run(w.vmi_created(name, spec={"evictionStrategy": "LiveMigrate"}))
        w.start_running(name)
    w.given(w.node_joined("node2"), w.node_joined("node3"))
    w.run(NodeDrainRequested(meta=w.m(Kind.NODE, "node1")))
    for _ in range(5):
        for m in list(w.state.cluster.migrations.values()):
            if m.phase == "Scheduled":
                through_handoff(w, m.name)
                w.run(
                    MigrationSucceeded(
                        meta=hm(w, m.name, m.target_node),
                        target_node=m.target_node,
                        target_pod_uid=m.target_pod_uid,
                    )
                )
    assert [v.name for v in w.state.cluster.vmis_on("node1")] == []
    assert all(m.phase == "Succeeded" for m in w.state.cluster.migrations.values())
    assert len(w.state.cluster.migrations) == 3


def test_a_no_execute_taint_evicts_what_does_not_tolerate_it() -> None:
    """Kubernetes' taint manager evicts a NoExecute-tainted node's pods that do not
    tolerate the taint; a launcher pod's eviction goes as a drain's does (KubeVirt's
    eviction webhook migrates a LiveMigrate VMI); `tolerationSeconds` delays it, a
    toleration without them keeps the VMI for good."""
    w = World()
    w.given(w.node_joined("node1"))
    w.run(w.vmi_created("mig", spec={"evictionStrategy": "LiveMigrate"}))
    w.start_running("mig")
    w.run(w.vmi_created("plain"))
    w.start_running("plain")
    gone_soon = {"key": "maintenance", "operator": "Exists", "tolerationSeconds": 30}
    w.run(w.vmi_created("later", spec={"tolerations": [gone_soon]}))
    w.start_running("later")
    forever = {"key": "maintenance", "operator": "Equal", "value": "now", "effect": "NoExecute"}
    w.run(w.vmi_created("stays", spec={"tolerations": [forever]}))
    w.start_running("stays")
    w.given(w.node_joined("node2"))

    taint = Taint(key="maintenance", value="now", effect="NoExecute")
    out = w.run(NodeTaintsChanged(meta=w.m(Kind.NODE, "node1"), taints=(taint,)))
    assert [r.manifest["spec"]["vmiName"] for r in of(out, MigrationRequested)] == ["mig"]
    assert {e.target_node for e in of(out, MigrationScheduled)} == {"node2"}
    assert [d.meta.aggregate.name for d in of(out, VMIDeleteRequested)] == ["plain"]
    node = render_node(w.state.cluster, w.state.cluster.nodes["node1"], w.now)
    assert node["spec"]["taints"][0]["timeAdded"] == rfc3339(w.now)
    assert w.tick() == []  # level-triggered: nothing twice, "later" not due yet
    w.now += 31
    later = of(w.settle(w.tick()), VMIDeleteRequested)
    assert [d.meta.aggregate.name for d in later] == ["later"]
    w.now += 3600
    assert of(w.settle(w.tick()), VMIDeleteRequested) == []  # "stays" tolerates it
