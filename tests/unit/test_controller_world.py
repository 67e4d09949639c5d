"""A tiny in-memory world for the controller's pure tests: events are folded through the
ControllerReactor's evolve with increasing sequence numbers, and decisions are fed back as if the
shell had appended them. Also the end-to-end happy path on plain data."""

from __future__ import annotations

from typing import Any

from events import subjects
from events.catalog import (
    DomainStarted,
    DomainStopped,
    Event,
    LauncherExited,
    LauncherStarted,
    NodeJoined,
    PodScheduled,
    Resources,
    StopReason,
    Taint,
    VMCreated,
    VMICreated,
    VMIDeleteRequested,
    VMIRemoved,
)
from events.codec import event_type
from events.envelope import Context, Stored
from events.meta import Kind, KindToken
from projections.views import VMIView, VMView
from services.controller.node_health import HeartbeatSeen, WatchStarted
from services.controller.reactor import ControllerReactor
from tests.factories import meta, vm_manifest, vmi_manifest

GiB = 1024**3


class World:
    def __init__(self, now: float = 1000.0, **controller: Any) -> None:
        # nodes never time out unless a test says so (its clock jumps around)
        controller.setdefault("node_timeout", 1e9)
        self.controller = ControllerReactor(**controller)
        self.state = self.controller.initial_state()
        self.seq = 0
        self.now = now
        self.log: list[Stored] = []
        self.ids: set[str] = set()

    # ---------------------------------------------------------------- plumbing
    def fold(self, ev: Event) -> Stored:
        self.seq += 1
        subject = subjects.event_subject(ev.meta.aggregate, event_type(ev), ev.meta.node)
        s = Stored(seq=self.seq, subject=subject, time=self.now, event=ev)
        self.state = self.controller.evolve(self.state, s)
        self.log.append(s)
        self.ids.add(ev.meta.event_id)
        return s

    def heartbeat(self, node: str, at: float) -> None:
        """The heartbeat watch saw `node`'s handler alive at `at`."""
        self.state = self.controller.observe(self.state, HeartbeatSeen(node, at))

    def watch_started(self, at: float) -> None:
        self.state = self.controller.observe(self.state, WatchStarted(at))

    def react(self, s: Stored) -> list[Event]:
        ctx = Context("virt-controller", "", self.now, s)
        return [d.event for d in self.controller.react(self.state, s, ctx)]

    def tick(self) -> list[Event]:
        ctx = Context("virt-controller", "", self.now, None)
        return [d.event for d in self.controller.tick(self.state, ctx)]

    def given(self, *events: Event) -> None:
        """Events that already happened (folded, no reactions)."""
        for ev in events:
            self.fold(ev)

    def when(self, ev: Event) -> list[Event]:
        """An outside event arrives: fold it, return what the controller decides."""
        return self.react(self.fold(ev))

    def settle(self, decided: list[Event], rounds: int = 200) -> list[Event]:
        """As the shell does: append a reaction's decisions (a repeated event id is a
        duplicate JetStream drops), then react to each as the consumer delivers them back,
        until the controller is quiet. Returns everything appended."""
        appended: list[Event] = []
        batches = [decided]
        for _ in range(rounds):
            if not batches:
                return appended
            stored = [self.fold(ev) for ev in batches.pop(0) if ev.meta.event_id not in self.ids]
            appended += [s.event for s in stored]
            batches += [r for s in stored if (r := self.react(s))]
        raise AssertionError("controller did not settle")

    def run(self, ev: Event) -> list[Event]:
        return self.settle(self.when(ev))

    # ------------------------------------------------------------------ views
    def vm(self, name: str = "vm1") -> VMView:
        return self.state.cluster.vms[f"default/{name}"]

    def vmi(self, name: str = "vm1") -> VMIView | None:
        return self.state.cluster.vmis.get(f"default/{name}")

    # ----------------------------------------------------------------- events
    def m(self, kind: KindToken, name: str, node: str = "") -> Any:
        return meta(
            kind, name, namespace="" if kind == Kind.NODE else "default", node=node, at=self.now
        )

    def node_joined(
        self,
        name: str,
        *,
        cpu: int = 8000,
        memory: int = 16 * GiB,
        labels: dict[str, str] | None = None,
        taints: tuple[Taint, ...] = (),
        pod_cidr: str = "",
    ) -> NodeJoined:
        return NodeJoined(
            meta=self.m(Kind.NODE, name),
            node=name,
            capacity=Resources(cpu_millis=cpu, memory_bytes=memory),
            labels=labels or {},
            taints=taints,
            pod_cidr=pod_cidr,
        )

    def vm_created(self, name: str = "vm1", strategy: str = "Always", **kw: Any) -> VMCreated:
        return VMCreated(meta=self.m(Kind.VM, name), manifest=vm_manifest(name, strategy, **kw))

    def vmi_created(self, name: str, **kw: Any) -> VMICreated:
        return VMICreated(meta=self.m(Kind.VMI, name), manifest=vmi_manifest(name, **kw))

    def launcher_started(self, name: str = "vm1") -> LauncherStarted:
        vmi = self.vmi(name)
        assert vmi is not None
        return LauncherStarted(
            meta=self.m(Kind.VMI, name, vmi.node), node=vmi.node, pod_uid=vmi.pod_uid, pid=42
        )

    def domain_started(self, name: str = "vm1") -> DomainStarted:
        vmi = self.vmi(name)
        assert vmi is not None
        return DomainStarted(meta=self.m(Kind.VMI, name, vmi.node), node=vmi.node, domain=name)

    def domain_stopped(self, name: str = "vm1", reason: StopReason = StopReason.SHUTDOWN) -> Any:
        vmi = self.vmi(name)
        assert vmi is not None
        return DomainStopped(meta=self.m(Kind.VMI, name, vmi.node), reason=reason)

    def launcher_exited(self, name: str = "vm1") -> LauncherExited:
        vmi = self.vmi(name)
        assert vmi is not None
        return LauncherExited(
            meta=self.m(Kind.VMI, name, vmi.node), node=vmi.node, pod_uid=vmi.pod_uid
        )

    def start_running(self, name: str = "vm1") -> None:
        """The handler side of a start: launcher up, domain running."""
        self.run(self.launcher_started(name))
        self.run(self.domain_started(name))

    def stop_guest(
        self, name: str = "vm1", reason: StopReason = StopReason.SHUTDOWN
    ) -> list[Event]:
        """The guest stops, the launcher exits; returns all the controller did."""
        out = self.run(self.domain_stopped(name, reason))
        return out + self.run(self.launcher_exited(name))


def types(events: list[Event]) -> list[str]:
    return [event_type(e) for e in events]


def of(events: list[Event], cls: type) -> list[Any]:
    return [e for e in events if isinstance(e, cls)]


# ------------------------------------------------------------------------- tests
def test_vm_always_creates_a_vmi_and_schedules_it() -> None:
    w = World()
    w.given(w.node_joined("node1"))
    out = w.run(w.vm_created("vm1", labels={"app": "web"}))
    assert types(out) == ["VMICreated", "PodScheduled"]
    created, scheduled = out
    assert isinstance(created, VMICreated) and isinstance(scheduled, PodScheduled)
    md = created.manifest["metadata"]
    assert md["labels"] == {"app": "web"} and md["uid"] == w.vmi().uid  # type: ignore[union-attr]
    assert md["ownerReferences"] == [
        {
            "apiVersion": "kubevirt.io/v1",
            "kind": "VirtualMachine",
            "name": "vm1",
            "uid": "uid-vm1",
            "controller": True,
            "blockOwnerDeletion": True,
        }
    ]
    assert created.owner_vm_uid == "uid-vm1"
    assert scheduled.node == "node1" and scheduled.meta.node == "node1"
    assert scheduled.pod_name.startswith("virt-launcher-vm1-") and len(scheduled.pod_name) == 23
    assert scheduled.manifest == created.manifest


def test_a_repeated_event_decides_nothing_new() -> None:
    w = World()
    w.given(w.node_joined("node1"))
    s = w.fold(w.vm_created())
    first = w.react(s)
    w.settle(first)
    assert w.react(s) == []  # redelivered
    assert w.tick() == []


def test_same_decision_twice_gets_the_same_event_id_and_uid() -> None:
    """A crash before the append is folded: deciding again yields identical ids."""
    w = World()
    s = w.fold(w.vm_created())
    a, b = w.react(s), w.react(s)
    assert [e.meta.event_id for e in a] == [e.meta.event_id for e in b]
    assert (
        of(a, VMICreated)[0].manifest["metadata"]["uid"]
        == of(b, VMICreated)[0].manifest["metadata"]["uid"]
    )
    assert w.tick()[0].meta.event_id == a[0].meta.event_id


def test_deleting_the_vm_deletes_its_vmi() -> None:
    from events.catalog import VMDeleted

    w = World()
    w.given(w.node_joined("node1"))
    w.run(w.vm_created())
    w.start_running()
    out = w.run(VMDeleted(meta=w.m(Kind.VM, "vm1")))
    assert types(out) == ["VMIDeleteRequested"]
    assert isinstance(out[0], VMIDeleteRequested) and out[0].meta.node == "node1"
    out = w.stop_guest()
    assert types(out) == ["VMIRemoved"]
    assert "default/vm1" not in w.state.cluster.vms  # gone with its VMI
    assert isinstance(out[0], VMIRemoved)
